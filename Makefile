# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Image URL to use all building/pushing image targets.
IMG ?= startup-taint-remover:latest
# The image repository a release's install.yaml and chart point at; the tag is VERSION.
IMAGE_REPO ?= startup-taint-remover
# The container engine for docker-build and docker-push.
CONTAINER_TOOL ?= docker

# Version stamped into the binary and its startup_taint_build_info metric.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS ?= -X github.com/startup-taint-remover/startup-taint-remover/internal/metrics.version=$(VERSION)

# Kubernetes version of the envtest control plane; built from source by hack/envtest.
ENVTEST_K8S_VERSION ?= 1.37.2
GOOS ?= $(shell go env GOOS)
GOARCH ?= $(shell go env GOARCH)
# Where setup-envtest keeps its binaries, so either tool finds the other's. KUBEBUILDER_ASSETS wins.
ENVTEST_DIR ?= $(HOME)/.local/share/kubebuilder-envtest/k8s
ENVTEST_ASSETS ?= $(ENVTEST_DIR)/$(ENVTEST_K8S_VERSION)-$(GOOS)-$(GOARCH)
KUBEBUILDER_ASSETS ?= $(ENVTEST_ASSETS)
export KUBEBUILDER_ASSETS
# Where hack/kustomize builds the kustomize releases, once per machine like the envtest binaries;
# the manifests test reads it too.
KUSTOMIZE_RELEASES ?= $(HOME)/.local/share/startup-taint-remover/kustomize
export KUSTOMIZE_RELEASES

# Every go command follows its module's toolchain line (go1.26.10, whose standard library has no
# known vulnerability the binary reaches), downloading it from the module proxy once, even where
# the machine's Go defaults to GOTOOLCHAIN=local and would build with itself.
export GOTOOLCHAIN = auto

# Every build but the race detector's is static and trimmed, as a release's linux/amd64 binary is
# (RELEASE_GOFLAGS): the tests, the demo, the tools and that release share one build of each
# package, where two configurations compiled every dependency twice on an empty cache. The race
# detector needs cgo: RACE turns it back on for its builds.
export CGO_ENABLED = 0
export GOFLAGS := $(strip $(shell go env GOFLAGS) -trimpath)
RACE = CGO_ENABLED=1 go test -race

# Setting SHELL to bash allows bash commands to be executed by recipes.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

# Where the tests write their timings: go test's output (*.log) and each Ginkgo suite's JSON report
# (*.json, through TEST_TIMINGS_DIR), which make test-timings reads.
TIMINGS_DIR ?= $(CURDIR)/bin/timings
export TEST_TIMINGS_DIR = $(TIMINGS_DIR)

# make test runs in lanes side by side (hack/lanes.sh): the end-to-end and manifests suites mostly
# wait on their API servers, kubelets and controllers, so each runs as several processes of one
# build of its test binary, split by Ginkgo labels, beside go test of every other package.
TEST_BIN_DIR = $(CURDIR)/bin/test
# -timeout: the longest lane ran 4 min on a 2-core machine; go test's default stops a package at
# 10 min.
TEST_TIMEOUT = 20m
# Each lane's label filter, without spaces.
E2E_LANES = reboot&&drained reboot&&!drained !reboot
MANIFESTS_LANES = install-table !install-table
suite_lane = $(1)-$(subst !,not-,$(subst &&,-,$(2))) "cd test/$(1) && '$(TEST_BIN_DIR)/$(1).test' -test.timeout=$(TEST_TIMEOUT) -ginkgo.label-filter='$(2)'"

.PHONY: test
test: fmt envtest chart-tool kustomize-releases test-binaries ## Run the unit, envtest and end-to-end tests (the race detector on, but for the manifests suite), and the chart tool's, PromQL and kubectl plugin's tests.
	@# -count=1: the end-to-end tests build the binary themselves, and the chart's tests read the
	@# chart, which go test's cache cannot see.
	rm -rf "$(TIMINGS_DIR)"
	hack/lanes.sh "$(TIMINGS_DIR)" \
		packages "$(RACE) -count=1 -timeout $(TEST_TIMEOUT) \$$(go list ./... | grep -v -e /test/e2e\$$ -e /test/manifests\$$) -coverprofile cover.out" \
		modules "go -C hack/chart test -count=1 ./... && go -C hack/promql test -count=1 ./... && go -C $(PLUGIN_DIR) test -count=1 ./..." \
		$(foreach l,$(E2E_LANES),$(call suite_lane,e2e,$(l))) $(foreach l,$(MANIFESTS_LANES),$(call suite_lane,manifests,$(l)))

