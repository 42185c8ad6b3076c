// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"os"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The environment by which make runs the tests on a minor of Kubernetes: ENVTEST_K8S_VERSION names
// the release whose kube-apiserver KUBEBUILDER_ASSETS holds, and ENVTEST_EMULATED_VERSION, when
// set, the minor that kube-apiserver emulates (--emulated-version).
const (
	versionEnv  = "ENVTEST_K8S_VERSION"
	emulatedEnv = "ENVTEST_EMULATED_VERSION"
)

// The Ginkgo labels by which make test-minor chooses what it runs on a minor other than the
// newest: what that minor's API server can change, and nothing that only reads a render.
const (
	// EveryMinor labels the controllers' and the binary's specs it runs on each supported minor.
	EveryMinor = "every-minor"
	// BelowMinimum labels the specs it runs on the newest minor below the oldest supported one.
	BelowMinimum = "below-minimum"
	// RenderOnly labels the manifests specs that read rendered objects and ask no API server:
	// their verdict is the same on every minor, so only make test runs them.
	RenderOnly = "render-only"
	// SamePolicyRender labels an install whose admission policies render the same as an earlier
	// install's, but for the values the install names (PolicyRenderKey): its specs run on the
	// newest minor only, since an older API server compiles and evaluates the same expressions.
	SamePolicyRender = "same-policy-render"
)

// EnvtestMinor is the minor of Kubernetes 1.x the tests' API server acts as, and whether the
// environment names one; when it does not, KUBEBUILDER_ASSETS is taken to hold the newest.
func EnvtestMinor() (int, bool) {
	v := os.Getenv(emulatedEnv)
	if v == "" {
		v = os.Getenv(versionEnv)
	}
	parsed, err := version.ParseGeneric(v)
	if err != nil {
		return 0, false
	}
	return int(parsed.Minor()), true
}

// ServesMinor reports whether the tests' API server acts as minor or a later one: always, when
// the environment names no minor.
func ServesMinor(minor int) bool {
	m, ok := EnvtestMinor()
	return !ok || m >= minor
}

// ConfigureAPIServer makes env's API server emulate the minor ENVTEST_EMULATED_VERSION names,
// when it names one.
func ConfigureAPIServer(env *envtest.Environment) {
	if v := os.Getenv(emulatedEnv); v != "" {
		env.ControlPlane.GetAPIServer().Configure().Set("emulated-version", v)
	}
}
