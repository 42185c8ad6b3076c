// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"testing"

	"github.com/go-logr/logr"
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

// tolerates decides as Toleration.ToleratesTaint does, the comparison operators on, for every
// pairing of tolerations and taints of a small table of keys, values, effects and operators.
func TestToleratesDecidesAsTheScheduler(t *testing.T) {
	keys := []string{"", "k", "other"}
	values := []string{"", "v", "5", "10", "-3", "05", "+5", "x1"}
	effects := []corev1.TaintEffect{"", corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute}
	operators := []corev1.TolerationOperator{"", corev1.TolerationOpEqual, corev1.TolerationOpExists, corev1.TolerationOpGt, corev1.TolerationOpLt, "Bogus"}
	n := 0
	for _, tk := range keys {
		for _, tv := range values {
			for _, te := range effects {
				for _, op := range operators {
					tol := corev1.Toleration{Key: tk, Value: tv, Effect: te, Operator: op}
					for _, k := range keys[1:] {
						for _, v := range values {
							for _, e := range effects[1:] {
								taint := corev1.Taint{Key: k, Value: v, Effect: e}
								want := tol.ToleratesTaint(logr.Discard(), &taint, true)
								if got := tolerates([]corev1.Toleration{tol}, &taint); got != want {
									t.Errorf("tolerates(%+v, %+v) = %v, ToleratesTaint says %v", tol, taint, got, want)
								}
								n++
							}
						}
					}
				}
			}
		}
	}
	if n < 10000 {
		t.Fatalf("only %d pairs compared", n)
	}
}
