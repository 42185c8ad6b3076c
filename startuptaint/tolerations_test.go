// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestUntoleratedMatchesAsTheSchedulerDoes(t *testing.T) {
	noExec := corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}
	prefer := corev1.Taint{Key: "p", Effect: corev1.TaintEffectPreferNoSchedule}
	any := corev1.Taint{Key: "k"}
	for _, tt := range []struct {
		name        string
		tolerations []corev1.Toleration
		taints      []corev1.Taint
		want        int
	}{
		{"none", nil, []corev1.Taint{noExec}, 1},
		{"exists on the key", []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}, []corev1.Taint{noExec}, 0},
		{"equal, another value", []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpEqual, Value: "w"}}, []corev1.Taint{noExec}, 1},
		{"equal, the value", []corev1.Toleration{{Key: "k", Value: "v"}}, []corev1.Taint{noExec}, 0},
		{"another effect", []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			[]corev1.Taint{noExec}, 1},
		{"PreferNoSchedule keeps no pod away", nil, []corev1.Taint{prefer}, 0},
		{"a spec without an effect: both must be tolerated",
			[]corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, []corev1.Taint{any}, 1},
		{"a spec without an effect, tolerated", []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}, []corev1.Taint{any}, 0},
	} {
		if got := Untolerated(tt.tolerations, tt.taints); len(got) != tt.want {
			t.Errorf("%s: Untolerated = %v, want %d", tt.name, got, tt.want)
		}
	}
}