# The minors make test-minors runs on, besides ENVTEST_K8S_VERSION's (make test): the newest below
# the oldest supported one, where the agent must fail closed, the supported ones, and the next one
# before its release.
K8S_MINORS ?= 1.32 1.33 1.34 1.35 1.36 1.38
# The release each minor's tests run on: its own build (a tools module of hack/envtest/minors), or,
# for a minor not named here, ENVTEST_K8S_VERSION's kube-apiserver emulating it (--emulated-version,
# up to three minors back). K8S_BINARIES_<minor> names what its build holds, kube-apiserver alone
# unless set (1.38 has no kubemark: its tests run the 1.37 hollow kubelet).
K8S_RELEASE_1.32 = 1.32.13
K8S_RELEASE_1.33 = 1.33.13
K8S_RELEASE_1.38 = 1.38.0-beta.0
K8S_BINARIES_1.33 = kube-apiserver kubemark
# The newest minor below the oldest supported one (startuptaint.MinKubernetesMinor).
K8S_BELOW_MINIMUM = 1.32
# The minor whose API server the oldest supported kubelet (1.33's kubemark) is tested against:
# three minors newer, as far as kubelet's version skew policy reaches.
K8S_KUBELET_SKEW_SERVER ?= 1.36

# MINOR's release, the environment of its tests (ENVTEST_K8S_VERSION's hollow kubelet where its
# build has none), and what it runs: below the minimum, the attack
# table and the agent that writes nothing; on every other minor, what its API server can change
# (each distinct policy render compiled and attacked, the self-check, the binary, the served kinds)
# and none of the specs that only read a render (labelled render-only).
minor_release = $(K8S_RELEASE_$(MINOR))
minor_env = $(if $(minor_release),ENVTEST_K8S_VERSION=$(minor_release) KUBEBUILDER_ASSETS="$(ENVTEST_DIR)/$(minor_release)-$(GOOS)-$(GOARCH)" \
	$(if $(filter kubemark,$(K8S_BINARIES_$(MINOR))),,KUBEMARK="$(ENVTEST_ASSETS)/kubemark"),ENVTEST_EMULATED_VERSION=$(MINOR))
below_minimum = $(filter $(MINOR),$(K8S_BELOW_MINIMUM))
minor_labels = $(if $(below_minimum),below-minimum,every-minor)
manifests_labels = $(if $(below_minimum),below-minimum,!render-only)&&!same-policy-render

.PHONY: test-minors
test-minors: envtest chart-tool kustomize-releases test-binaries ## Run test-minor on each of K8S_MINORS, side by side (hack/lanes.sh).
	hack/lanes.sh "$(TIMINGS_DIR)" $(foreach m,$(K8S_MINORS),minor-$(m) "$(MAKE) --no-print-directory test-minor-run MINOR=$(m)")

.PHONY: test-minor
test-minor: envtest chart-tool kustomize-releases test-binaries ## Run on MINOR (e.g. MINOR=1.34) what its API server changes: each distinct policy render compiled and attacked, the self-check, the binary; below the minimum, the attack table and the agent that writes nothing.
	$(MAKE) --no-print-directory test-minor-run MINOR=$(MINOR)

