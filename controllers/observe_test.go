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
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

func TestEpisodesAreTimedAndReportedExactly(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-1", startup))
	readded := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(startup.Key))
	count, sum := histogram(t, metrics.Default().RemovalSeconds)

	e.clock.Step(30 * time.Second)
	e.reconcile()
	expectEvents(t, e.events(), "Normal WaitingForAgent Holding startup taints: flip gate: driver reports not ready")

	e.clock.Step(60 * time.Second)
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(), "Normal TaintRemoved Removed startup taints [example.com/agent-not-ready:NoExecute], 1m30s after the node was created")
	if c, s := histogram(t, metrics.Default().RemovalSeconds); c != count+1 || s-sum != 90 {
		t.Fatalf("removal histogram gained %d samples summing %v, want 1 of 90s", c-count, s-sum)
	}

	// Re-added 72 hours later, held 5 s by the gate: removed again, not a first removal.
	e.clock.Step(72 * time.Hour)
	e.ready(false)
	e.setTaints(startup)
	e.reconcile()
	e.clock.Step(5 * time.Second)
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(),
		"Normal WaitingForAgent Holding startup taints",
		"Normal TaintRemovedAgain Startup taints [example.com/agent-not-ready:NoExecute] came back and were removed again after 5s")
	if c, _ := histogram(t, metrics.Default().RemovalSeconds); c != count+1 {
		t.Fatalf("a re-added taint's removal was counted as the node's first")
	}
	if got := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(startup.Key)) - readded; got != 1 {
		t.Fatalf("startup_taint_readded_total rose by %v, want 1", got)
	}
}

func TestAnEpisodeEndedByAnotherWriterIsClosed(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("no patch for you"))
	var patchErr error
	e := newEpisodeTest(t, testNode("uid-2", startup), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if patchErr != nil {
				return patchErr
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	e.reconcile()
	expectEvents(t, e.events(), "WaitingForAgent")

	// Someone else removes the taint; it comes back while the driver is still not ready.
	e.setTaints()
	e.reconcile()
	e.setTaints(startup)
	e.reconcile()
	expectEvents(t, e.events(), "WaitingForAgent")

	// Forbidden: reported once, backed off from 1 s; the episode ends by another writer, and the
	// next episode's first forbidden patch is reported again and starts again at 1 s.
	patchErr = forbidden
	e.ready(true)
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		res, err := e.r.Reconcile(context.Background(), nodeRequest)
		if err != nil || res.RequeueAfter != want {
			t.Fatalf("Reconcile() = %v, %v; want a requeue after %v", res, err, want)
		}
	}
	expectEvents(t, e.events(), "Warning RemovalFailed")
	e.setTaints()
	e.reconcile()
	e.setTaints(startup)
	res, err := e.r.Reconcile(context.Background(), nodeRequest)
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("Reconcile() = %v, %v; want the backoff to start again at 1s", res, err)
	}
	expectEvents(t, e.events(), "Warning RemovalFailed")
}

func TestANewProcessKnowsTheNodesFirstRemovalFromTheNode(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-3", startup))
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(), "TaintRemoved")
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[startuptaint.RemovedAnnotation]; got != startup.Key {
		t.Fatalf("%s = %q, want %q, written with the removal", startuptaint.RemovedAnnotation, got, startup.Key)
	}

	// A restart (a new reconciler, no memory), then the taint is re-added.
	count, _ := histogram(t, metrics.Default().RemovalSeconds)
	readded := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(startup.Key))
	e.setTaints(startup)
	restarted := newTestReconciler(t, e.c)
	recorder := restarted.Recorder.(*events.FakeRecorder)
	if err := reconcileNode(t, restarted); err != nil {
		t.Fatal(err)
	}
	if len(recorder.Events) != 1 {
		t.Fatalf("%d events, want 1", len(recorder.Events))
	}
	expectEvents(t, []string{<-recorder.Events}, "Normal TaintRemovedAgain")
	if c, _ := histogram(t, metrics.Default().RemovalSeconds); c != count {
		t.Fatal("after a restart, a re-added taint's removal was counted as the node's first")
	}
	if got := testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(startup.Key)) - readded; got != 1 {
		t.Fatalf("startup_taint_readded_total rose by %v, want 1", got)
	}
}

func TestANodeRecreatedUnderTheSameNameStartsAfresh(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-4", startup))
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(), "TaintRemoved")

	old := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, old); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(context.Background(), testNode("uid-5", startup)); err != nil {
		t.Fatal(err)
	}
	count, _ := histogram(t, metrics.Default().RemovalSeconds)
	e.reconcile()
	expectEvents(t, e.events(), "Normal TaintRemoved Removed")
	if c, _ := histogram(t, metrics.Default().RemovalSeconds); c != count+1 {
		t.Fatal("the re-created Node's first removal was not counted")
	}
}

