// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
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
	"github.com/startup-taint-remover/startup-taint-remover/test/expectations"
)

// retaintTaint is what continuous mode puts back for startup: its key, NoSchedule.
var retaintTaint = corev1.Taint{Key: startup.Key, Effect: corev1.TaintEffectNoSchedule}

// retaintSpecs configure the startup taint with its effect, so the taint put back is one the
// configured spec does not select.
var retaintSpecs = []startuptaint.TaintSpec{{Key: startup.Key, Effect: corev1.TaintEffectNoExecute}}

func (e *episodeTest) taints() []corev1.Taint {
	e.t.Helper()
	return e.node().Spec.Taints
}

func (e *episodeTest) node() *corev1.Node {
	e.t.Helper()
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		e.t.Fatal(err)
	}
	return node
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
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v before the grace has passed", got)
	}
	e.clock.Step(time.Second)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
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
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v while the driver flaps", got)
	}
	expectEvents(t, e.events())

	// Once every gate has passed for the hold time without interruption, it comes off.
	e.ready(true)
	e.reconcile()
	e.clock.Step(30 * time.Second)
	e.reconcile()
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
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
	if !expectations.EqualTaints(node.Spec.Taints, []corev1.Taint{foreign}) {
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
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
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
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
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
