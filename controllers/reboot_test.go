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
	"github.com/startup-taint-remover/startup-taint-remover/test/expectations"
)

// updateStatus changes the Node's status as kubelet would.
func (e *episodeTest) updateStatus(change func(*corev1.Node)) {
	e.t.Helper()
	node := e.node()
	change(node)
	if err := e.c.Status().Update(context.Background(), node); err != nil {
		e.t.Fatal(err)
	}
}

// restart stands for a new process of the agent: its state is gone, and its gate is probed with
// ready's result.
func (e *episodeTest) restart(ready bool) {
	e.r.build()
	e.ready(ready)
}

// booted sets the boot ID kubelet reports, as its status setter does at every start.
func booted(id string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.NodeInfo.BootID = id }
}

func TestARebootPutsTheTaintBackAtOnceUntilTheGatesPassAgain(t *testing.T) {
	node := testNode("uid-b1", startup, foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) { r.Groups[0].Taints = retaintSpecs })
	added := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseReboot).Result))
	e.ready(true)
	e.reconcile()
	if got := e.node().Annotations[startuptaint.BootAnnotation]; got != startup.Key+"=boot-1" {
		t.Fatalf("%s = %q after the removal, want the boot it was removed in", startuptaint.BootAnnotation, got)
	}
	e.events()

	// The node reboots: kubelet reports a new boot ID, and the agent starts before its driver.
	e.updateStatus(booted("boot-2"))
	e.restart(false)
	if wait := e.reconcile(); wait != 0 {
		t.Fatalf("requeue after %s, want the taint back at once", wait)
	}
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v after the reboot, want %v back", got, retaintTaint)
	}
	expectEvents(t, e.events(), "Warning TaintAddedBack Put startup taint example.com/agent-not-ready:NoSchedule back: "+
		"the node rebooted (boot boot-2): flip gate: driver reports not ready; it comes off once every gate passes")
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseReboot).Result)) - added; got != 1 {
		t.Fatalf(`startup_taint_retaints_total{result="added_after_reboot"} rose by %v, want 1`, got)
	}

	// The driver is back: the taint goes, and the record names this boot.
	e.ready(true)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v once the gates pass, want only %v", got, foreign)
	}
	if got := e.node().Annotations[startuptaint.BootAnnotation]; got != startup.Key+"=boot-2" {
		t.Fatalf("%s = %q, want this boot", startuptaint.BootAnnotation, got)
	}

	// The agent's own rollout in the same boot, with its driver restarting too: no re-taint.
	e.restart(false)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after a restart of the agent in the same boot", got)
	}
}

func TestABootWhoseGatesPassAtOnceIsRecordedSoALaterRestartIsNoReboot(t *testing.T) {
	node := testNode("uid-b2", foreign)
	node.Status.NodeInfo.BootID = "boot-2"
	// Removed in boot 1, by an agent of this release; and another install's entry, kept.
	node.Annotations = map[string]string{startuptaint.RemovedAnnotation: startup.Key, startuptaint.BootAnnotation: "example.com/other=boot-1," + startup.Key + "=boot-1"}
	e := newEpisodeTest(t, node)
	e.ready(true)
	e.reconcile()
	if got := e.node().Annotations[startuptaint.BootAnnotation]; got != "example.com/other=boot-1,"+startup.Key+"=boot-2" {
		t.Fatalf("%s = %q, want this boot in the agent's entry only, in its place", startuptaint.BootAnnotation, got)
	}
	e.restart(false)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: a restart after the record was brought up to date read as a reboot", got)
	}
}