# test-minor once what every minor shares is built: it builds MINOR's own binaries alone, so that
# test-minors' lanes never build one thing at once.
.PHONY: test-minor-run
test-minor-run:
	$(build-minor)
	@# Each suite runs again, once, when the API server exits under it (hack/envtest/retry-on-exit.sh):
	@# 1.33.13's did, in the second the binary's agent started, in a run of 2026-12-07.
	cd test/manifests && $(minor_env) ../../hack/envtest/retry-on-exit.sh "$(TEST_BIN_DIR)/manifests.test" -test.timeout=$(TEST_TIMEOUT) \
		-ginkgo.label-filter='$(manifests_labels)'
	$(if $(below_minimum),,cd controllers && $(minor_env) ../hack/envtest/retry-on-exit.sh "$(TEST_BIN_DIR)/controllers.test" \
		-test.run='^TestControllers$$' -ginkgo.label-filter=every-minor)
	cd test/e2e && $(minor_env) ../../hack/envtest/retry-on-exit.sh "$(TEST_BIN_DIR)/e2e.test" -test.timeout=$(TEST_TIMEOUT) \
		-ginkgo.label-filter=$(minor_labels)

# The race detector runs where the project's concurrency lives: the controllers' specs, every unit
# test and the end-to-end suite's drivers and kubelets. The manifests suite asks an API server for
# its verdicts and renders installs, CPU-bound work the detector only slows.
.PHONY: test-binaries
test-binaries: ## Build the test binaries that make test and test-minor run in lanes, into bin/test.
	mkdir -p "$(TEST_BIN_DIR)"
	$(RACE) -c -o "$(TEST_BIN_DIR)/e2e.test" ./test/e2e
	go test -c -o "$(TEST_BIN_DIR)/manifests.test" ./test/manifests
	$(RACE) -c -o "$(TEST_BIN_DIR)/controllers.test" ./controllers

# The minor whose own build shows that --emulated-version gives the same verdicts (make test-emulation).
K8S_EMULATION_CHECK ?= 1.36.3

.PHONY: test-emulation
test-emulation: envtest chart-tool kustomize-releases test-binaries ## Build K8S_EMULATION_CHECK's own kube-apiserver and kubemark and run test-minor's tests on them, to compare with its emulation.
	$(MAKE) --no-print-directory test-minor-run MINOR=1.36 K8S_RELEASE_1.36=$(K8S_EMULATION_CHECK) K8S_BINARIES_1.36="kube-apiserver kubemark"

.PHONY: test-kubelet-skew
test-kubelet-skew: envtest test-binaries ## Run the hollow-kubelet specs with the oldest supported kubelet (1.33's kubemark) against a newer API server.
	$(MAKE) --no-print-directory test-minor-binaries MINOR=1.33
	cd test/e2e && ENVTEST_EMULATED_VERSION=$(K8S_KUBELET_SKEW_SERVER) KUBEMARK="$(ENVTEST_DIR)/$(K8S_RELEASE_1.33)-$(GOOS)-$(GOARCH)/kubemark" \
		"$(TEST_BIN_DIR)/e2e.test" -test.timeout=$(TEST_TIMEOUT) -ginkgo.focus='with the real kubelet'

# The version test-release builds and tests; the release workflow sets the tag's, to compare.
TEST_VERSION ?= v0.0.0-test
# Where test-release builds its releases and its throwaway signing key.
TEST_RELEASE_DIR = $(CURDIR)/bin/test-release
# cosign stays on this machine in the tests: key-based signing and verification need no
# transparency log, and its look-up of Sigstore's public roots fails on loopback.
TEST_COSIGN_ENV = COSIGN_PASSWORD= TUF_ROOT="$(TEST_RELEASE_DIR)/tuf" TUF_MIRROR=http://127.0.0.1:1

.PHONY: test-release
test-release: envtest chart-tool ## Build the release twice (TEST_VERSION, signed with a throwaway key) and test what users pull: the image layout, its binaries (amd64 against a real API server), the SBOMs, the same digest twice, the chart from an OCI registry pinned by digest, the signatures.
	rm -rf "$(TEST_RELEASE_DIR)" && mkdir -p "$(TEST_RELEASE_DIR)/key"
	$(TEST_COSIGN_ENV) $(COSIGN) generate-key-pair --output-key-prefix "$(TEST_RELEASE_DIR)/key/cosign"
	$(TEST_COSIGN_ENV) $(MAKE) --no-print-directory release VERSION=$(TEST_VERSION) DIST="$(TEST_RELEASE_DIR)/dist" SIGNING_KEY="$(TEST_RELEASE_DIR)/key/cosign.key"
	$(MAKE) --no-print-directory release VERSION=$(TEST_VERSION) DIST="$(TEST_RELEASE_DIR)/again"
	RELEASE_VERSION=$(TEST_VERSION) RELEASE_DIST="$(TEST_RELEASE_DIR)/dist" RELEASE_DIST_AGAIN="$(TEST_RELEASE_DIR)/again" go test -tags release -count=1 -v ./test/release
	RELEASE_VERSION=$(TEST_VERSION) RELEASE_DIST="$(TEST_RELEASE_DIR)/dist" RELEASE_SIGNING_KEY="$(TEST_RELEASE_DIR)/key/cosign.key" go -C hack/release test -count=1 -v ./...

