// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

func TestEveryPutBackCauseHasOneRuleAndWordsOfItsOwn(t *testing.T) {
	if len(putBackRules) != len(startuptaint.PutBacks) {
		t.Errorf("%d rules for %d causes", len(putBackRules), len(startuptaint.PutBacks))
	}
	seen := map[string]startuptaint.Cause{}
	for _, row := range startuptaint.PutBacks {
		rule := ruleOf(row.Cause)
		if rule.when == 0 || rule.holds == nil || rule.tell == nil {
			t.Errorf("cause %s: its rule is never tried, or cannot say why", row.Cause)
		}
		for _, word := range []string{"action " + row.Action, "result " + row.Result, "state " + row.State, "why " + row.Why} {
			if other, ok := seen[word]; ok {
				t.Errorf("causes %s and %s share the %s", other, row.Cause, word)
			}
			seen[word] = row.Cause
		}
	}
}

func TestADryRunSaysWhyItWouldPutTheTaintBackWhateverTheCause(t *testing.T) {
	node := testNode("uid-p1", foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{startuptaint.BootAnnotation: startup.Key + "=boot-1",
		startuptaint.RemovedAnnotation: startup.Key}
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) { r.DryRun = true })
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(), "Normal WouldAddTaint Dry run: would put startup taint example.com/agent-not-ready:NoSchedule back now: "+
		"the node is cordoned")
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after a dry run, want %v as they were", got, foreign)
	}
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
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
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
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v once the gates pass, want only %v", got, foreign)
	}
	if got := e.node().Annotations[startuptaint.BootAnnotation]; got != startup.Key+"=boot-2" {
		t.Fatalf("%s = %q, want this boot", startuptaint.BootAnnotation, got)
	}

	// The agent's own rollout in the same boot, with its driver restarting too: no re-taint.
	e.restart(false)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after a restart of the agent in the same boot", got)
	}
}

// The deadline bounds a taint put back after a reboot too: MaxWait after the boot (here, the
// put-back, which this process made at once), not after the Node's creation, which was long ago.
// The forced removal records the boot, so the taint does not go back again in that boot.
func TestMaxWaitBoundsATaintPutBackAfterARebootFromTheBoot(t *testing.T) {
	node := testNode("uid-b5", startup, foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) { r.Groups[0].Taints, r.MaxWait = retaintSpecs, 10*time.Minute })
	e.ready(true)
	e.reconcile()
	e.clock.Step(24 * time.Hour)
	e.updateStatus(booted("boot-2"))
	e.restart(false)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v after the reboot, a day after the Node's creation: want %v back, held", got, retaintTaint)
	}
	e.events()
	e.clock.Step(4 * time.Minute)
	if wait := e.reconcile(); wait != 6*time.Minute {
		t.Fatalf("requeue after %s, want the deadline, 10m after the boot", wait)
	}
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v before the deadline", got)
	}
	e.clock.Step(6 * time.Minute)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v at the deadline, want only %v", got, foreign)
	}
	expectEvents(t, e.events(), "Warning TaintRemovedUnready Removed startup taints [example.com/agent-not-ready:NoSchedule] "+
		"after the maximum wait (10m0s after they came back) although flip gate: driver reports not ready")
	if got := e.node().Annotations[startuptaint.BootAnnotation]; got != startup.Key+"=boot-2" {
		t.Fatalf("%s = %q, want this boot recorded by the forced removal", startuptaint.BootAnnotation, got)
	}
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: put back again in the boot whose deadline passed", got)
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
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: a restart after the record was brought up to date read as a reboot", got)
	}
}

