package controllers

import "k8s.io/apimachinery/pkg/util/version"

// MinKubernetesMinor is the oldest minor of Kubernetes 1.x whose API server applies the shipped
// admission policy: it compiles two-variable comprehensions, which an API server of 1.32 accepts
// only in expressions it already stored. The shipped installs support this minor and later ones.
const MinKubernetesMinor = 33

// ServerMinor returns the minor of Kubernetes 1.x that a version names (v1.33.13, 1.34,
// v1.33.5-eks), and whether it names one.
func ServerMinor(v string) (int, bool) {
	parsed, err := version.ParseGeneric(v)
	if err != nil || parsed.Major() != 1 {
		return 0, false
	}
	return int(parsed.Minor()), true
}