.PHONY: test-timings
test-timings: ## Print the ten slowest test packages and specs of the last make test (and test-minors), from TIMINGS_DIR.
	go run ./test/timings "$(TIMINGS_DIR)"

# The package that holds the fuzz targets, and the targets make fuzz runs; startuptaint's
# TestMakeFuzzNamesExistingTargets fails when one of them is gone.
FUZZ_PACKAGE = ./startuptaint
FUZZ_TARGETS = FuzzParseTaintSpec FuzzWithoutTaints
FUZZTIME ?= 1m
.PHONY: fuzz
fuzz: ## Fuzz the taint flag parser and the taint filter for FUZZTIME each (make test runs their seed corpus).
	for target in $(FUZZ_TARGETS); do \
		go test $(FUZZ_PACKAGE) -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME); \
	done

.PHONY: docs
docs: ## Write the flag reference, docs/flags.md, from the binary's own flag set.
	UPDATE_DOCS=1 go test ./cmd -run '^TestTheFlagReferenceIsCurrent$$' -count=1

.PHONY: verify
verify: manifests ## Check that what is generated or formatted is current: the RBAC from the markers, the flag reference, every go.mod and go.sum, gofmt.
	@git diff --exit-code -- config/ || { echo "config/ is stale: run 'make manifests' and commit the result" >&2; exit 1; }
	@go test ./cmd -run '^TestTheFlagReferenceIsCurrent$$' -count=1 >/dev/null || { echo "docs/flags.md is stale: run 'make docs' and commit the result" >&2; exit 1; }
	@for dir in $(GO_MODULES); do \
		go -C "$$dir" mod tidy -diff >/dev/null || { echo "$$dir/go.mod is not tidy: run 'go -C $$dir mod tidy' and commit the result" >&2; exit 1; }; \
	done
	@unformatted=$$(git ls-files '*.go' | xargs gofmt -l); [[ -z "$$unformatted" ]] || { echo "gofmt would change: $$unformatted" >&2; exit 1; }

# The Go modules with code of the project's own; the tools modules (hack/envtest, hack/kustomize,
# hack/vuln) pin others' commands, and their scripts write them.
GO_MODULES = . hack/chart hack/promql hack/release $(PLUGIN_DIR)

