// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
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

// tolerates reports whether one of tolerations tolerates taint. The comparison operators (Gt, Lt)
// are matched as the scheduler matches them where its feature is on.
func tolerates(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tolerations {
		if tolerations[i].ToleratesTaint(klog.Background(), taint, true) {
			return true
		}
	}
	return false
}

// Taints returns specs as taints, each with its spec's key and effect.
func Taints(specs []TaintSpec) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(specs))
	for _, s := range specs {
		out = append(out, corev1.Taint{Key: s.Key, Effect: s.Effect})
	}
	return out
}
