// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// TolerateLabel on a namespace asks the tolerate-startup-taints admission policy to make the pods
// and DaemonSet pod templates created there tolerate the install's startup taints: for a node
// agent's dependency (a CNI's Typha, a CSI controller) that must run before any node is released.
const TolerateLabel = "startup-taint-remover.github.io/tolerate-startup-taints"

// Untolerated returns the taints of effect NoSchedule or NoExecute, which keep a pod off a node,
// that tolerations do not tolerate, as the scheduler matches them (Toleration.ToleratesTaint). A
// taint without an effect (a TaintSpec's) stands for both: a pod must tolerate each to be placed
// whichever a node carries.
func Untolerated(tolerations []corev1.Toleration, taints []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		effects := []corev1.TaintEffect{t.Effect}
		switch t.Effect {
		case "":
			effects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute}
		case corev1.TaintEffectPreferNoSchedule:
			continue
		}
		for _, effect := range effects {
			taint := t
			taint.Effect = effect
			if !tolerates(tolerations, &taint) {
				out = append(out, taint)
				break
			}
		}
	}
	return out
}

// tolerates reports whether one of tolerations tolerates taint, as Toleration.ToleratesTaint
// decides, the comparison operators (Gt, Lt) included, written out here so that this package needs
// no logger: an empty effect or key matches every effect or key (the key only with Exists), Equal
// (or none) matches the value, and Gt and Lt compare the taint's value with the toleration's as
// integers.
func tolerates(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	for _, t := range tolerations {
		if t.Effect != "" && t.Effect != taint.Effect || t.Key != "" && t.Key != taint.Key {
			continue
		}
		switch t.Operator {
		case "", corev1.TolerationOpEqual:
			if t.Value == taint.Value {
				return true
			}
		case corev1.TolerationOpExists:
			return true
		case corev1.TolerationOpGt, corev1.TolerationOpLt:
			if compares(t.Operator, taint.Value, t.Value) {
				return true
			}
		}
	}
	return false
}

// compares reports whether the taint's value is greater (Gt) or less (Lt) than the toleration's,
// both read as decimal integers as the API server validates them; a value that is not one compares
// as neither.
func compares(op corev1.TolerationOperator, taintValue, tolerationValue string) bool {
	if len(content.IsDecimalInteger(taintValue)) > 0 || len(content.IsDecimalInteger(tolerationValue)) > 0 {
		return false
	}
	a, errA := strconv.ParseInt(taintValue, 10, 64)
	b, errB := strconv.ParseInt(tolerationValue, 10, 64)
	if errA != nil || errB != nil {
		return false
	}
	if op == corev1.TolerationOpGt {
		return a > b
	}
	return a < b
}

// Taints returns specs as taints, each with its spec's key and effect.
func Taints(specs []TaintSpec) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(specs))
	for _, s := range specs {
		out = append(out, corev1.Taint{Key: s.Key, Effect: s.Effect})
	}
	return out
}