// A record that this boot's entry would take beyond its bounds (here: exactly full, with the
// agent's entry of the boot before, and a longer boot ID) stays as it is, and the agent says so:
// it holds rather than releases, for the crash policy puts the taint back after an outage in this
// boot, and the agent takes it off again once its gates pass (issue 57, G16).
func TestABootRecordThisBootWouldOverflowIsLeftAndReported(t *testing.T) {
	node := testNode("uid-b6", foreign)
	node.Status.NodeInfo.BootID = "boot-22"
	own := startup.Key + "=boot-1"
	record := strings.Repeat("x", startuptaint.MaxBootRecordLength-len(own)-1) + "," + own
	node.Annotations = map[string]string{startuptaint.RemovedAnnotation: startup.Key, startuptaint.BootAnnotation: record}
	e := newEpisodeTest(t, node)
	e.ready(true)
	e.reconcile()
	after := e.node()
	if got := after.Annotations[startuptaint.BootAnnotation]; got != record {
		t.Fatalf("%s changed to %.40q...; want it left as it is", startuptaint.BootAnnotation, got)
	}
	expectEvents(t, e.events(), "Warning "+startuptaint.EventReasonBootRecordFull+" The boot record "+startuptaint.BootAnnotation+
		" cannot take this boot's entries for "+startup.Key)
	e.reconcile()
	if e.node().ResourceVersion != after.ResourceVersion {
		t.Fatal("a second reconcile wrote")
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
			if got := e.node(); !testkit.EqualTaints(got.Spec.Taints, []corev1.Taint{foreign}) || got.Annotations[startuptaint.BootAnnotation] != "" {
				t.Fatalf("taints %v, boot record %q: want nothing written", got.Spec.Taints, got.Annotations[startuptaint.BootAnnotation])
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
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v on a cordoned node, want %v back", got, retaintTaint)
	}
	expectEvents(t, e.events(), "Normal TaintAddedBack Put startup taint example.com/agent-not-ready:NoSchedule back: "+
		"the node is cordoned; it comes off once the node is uncordoned and every gate passes")
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseCordon).Result)) - added; got != 1 {
		t.Fatalf(`startup_taint_retaints_total{result="added_at_cordon"} rose by %v, want 1`, got)
	}
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v: the gates pass, but the node is still cordoned", got)
	}

	// Uncordoned without a reboot: the taint goes at once.
	cordon(false)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after the uncordon, want only %v", got, foreign)
	}
}

func TestACordonWithoutABootRecordLeavesTheNodeAlone(t *testing.T) {
	node := testNode("uid-c2", foreign)
	node.Spec.Unschedulable = true
	e := newEpisodeTest(t, node)
	e.ready(true)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: a node whose taint no agent removed got one", got)
	}
}

func TestRetaintPutsTheTaintBackWithNoScheduleAfterTheGraceAndHoldsItAgainstFlapping(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-r1", startup, foreign))
	e.set(func(r *NodeReconciler) { r.Groups[0].Taints, r.RetaintAfter = retaintSpecs, 30*time.Second })
	added := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseGate).Result))
	readded := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(retaintTaint.ToString()))
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(), "Normal TaintRemoved")

	// The driver stops passing: nothing happens before the grace has passed.
	e.ready(false)
	if wait := e.reconcile(); wait != 30*time.Second {
		t.Fatalf("requeue after %s, want the grace, 30s", wait)
	}
	e.clock.Step(29 * time.Second)
	if wait := e.reconcile(); wait != time.Second {
		t.Fatalf("requeue after %s, want the rest of the grace, 1s", wait)
	}
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v before the grace has passed", got)
	}
	e.clock.Step(time.Second)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v after the grace, want %v and %v", got, foreign, retaintTaint)
	}
	expectEvents(t, e.events(), "Warning TaintAddedBack Put startup taint example.com/agent-not-ready:NoSchedule back: "+
		"flip gate: driver reports not ready for 30s; it comes off once every gate has passed for 30s")
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseGate).Result)) - added; got != 1 {
		t.Fatalf(`startup_taint_retaints_total{result="added"} rose by %v, want 1`, got)
	}
	e.reconcile() // the watch shows the taint: the agent's own write is no taint that came back
	expectEvents(t, e.events())

	// The driver flaps faster than the hold time: the taint stays on.
	for range 5 {
		e.ready(true)
		if wait := e.reconcile(); wait != 30*time.Second {
			t.Fatalf("requeue after %s, want the hold time, 30s", wait)
		}
		e.clock.Step(10 * time.Second)
		e.ready(false)
		e.reconcile()
		e.clock.Step(time.Second)
	}
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v while the driver flaps", got)
	}
	expectEvents(t, e.events())

	// Once every gate has passed for the hold time without interruption, it comes off.
	e.ready(true)
	e.reconcile()
	e.clock.Step(30 * time.Second)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after the hold time, want only %v", got, foreign)
	}
	expectEvents(t, e.events(), "Normal TaintRemovedAgain Startup taints [example.com/agent-not-ready:NoSchedule] came back and were removed again after 1m25s")
	if got := e.node().Annotations[startuptaint.RemovedAnnotation]; got != "example.com/agent-not-ready:NoExecute,example.com/agent-not-ready:NoSchedule" {
		t.Fatalf("%s = %q, want both the startup taint and the one put back", startuptaint.RemovedAnnotation, got)
	}
	if got := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(retaintTaint.ToString())) - readded; got != 0 {
		t.Fatalf("startup_taint_readded_total rose by %v for the agent's own re-taint, want 0", got)
	}
}