.PHONY: lint
lint: golangci-lint helm-lint actionlint ## Run golangci-lint on the five Go modules with code, lint the Helm chart and the GitHub workflows.
	"$(ACTIONLINT)" -shellcheck= .github/workflows/*.yaml
	"$(GOLANGCI_LINT)" run
	cd hack/chart && "$(GOLANGCI_LINT)" run
	cd hack/promql && "$(GOLANGCI_LINT)" run
	cd hack/release && "$(GOLANGCI_LINT)" run
	cd $(PLUGIN_DIR) && "$(GOLANGCI_LINT)" run

.PHONY: helm-lint
helm-lint: chart-tool ## Lint the Helm chart, strictly, with its default values and each driver's values file.
	"$(CHART_TOOL)" lint charts/startup-taint-remover
	for f in charts/startup-taint-remover/ci/*-values.yaml; do "$(CHART_TOOL)" lint charts/startup-taint-remover -f "$$f"; done

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and apply its fixes.
	"$(GOLANGCI_LINT)" run --fix

.PHONY: bench
bench: envtest build drivers ## Benchmark reaction time, memory, API cost, a fleet start, the start with a real kubelet, pods by removal strategy, pods after a reboot, the kubectl plugin on 5,000 Nodes, every node agent of a booting fleet, the memory a tenant's objects cost, a cold start whose node agent needs a pod that does not tolerate the taint, and the EBS and GCP PD drivers' own taint removal beside the agent; writes docs/bench/.
	go build -o bin/bench-baseline ./test/bench/baseline
	go build -o bin/bench-floor ./test/bench/floor
	go run ./test/bench --binary=bin/startup-taint-remover --baseline=bin/bench-baseline --floor=bin/bench-floor --out=docs/bench --drivers-dir="$(DRIVERS_DIR)"

.PHONY: drivers
drivers: ## Build the EBS and GCP PD CSI drivers' node plugins from the Go modules hack/drivers pins, into DRIVERS_DIR (once; skipped when present).
	hack/drivers/build.sh "$(DRIVERS_DIR)"

# The demo builds the binary without vet's checks, which on a fresh machine would first compile
# every test dependency.
.PHONY: demo
demo: envtest binary ## Run the binary against a local control plane, a hollow kubelet, a demo CSI driver and a pod that needs it.
	go run ./test/demo --binary=bin/startup-taint-remover

##@ Security

# The Go vulnerability database, built from the golang.org/x/vulndb module hack/vuln pins, once per
# version of it.
VULNDB ?= $(HOME)/.cache/startup-taint-remover/vulndb-$(shell sed -n 's/^\tgolang.org\/x\/vulndb \(v[^ ]*\).*/\1/p' hack/vuln/go.mod)
# A release whose binaries make vuln scans; empty, it builds one into bin/vuln.
VULN_DIST ?=

.PHONY: vuln
vuln: kustomize chart-tool ## Scan every Go module's source and each release binary with govulncheck against the vulnerability database pinned in hack/vuln; fail on any vulnerability the code reaches.
	@dist="$(VULN_DIST)"; if [[ -z "$$dist" ]]; then dist=bin/vuln; \
		$(MAKE) --no-print-directory release VERSION=v0.0.0-vuln DIST=$$dist >/dev/null; fi; \
	hack/vuln/scan.sh "$(VULNDB)" "$$dist"/startup-taint-remover-linux-{amd64,arm64} "$$dist"/kubectl-startup_taints-*.tar.gz

##@ Build

.PHONY: build
build: fmt vet binary ## Check (fmt, vet) and build the startup-taint-remover binary.

.PHONY: binary
binary: ## Build the startup-taint-remover binary alone.
	go build -ldflags "$(LDFLAGS)" -o bin/startup-taint-remover ./cmd

# The kubectl plugin is a module of its own, so that k8s.io/cli-runtime stays out of the go.mod
# that drivers importing controllers see.
PLUGIN_DIR = cmd/kubectl-startup_taints
.PHONY: plugin
plugin: ## Build the kubectl plugin (kubectl startup-taints) into bin/.
	go -C $(PLUGIN_DIR) build -ldflags "$(LDFLAGS)" -o $(CURDIR)/bin/kubectl-startup_taints .

.PHONY: run
run: fmt vet ## Run the controller from your host against the cluster in KUBECONFIG.
	go run ./cmd $(ARGS)

# The platforms a release builds the kubectl plugin for; hack/krew/startup-taints.yaml lists the same.
PLUGIN_PLATFORMS = linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

# The flags of every release and image build; the Dockerfile's go build line uses the same, and
# test/release runs that line to check it. -buildvcs=false: the Dockerfile builds without .git, and
# a release's bytes must not depend on the work tree's state.
RELEASE_GOFLAGS = -trimpath -buildvcs=false -ldflags "-s -w $(LDFLAGS)"
# Where make release writes; test-release writes elsewhere.
DIST ?= dist
# The repository, the image's source label.
SOURCE_URL ?= https://github.com/startup-taint-remover/startup-taint-remover
# Every time in a release is the commit's, so two builds of one commit are the same bytes.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
# A cosign private key that signs checksums.txt (COSIGN_PASSWORD unlocks it). The release
# workflow leaves it empty and signs keyless instead.
SIGNING_KEY ?=
# cosign, pinned in hack/release's go.mod; go tool builds it once into the build cache.
COSIGN = go -C $(CURDIR)/hack/release tool cosign