func TestANodeThatRegisteredWithoutItsTaintIsReportedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *corev1.Node
		// age is how long after the Node's creation the agent first sees it.
		age      time.Duration
		reported bool
	}{
		{name: "a new Node without the taint", node: testNode("uid-r1"), reported: true},
		{name: "a new Node with the taint", node: testNode("uid-r2", startup)},
		{name: "a Node whose taint an earlier agent removed (a restart)", node: func() *corev1.Node {
			n := testNode("uid-r3")
			n.Annotations = map[string]string{startuptaint.RemovedAnnotation: startup.Key}
			return n
		}()},
		{name: "a Node older than the window (an install on an existing fleet, a later restart)",
			node: testNode("uid-r4"), age: RegistrationWindow},
		{name: "a Node just inside the window", node: testNode("uid-r5"), age: RegistrationWindow - time.Second, reported: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metrics.Default().MissingAtRegistration.Reset()
			e := newEpisodeTest(t, tc.node)
			e.clock.Step(tc.age)
			e.ready(false)
			e.reconcile()
			var want []string
			if tc.reported {
				want = []string{"Warning RegisteredWithoutTaint Node registered without the startup taints [" + startup.Key + "]: " +
					"pods could be scheduled before its node agent was ready"}
			}
			var got []string
			for _, ev := range e.events() {
				if strings.Contains(ev, startuptaint.EventReasonRegisteredWithoutTaint) {
					got = append(got, ev)
				}
			}
			expectEvents(t, got, want...)
			if got := testutil.ToFloat64(metrics.Default().MissingAtRegistration.WithLabelValues(startup.Key)); got != metrics.Bool(tc.reported) {
				t.Fatalf("startup_taint_missing_at_registration = %v, want %v", got, metrics.Bool(tc.reported))
			}

			// Later observations of the same Node, with the taint gone after it came and went,
			// report nothing more.
			e.setTaints(startup)
			e.reconcile()
			e.setTaints()
			e.reconcile()
			for _, ev := range e.events() {
				if strings.Contains(ev, startuptaint.EventReasonRegisteredWithoutTaint) {
					t.Fatalf("reported again: %q", ev)
				}
			}
		})
	}
}

func TestTheAgentReportsOnceWhetherItsCSIDriverPreventsScheduling(t *testing.T) {
	const driver = "csi.example.com"
	object := func(prevent *bool) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: storagev1.CSIDriverSpec{PreventPodSchedulingIfMissing: prevent}}
	}
	forbidden := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*storagev1.CSIDriver); ok {
			return apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "csidrivers"}, key.Name, nil)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	for _, tc := range []struct {
		name        string
		object      *storagev1.CSIDriver
		intercept   *interceptor.Funcs
		want        float64
		wantReports bool
	}{
		{name: "set", object: object(ptr.To(true)), want: 1, wantReports: true},
		{name: "set to false", object: object(ptr.To(false)), want: 0, wantReports: true},
		{name: "unset", object: object(nil), want: 0, wantReports: true},
		{name: "no CSIDriver object", want: 0, wantReports: true},
		{name: "no permission to read it", intercept: &forbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metrics.Default().CSIDriverPreventsScheduling.Reset()
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("uid-d1", startup))
			if tc.object != nil {
				b = b.WithObjects(tc.object)
			}
			if tc.intercept != nil {
				b = b.WithInterceptorFuncs(*tc.intercept)
			}
			reads := 0
			c := interceptor.NewClient(b.Build(), interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey,
				obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*storagev1.CSIDriver); ok {
					reads++
				}
				return c.Get(ctx, key, obj, opts...)
			}})
			r := newTestReconciler(t, c, namedGate{name: driver})
			for range 3 {
				if _, err := r.Reconcile(context.Background(), nodeRequest); err != nil {
					t.Fatal(err)
				}
			}
			if reads != 1 {
				t.Fatalf("%d reads of the CSIDriver, want 1 per process", reads)
			}
			if n := testutil.CollectAndCount(metrics.Default().CSIDriverPreventsScheduling); (n == 1) != tc.wantReports {
				t.Fatalf("%d series of startup_taint_csi_driver_prevents_scheduling, want a report: %v", n, tc.wantReports)
			}
			if tc.wantReports {
				if got := testutil.ToFloat64(metrics.Default().CSIDriverPreventsScheduling.WithLabelValues(driver)); got != tc.want {
					t.Fatalf("startup_taint_csi_driver_prevents_scheduling = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