func TestARemovalByAnAgentFromBeforeTheBootRecordIsRecordedOnce(t *testing.T) {
	node := testNode("uid-b3", foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	node.Annotations = map[string]string{startuptaint.RemovedAnnotation: startup.Key}
	e := newEpisodeTest(t, node)
	e.ready(true)
	e.reconcile()
	after := e.node()
	if got := after.Annotations[startuptaint.BootAnnotation]; got != startup.Key+"=boot-1" {
		t.Fatalf("%s = %q, want this boot for the taint removed once", startuptaint.BootAnnotation, got)
	}
	e.reconcile()
	if e.node().ResourceVersion != after.ResourceVersion {
		t.Fatal("a second reconcile wrote again")
	}
}

func TestWithoutABootIDOrARecordNothingGoesBack(t *testing.T) {
	for name, node := range map[string]*corev1.Node{
		"no boot ID":            testNode("uid-b4", foreign),
		"no record of its boot": func() *corev1.Node { n := testNode("uid-b5", foreign); n.Status.NodeInfo.BootID = "boot-1"; return n }(),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEpisodeTest(t, node)
			e.ready(false)
			e.reconcile()
			if got := e.node(); !expectations.EqualTaints(got.Spec.Taints, []corev1.Taint{foreign}) || got.Annotations[startuptaint.BootAnnotation] != "" {
				t.Fatalf("taints %v, boot record %q: want nothing written", got.Spec.Taints, got.Annotations[startuptaint.BootAnnotation])
			}
		})
	}
}

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
			e.r.retaintAtShutdown(context.Background())
			if got := e.taints(); !expectations.EqualTaints(got, tt.want) {
				t.Fatalf("taints %v as the agent stops, want %v", got, tt.want)
			}
			want := float64(len(tt.want) - 1)
			if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseShutdown).Result)) - added; got != want {
				t.Fatalf(`startup_taint_retaints_total{result="added_at_shutdown"} rose by %v, want %v`, got, want)
			}
		})
	}
}

func TestACordonPutsTheTaintBackAndHoldsItUntilTheUncordon(t *testing.T) {
	node := testNode("uid-c1", startup, foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) { r.Groups[0].Taints = retaintSpecs })
	added := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseCordon).Result))
	e.ready(true)
	e.reconcile()
	e.events()

	cordon := func(on bool) {
		t.Helper()
		n := e.node()
		n.Spec.Unschedulable = on
		if err := e.c.Update(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	// A drain before a reboot: the node is cordoned while its driver still works.
	cordon(true)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v on a cordoned node, want %v back", got, retaintTaint)
	}
	expectEvents(t, e.events(), "Normal TaintAddedBack Put startup taint example.com/agent-not-ready:NoSchedule back: "+
		"the node is cordoned; it comes off once the node is uncordoned and every gate passes")
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseCordon).Result)) - added; got != 1 {
		t.Fatalf(`startup_taint_retaints_total{result="added_at_cordon"} rose by %v, want 1`, got)
	}
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v: the gates pass, but the node is still cordoned", got)
	}

	// Uncordoned without a reboot: the taint goes at once.
	cordon(false)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after the uncordon, want only %v", got, foreign)
	}
}

func TestACordonWithoutABootRecordLeavesTheNodeAlone(t *testing.T) {
	node := testNode("uid-c2", foreign)
	node.Spec.Unschedulable = true
	e := newEpisodeTest(t, node)
	e.ready(true)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: a node whose taint no agent removed got one", got)
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
	e.r.retaintAtShutdown(context.Background())
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v as the agent stops on a cordoned node, want %v back", got, retaintTaint)
	}
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseCordon).Result)) - added; got != 1 {
		t.Fatalf(`startup_taint_retaints_total{result="added_at_cordon"} rose by %v, want 1`, got)
	}
}

// staleEvidenceGate stands for the registration gate (gates.AfterReboot): what it checks can only
// be stale after a reboot.
type staleEvidenceGate struct{ flipGate }

func (g *staleEvidenceGate) Name() string     { return "stale" }
func (g *staleEvidenceGate) OnlyAfterReboot() {}

func TestAGateOfWhatARebootLeavesStaleHoldsOnlyAfterAReboot(t *testing.T) {
	node := testNode("uid-b5", startup, foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	e := newEpisodeTest(t, node)
	stale := &staleEvidenceGate{flipGate{err: errNotReady}}
	e.set(func(r *NodeReconciler) {
		r.Groups[0].Taints = retaintSpecs
		r.Groups[0].Gates = append(r.Groups[0].Gates, stale)
	})

	// The first boot: the gate does not pass, and is not heeded.
	e.ready(true)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v at the first boot, want the startup taint gone whatever the gate says", got)
	}

	// After a reboot it is heeded: the taint goes back, and stays until the gate passes.
	e.updateStatus(booted("boot-2"))
	e.restart(true)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v after the reboot while the gate does not pass, want %v back", got, retaintTaint)
	}
	stale.err = nil
	probe(e.r)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v once the gate passes", got)
	}

	// A restart in the same boot: the record names it, and the gate is not heeded again.
	stale.err = errNotReady
	e.restart(true)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after a restart in the same boot, want no re-taint", got)
	}
}
