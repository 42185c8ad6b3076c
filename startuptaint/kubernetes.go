// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"fmt"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"
)

// MinKubernetesMinor is the oldest minor of Kubernetes 1.x whose API server applies the shipped
// admission policy: it compiles two-variable comprehensions, which an API server of 1.32 accepts
// only in expressions it already stored. The shipped installs support this minor and later ones.
const MinKubernetesMinor = 33

// The first minors of Kubernetes 1.x that serve what a feature needs, where that is later than
// MinKubernetesMinor: the agent refuses a setting below its minor, and the tests run it from there.
const (
	// ResourceSliceMinor serves resource.k8s.io/v1, which the ResourceSlice gate reads.
	ResourceSliceMinor = 34
	// TaintAtRegistrationMinor serves MutatingAdmissionPolicy v1, on by default, which taint at
	// registration is made of.
	TaintAtRegistrationMinor = 36
)

// ServerMinor returns the minor of Kubernetes 1.x that a version names (v1.33.13, 1.34,
// v1.33.5-eks), and whether it names one.
func ServerMinor(v string) (int, bool) {
	parsed, err := utilversion.ParseGeneric(v)
	if err != nil || parsed.Major() != 1 {
		return 0, false
	}
	return int(parsed.Minor()), true
}

// ActsAs returns the minor of Kubernetes 1.x an API server acts as, from its /version: the one it
// emulates (kube-apiserver --emulated-version), else its own (some distributions add a "+").
func ActsAs(info *version.Info) (int, bool) {
	major, minor := info.Major, info.Minor
	if info.EmulationMinor != "" {
		major, minor = info.EmulationMajor, info.EmulationMinor
	}
	return ServerMinor(major + "." + strings.TrimSuffix(minor, "+"))
}

// DescribeServer names an API server's version for messages.
func DescribeServer(info *version.Info) string {
	if info.EmulationMinor != "" && info.EmulationMinor != strings.TrimSuffix(info.Minor, "+") {
		return fmt.Sprintf("v%s.%s (kube-apiserver %s emulating it)", info.EmulationMajor, info.EmulationMinor, info.GitVersion)
	}
	return info.GitVersion
}
