// Module kustomize builds the kustomize releases that the tools users install with bundle, each
// from its own module file (kustomize-vX.Y.Z.mod, with its .sum), so that the manifests test can
// render every kustomization with each of them. This go.mod only marks the module's root: every
// build names its module file with -modfile. Kept apart from the main go.mod on purpose.
module github.com/startup-taint-remover/startup-taint-remover/hack/kustomize

go 1.26.0

toolchain go1.26.10
