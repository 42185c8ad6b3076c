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
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

func TestMaxWaitForcesTheRemovalAtItsDeadlineAndNotBefore(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-6", startup))
	e.r.MaxWait = 10 * time.Minute
	forced := testutil.ToFloat64(metrics.Default().ForcedRemovals.WithLabelValues(startup.Key))
	count, sum := histogram(t, metrics.Default().RemovalSeconds)

	e.clock.Step(4 * time.Minute)
	res, err := e.r.Reconcile(context.Background(), nodeRequest)
	if err != nil || res.RequeueAfter != 6*time.Minute {
		t.Fatalf("Reconcile() = %v, %v; want a requeue at the deadline, 6m later", res, err)
	}
	expectEvents(t, e.events(), "WaitingForAgent")

	e.clock.Step(6 * time.Minute)
	e.reconcile()
	expectEvents(t, e.events(), "Warning TaintRemovedUnready Removed startup taints [example.com/agent-not-ready:NoExecute] "+
		"after the maximum wait (10m0s after the node was created) although flip gate: driver reports not ready")
	if got := testutil.ToFloat64(metrics.Default().ForcedRemovals.WithLabelValues(startup.Key)) - forced; got != 1 {
		t.Fatalf("startup_taint_forced_removals_total rose by %v, want 1", got)
	}
	if c, s := histogram(t, metrics.Default().RemovalSeconds); c != count+1 || s-sum != 600 {
		t.Fatalf("the forced removal is the node's first removal: want one sample of 600s, got %d summing %vs", c-count, s-sum)
	}
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if len(startuptaint.MatchingTaints(node.Spec.Taints, e.r.Groups[0].Taints)) != 0 {
		t.Fatal("the taint is still there after the deadline")
	}
}

func TestMaxWaitNeverForcesBeforeTheFirstProbe(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("uid-7", startup)).Build()
	r := &NodeReconciler{Client: c, APIReader: c, NodeName: "n1",
		Groups: []Group{{Taints: []startuptaint.TaintSpec{{Key: startup.Key}}, Gates: []gates.Gate{&flipGate{}}}}, Recorder: events.NewFakeRecorder(10), MaxWait: time.Minute,
		Clock: clocktesting.NewFakeClock(testStart.Add(time.Hour))}
	r.build() // not probed yet, as right after a restart
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if len(startuptaint.MatchingTaints(node.Spec.Taints, r.Groups[0].Taints)) == 0 {
		t.Fatal("the taint was forced off before the gates were probed once")
	}
}

func TestDryRunReportsOncePerEpisodeAndNeverPatches(t *testing.T) {
	patches := 0
	e := newEpisodeTest(t, testNode("uid-8", startup), interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			patches++
			return errors.New("a dry run must not patch")
		},
	})
	e.r.DryRun = true
	wouldRemove := testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(startup.Key, metrics.ResultDryRun))
	e.ready(true)
	e.reconcile()
	e.reconcile()
	expectEvents(t, e.events(), "Normal WouldRemoveTaint Dry run: would remove startup taints [example.com/agent-not-ready:NoExecute] now: every readiness gate passes")

	// The other remover takes the taint off; when it comes back, the new episode reports again.
	e.setTaints()
	e.reconcile()
	e.setTaints(startup)
	e.reconcile()
	expectEvents(t, e.events(), "Normal WouldRemoveTaint")
	if patches != 0 {
		t.Fatalf("%d patches in a dry run", patches)
	}
	if got := testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(startup.Key, metrics.ResultDryRun)) - wouldRemove; got != 2 {
		t.Fatalf(`startup_taint_removals_total{result="dry_run"} rose by %v, want 2 (one per episode)`, got)
	}
}

func TestFlappingGateSendsOneEventPerReason(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).Build()
	gate := &flipGate{err: errNotReady}
	recorder := events.NewFakeRecorder(1000)
	r := newTestReconciler(t, c, testkit.AlwaysReady{}, gate)
	r.Recorder = recorder
	r.build() // the recorder is read when the reconciler is built
	probe(r)
	for i := range 100 {
		// Alternate between two reasons for waiting, never letting the taint go.
		if i%2 == 0 {
			gate.err = errNotReady
		} else {
			gate.err = context.DeadlineExceeded
		}
		probe(r)
		if err := reconcileNode(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(recorder.Events); got != 2 {
		t.Fatalf("100 changes of the reason to wait sent %d events, want 2 (one per reason class)", got)
	}
}
