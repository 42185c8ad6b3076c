// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package startuptaint holds the names that the agent, its kubectl plugin, its tests and its
// admission policies share: the startup taint's spec and how it matches, the records and labels the
// agent writes on its Node, its event reasons and actions, the refusal tags of its policies and the
// Kubernetes minors it supports. It imports nothing heavier than k8s.io/api and apimachinery, so a
// client that reads what the agent wrote need not compile the controller.
package startuptaint

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TaintSpec selects the startup taints the controller removes. A taint matches by key, and by
// effect only when Effect is set; values are ignored because the platforms that add startup taints
// disagree on them (empty, "true", a reason string).
type TaintSpec struct {
	Key    string
	Effect corev1.TaintEffect
}

// String returns the spec in the KEY[:EFFECT] form the --taint flag accepts.
func (s TaintSpec) String() string {
	if s.Effect == "" {
		return s.Key
	}
	return s.Key + ":" + string(s.Effect)
}

// Matches reports whether t is selected by s.
func (s TaintSpec) Matches(t corev1.Taint) bool {
	return t.Key == s.Key && (s.Effect == "" || t.Effect == s.Effect)
}

// ParseTaintSpec parses KEY[:EFFECT]. The key must be a valid label key and the effect, if given,
// one of NoSchedule, PreferNoSchedule and NoExecute. A value (KEY=VALUE) is rejected rather than
// ignored, so a user who expects values to matter learns at once that they do not.
func ParseTaintSpec(s string) (TaintSpec, error) {
	if s == "" {
		return TaintSpec{}, fmt.Errorf("empty taint: want KEY[:EFFECT]")
	}
	key, effect, hasEffect := strings.Cut(s, ":")
	if strings.Contains(key, "=") {
		return TaintSpec{}, fmt.Errorf("taint %q: values are not matched, give only KEY[:EFFECT]", s)
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return TaintSpec{}, fmt.Errorf("taint %q: key is not a valid label key: %s", s, strings.Join(errs, "; "))
	}
	spec := TaintSpec{Key: key}
	if hasEffect {
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			spec.Effect = e
		default:
			return TaintSpec{}, fmt.Errorf("taint %q: effect %q is not one of NoSchedule, PreferNoSchedule, NoExecute", s, effect)
		}
	}
	return spec, nil
}

// driverTaintSuffix ends the startup taint a CSI driver uses by convention, DRIVER/agent-not-ready.
const driverTaintSuffix = "/agent-not-ready"

// DefaultTaintSpec is the startup taint the EBS, EFS, Azure Disk and Mountpoint-S3 CSI drivers
// use by convention, keyed by the driver's name.
func DefaultTaintSpec(driverName string) TaintSpec {
	return TaintSpec{Key: driverName + driverTaintSuffix}
}

// DriverOf returns the CSI driver whose conventional startup taint (DefaultTaintSpec) spec
// selects, and false when spec is no driver's.
func DriverOf(spec TaintSpec) (string, bool) {
	return strings.CutSuffix(spec.Key, driverTaintSuffix)
}

// RetaintSpec is the taint an agent puts back for the startup taints specs: the first one's key
// with effect NoSchedule. Never NoExecute: the agent must not evict running pods, only keep new
// ones away until its node's agent works again.
func RetaintSpec(specs []TaintSpec) TaintSpec {
	return TaintSpec{Key: specs[0].Key, Effect: corev1.TaintEffectNoSchedule}
}

// MatchingTaints returns the taints in taints that any spec selects, in their original order.
func MatchingTaints(taints []corev1.Taint, specs []TaintSpec) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if matchesAny(t, specs) {
			out = append(out, t)
		}
	}
	return out
}

// WithoutTaints returns taints minus those any spec selects, keeping the others in order. It
// never returns the input slice, so callers may modify the result freely.
func WithoutTaints(taints []corev1.Taint, specs []TaintSpec) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(taints))
	for _, t := range taints {
		if !matchesAny(t, specs) {
			out = append(out, t)
		}
	}
	return out
}

func matchesAny(t corev1.Taint, specs []TaintSpec) bool {
	for _, s := range specs {
		if s.Matches(t) {
			return true
		}
	}
	return false
}

// SpecsSelecting returns the specs that select at least one of taints, in their order.
func SpecsSelecting(taints []corev1.Taint, specs []TaintSpec) []TaintSpec {
	var out []TaintSpec
	for _, spec := range specs {
		if len(MatchingTaints(taints, []TaintSpec{spec})) > 0 {
			out = append(out, spec)
		}
	}
	return out
}

// TaintStrings returns each taint in its KEY[=VALUE]:EFFECT form.
func TaintStrings(taints []corev1.Taint) []string {
	out := make([]string, len(taints))
	for i, t := range taints {
		out[i] = t.ToString()
	}
	return out
}

// SpecStrings returns each spec in its KEY[:EFFECT] form.
func SpecStrings(specs []TaintSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.String()
	}
	return out
}

// SpecKeys are the distinct keys of specs, in order.
func SpecKeys(specs []TaintSpec) []string {
	keys := make([]string, 0, len(specs))
	for _, s := range specs {
		if !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}
