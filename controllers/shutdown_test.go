// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

func TestAShutdownPutsTheTaintBackOnlyWhileKubeletSaysSo(t *testing.T) {
	shutting := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message: "[container runtime is down, node is shutting down]"}
	for name, tt := range map[string]struct {
		ready  corev1.NodeCondition
		record string
		want   []corev1.Taint
	}{
		"shutting down":    {shutting, startup.Key + "=boot-1", []corev1.Taint{foreign, retaintTaint}},
		"a rollout: Ready": {corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, startup.Key + "=boot-1", []corev1.Taint{foreign}},
		"not ready for another reason": {corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: "container runtime is down"},
			startup.Key + "=boot-1", []corev1.Taint{foreign}},
		"no record of its boot": {shutting, "", []corev1.Taint{foreign}},
	} {
		t.Run(name, func(t *testing.T) {
			node := testNode("uid-s", foreign)
			node.Status.NodeInfo.BootID = "boot-1"
			node.Status.Conditions = []corev1.NodeCondition{tt.ready}
			if tt.record != "" {
				node.Annotations = map[string]string{startuptaint.BootAnnotation: tt.record}
			}
			e := newEpisodeTest(t, node)
			e.set(func(r *NodeReconciler) { r.Groups[0].Taints = retaintSpecs })
			added := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseShutdown).Result))
			e.r.putBackAtShutdown(context.Background())
			if got := e.taints(); !testkit.EqualTaints(got, tt.want) {
				t.Fatalf("taints %v as the agent stops, want %v", got, tt.want)
			}
			want := float64(len(tt.want) - 1)
			if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseShutdown).Result)) - added; got != want {
				t.Fatalf(`startup_taint_retaints_total{result="added_at_shutdown"} rose by %v, want %v`, got, want)
			}
		})
	}
}

func TestAnAgentStoppedOnACordonedNodeBeforeItSawTheCordonPutsTheTaintBack(t *testing.T) {
	node := testNode("uid-c3", foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{startuptaint.BootAnnotation: startup.Key + "=boot-1"}
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) { r.Groups[0].Taints = retaintSpecs })
	added := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseCordon).Result))
	e.r.putBackAtShutdown(context.Background())
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v as the agent stops on a cordoned node, want %v back", got, retaintTaint)
	}
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseCordon).Result)) - added; got != 1 {
		t.Fatalf(`startup_taint_retaints_total{result="added_at_cordon"} rose by %v, want 1`, got)
	}
}