.PHONY: release
release: kustomize chart-tool ## Write DIST (dist/) for VERSION=vX.Y.Z: the multi-arch image (an OCI layout) and its SBOMs, install.yaml and the chart pinned to it by digest, static linux binaries, the kubectl plugin and its krew manifest, checksums (signed with SIGNING_KEY).
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$ ]] || { echo "VERSION: \"$(VERSION)\" is not vX.Y.Z" >&2; exit 2; }
	@[[ -n "$(SOURCE_DATE_EPOCH)" ]] || { echo "SOURCE_DATE_EPOCH: empty and no commit to take it from" >&2; exit 2; }
	@[[ -z "$(SIGNING_KEY)" || -f "$(SIGNING_KEY)" ]] || { echo "SIGNING_KEY: no file $(SIGNING_KEY)" >&2; exit 2; }
	rm -rf "$(DIST)" && mkdir -p "$(DIST)"
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch go build $(RELEASE_GOFLAGS) -o "$(DIST)/startup-taint-remover-linux-$$arch" ./cmd; \
	done
	@# The image (one layer: the binary) and an SBOM per architecture; the chart and install.yaml
	@# pin the image index by digest.
	go -C hack/release run . image -dist "$(abspath $(DIST))" -version "$(VERSION)" -revision "$$(git rev-parse HEAD)" \
		-source "$(SOURCE_URL)" -created "$(SOURCE_DATE_EPOCH)" > "$(DIST)/.digest"
	cp -r config "$(DIST)/.config"
	cd "$(DIST)/.config/manager" && "$(KUSTOMIZE)" edit set image controller=$(IMAGE_REPO):$(VERSION)@$$(cat "$(abspath $(DIST))/.digest")
	"$(KUSTOMIZE)" build "$(DIST)/.config/default" > "$(DIST)/install.yaml"
	rm -r "$(DIST)/.config"
	"$(CHART_TOOL)" package charts/startup-taint-remover -version "$(VERSION)" -image "$(IMAGE_REPO)" -digest "$$(cat "$(DIST)/.digest")" -destination "$(DIST)"
	@# The kubectl plugin, an archive per platform as krew installs it, and its krew manifest.
	cp hack/krew/startup-taints.yaml "$(DIST)/krew-startup-taints.yaml"
	sed -i "s/{{VERSION}}/$(VERSION)/g" "$(DIST)/krew-startup-taints.yaml"
	for platform in $(PLUGIN_PLATFORMS); do \
		os=$${platform%/*}; arch=$${platform#*/}; dir="$(DIST)/.plugin-$$os-$$arch"; \
		mkdir -p $$dir; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go -C $(PLUGIN_DIR) build $(RELEASE_GOFLAGS) -o "$(abspath $(DIST))/.plugin-$$os-$$arch/kubectl-startup_taints" .; \
		tar -C $$dir --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner -cf - . | gzip -n > "$(DIST)/kubectl-startup_taints-$$os-$$arch.tar.gz"; rm -r $$dir; \
		sum=$$(sha256sum "$(DIST)/kubectl-startup_taints-$$os-$$arch.tar.gz" | cut -d' ' -f1); \
		sed -i "s/{{SHA256_$${os}_$${arch}}}/$$sum/" "$(DIST)/krew-startup-taints.yaml"; \
	done
	cd "$(DIST)" && sha256sum install.yaml *.tgz startup-taint-remover-linux-* kubectl-startup_taints-*.tar.gz krew-startup-taints.yaml image/index.json > checksums.txt
	[[ -z "$(SIGNING_KEY)" ]] || $(COSIGN) sign-blob --yes --key "$(abspath $(SIGNING_KEY))" --tlog-upload=false \
		--output-signature "$(abspath $(DIST))/checksums.txt.sig" "$(abspath $(DIST))/checksums.txt"
	@echo "image index $$(cat "$(DIST)/.digest")" && rm "$(DIST)/.digest"
	@cat "$(DIST)/checksums.txt"

.PHONY: docker-build
docker-build: ## Build the image IMG with VERSION stamped in (needs a container engine; multi-arch: see the Dockerfile).
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the image IMG.
	$(CONTAINER_TOOL) push $(IMG)