func TestRetaintNeverStartsBeforeTheFirstProbe(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("uid-r2", foreign)).Build()
	clock := clocktesting.NewFakeClock(testStart)
	r := &NodeReconciler{Client: c, APIReader: c, NodeName: "n1", RetaintAfter: time.Second,
		Groups: []Group{{Taints: retaintSpecs, Gates: []gates.Gate{&flipGate{err: errNotReady}}}}, Recorder: events.NewFakeRecorder(10), Clock: clock}
	r.build() // not probed yet, as right after a restart
	for range 3 {
		if err := reconcileNode(t, r); err != nil {
			t.Fatal(err)
		}
		clock.Step(time.Minute)
	}
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if !testkit.EqualTaints(node.Spec.Taints, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: a verdict nobody has probed put the taint back", node.Spec.Taints)
	}
}

func TestARetaintedNodeIsHeldAfterARestartAndNeverForcedByMaxWait(t *testing.T) {
	// An earlier process removed the startup taint and put it back; this one starts with the gate
	// failing, long after the deadline.
	node := testNode("uid-r3", foreign, retaintTaint)
	node.Annotations = map[string]string{startuptaint.RemovedAnnotation: "example.com/agent-not-ready:NoExecute"}
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) {
		r.Groups[0].Taints, r.RetaintAfter, r.MaxWait = retaintSpecs, 30*time.Second, time.Minute
	})
	e.clock.Step(time.Hour)
	readded := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(retaintTaint.ToString()))
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v: the maximum wait forced off a taint that came back", got)
	}
	if got := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(retaintTaint.ToString())) - readded; got != 1 {
		t.Fatalf("startup_taint_readded_total rose by %v, want 1: to this process the taint came back", got)
	}
	e.ready(true)
	if wait := e.reconcile(); wait != 30*time.Second {
		t.Fatalf("requeue after %s, want the hold time", wait)
	}
	e.clock.Step(30 * time.Second)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after the hold time", got)
	}
}

func TestDryRunReportsTheRetaintOncePerOutageAndNeverPatches(t *testing.T) {
	patches := 0
	e := newEpisodeTest(t, testNode("uid-r4", foreign), interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			patches++
			return errors.New("a dry run must not patch")
		},
	})
	e.set(func(r *NodeReconciler) {
		r.Groups[0].Taints, r.RetaintAfter, r.DryRun = retaintSpecs, 30*time.Second, true
	})
	// Long after the Node registered, so that its missing taints are no news.
	e.clock.Step(RegistrationWindow)
	would := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), metrics.ResultDryRun))
	for range 2 {
		e.ready(false)
		e.reconcile()
		e.clock.Step(30 * time.Second)
		e.reconcile()
		e.reconcile()
		expectEvents(t, e.events(), "Normal WouldAddTaint Dry run: would put startup taint example.com/agent-not-ready:NoSchedule back now: "+
			"flip gate: driver reports not ready for 30s")
		e.ready(true)
		e.reconcile()
	}
	if patches != 0 {
		t.Fatalf("%d patches in a dry run", patches)
	}
	if got := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaintTaint.ToString(), metrics.ResultDryRun)) - would; got != 2 {
		t.Fatalf(`startup_taint_retaints_total{result="dry_run"} rose by %v, want 2 (one per outage)`, got)
	}
}

// A boot ID with a "," or "=" would split the boot record's entries, and the admission policy would
// refuse every removal that records it: the agent neither records nor reads such a boot.
func TestABootIDTheRecordCannotHoldNeitherBlocksTheRemovalNorPutsTheTaintBack(t *testing.T) {
	node := testNode("uid-b6", startup, foreign)
	node.Status.NodeInfo.BootID = "boot=2,x"
	e := newEpisodeTest(t, node)
	e.ready(true)
	e.reconcile()
	if got := e.node(); !testkit.EqualTaints(got.Spec.Taints, []corev1.Taint{foreign}) || got.Annotations[startuptaint.BootAnnotation] != "" {
		t.Fatalf("taints %v, boot record %q: want the taint gone and no boot recorded", got.Spec.Taints, got.Annotations[startuptaint.BootAnnotation])
	}

	// A record from an earlier boot does not make the odd boot read as a reboot.
	n := e.node()
	n.Annotations[startuptaint.BootAnnotation] = startup.Key + "=boot-1"
	if err := e.c.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	e.ready(false)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v: an odd boot ID read as a reboot", got)
	}
}