##@ Deployment

.PHONY: manifests
manifests: controller-gen ## Generate the RBAC ClusterRole in config/rbac from the +kubebuilder:rbac markers.
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role paths="./..." output:rbac:artifacts:config=config/rbac

.PHONY: build-installer
build-installer: manifests kustomize ## Render config/default, with IMG, into one dist/install.yaml.
	mkdir -p dist
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=$(IMG)
	"$(KUSTOMIZE)" build config/default > dist/install.yaml

.PHONY: deploy
deploy: manifests kustomize ## Deploy config/default, with IMG, to the cluster in ~/.kube/config.
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=$(IMG)
	"$(KUSTOMIZE)" build config/default | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: kustomize ## Remove what deploy installed. Call with ignore-not-found=true to ignore missing resources.
	"$(KUSTOMIZE)" build config/default | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

##@ Dependencies

## Location to install dependencies to
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"

## Tool Binaries
KUBECTL ?= kubectl
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
ACTIONLINT ?= $(LOCALBIN)/actionlint
# Lints, renders and packages the chart with the Helm Go SDK (hack/chart, a module of its own).
CHART_TOOL ?= $(LOCALBIN)/chart
export CHART_TOOL

## Tool Versions
KUSTOMIZE_VERSION ?= v5.8.1
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
ACTIONLINT_VERSION ?= v1.7.12

.PHONY: kustomize
kustomize: $(LOCALBIN) ## Build the pinned kustomize (KUSTOMIZE_VERSION) from hack/kustomize if necessary.
	@hack/kustomize/build.sh "$(KUSTOMIZE_RELEASES)" $(KUSTOMIZE_VERSION)
	@ln -sf "$(KUSTOMIZE_RELEASES)/kustomize-$(KUSTOMIZE_VERSION)" "$(KUSTOMIZE)"

.PHONY: kustomize-releases
kustomize-releases: ## Build every kustomize release that kubectl, Argo CD and Flux bundle (hack/kustomize), once per machine.
	hack/kustomize/build.sh "$(KUSTOMIZE_RELEASES)"

.PHONY: actionlint
actionlint: $(ACTIONLINT) ## Build actionlint locally if necessary.
$(ACTIONLINT): $(LOCALBIN)
	$(call go-install-tool,$(ACTIONLINT),github.com/rhysd/actionlint/cmd/actionlint,$(ACTIONLINT_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build golangci-lint locally if necessary.
$(GOLANGCI_LINT): $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen locally if necessary.
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: chart-tool
chart-tool: $(LOCALBIN) ## Build hack/chart (the Helm Go SDK; go build skips it when nothing changed).
	go -C hack/chart build -o "$(CHART_TOOL)" .

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd, kubemark (the hollow kubelet), kube-scheduler and kube-controller-manager from their Go modules (once; skipped when present).
	@ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) hack/envtest/build.sh "$(KUBEBUILDER_ASSETS)"

.PHONY: test-minor-binaries
test-minor-binaries: envtest ## Build MINOR's own kube-apiserver (and kubemark for 1.33) beside ENVTEST_K8S_VERSION's etcd, when K8S_RELEASE_<MINOR> names a release (once; skipped when present).
	$(build-minor)

define build-minor
@[[ "$(MINOR)" =~ ^1\.[0-9]+$$ ]] || { echo "MINOR: \"$(MINOR)\" is not a minor such as 1.34" >&2; exit 2; }
@[[ -z "$(minor_release)" ]] || ENVTEST_K8S_VERSION=$(minor_release) ETCD="$(ENVTEST_ASSETS)/etcd" \
	hack/envtest/build.sh "$(ENVTEST_DIR)/$(minor_release)-$(GOOS)-$(GOARCH)" $(or $(K8S_BINARIES_$(MINOR)),kube-apiserver)
endef

# go-install-tool will 'go install' any package with custom target and name of binary, if it doesn't exist
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f "$(1)" ;\
GOBIN="$(LOCALBIN)" go install $${package} ;\
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)" ;\
} ;\
ln -sf "$$(realpath "$(1)-$(3)")" "$(1)"
endef
