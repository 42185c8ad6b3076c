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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/expectations"
)

var (
	startup = corev1.Taint{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	foreign = corev1.Taint{Key: "example.com/foreign", Effect: corev1.TaintEffectNoSchedule}
)

// newTestReconciler returns a reconciler whose local gates have been probed once, backed by c,
// with gates (one that passes when none is given).
func newTestReconciler(t *testing.T, c client.Client, checks ...gates.Gate) *NodeReconciler {
	t.Helper()
	if len(checks) == 0 {
		checks = []gates.Gate{expectations.AlwaysReady{}}
	}
	r := &NodeReconciler{
		Client:    c,
		APIReader: c,
		NodeName:  "n1",
		Groups:    []Group{{Taints: []startuptaint.TaintSpec{{Key: startup.Key}}, Gates: checks}},
		Recorder:  events.NewFakeRecorder(100),
		Clock:     clocktesting.NewFakeClock(testStart),
	}
	if errs := r.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	r.build()
	probe(r)
	return r
}

// probe probes the local gates of every group of r once.
func probe(r *NodeReconciler) {
	for _, g := range r.running {
		g.prober.probeOnce(context.Background())
	}
}

// nodeRequest asks to reconcile the unit tests' Node, n1.
var nodeRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}

func reconcileNode(t *testing.T, r *NodeReconciler) error {
	t.Helper()
	_, err := r.Reconcile(context.Background(), nodeRequest)
	return err
}

func TestReconcileRetriesAConflictAndKeepsTheOtherWritersTaint(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	patches := 0
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches++
			if patches == 1 {
				// Another writer adds its taint between our read and our patch.
				other := &corev1.Node{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
					return err
				}
				other.Spec.Taints = append(other.Spec.Taints, foreign)
				if err := cl.Update(ctx, other); err != nil {
					return err
				}
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	r := newTestReconciler(t, c)
	conflicts := testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(startup.Key, metrics.ResultConflict))

	if err := reconcileNode(t, r); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if patches != 2 {
		t.Fatalf("want a conflict and one retry (2 patches), got %d", patches)
	}
	if got := testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(startup.Key, metrics.ResultConflict)) - conflicts; got != 1 {
		t.Fatalf(`startup_taint_removals_total{result="conflict"} rose by %v, want 1`, got)
	}
	got := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, got); err != nil {
		t.Fatal(err)
	}
	if !expectations.EqualTaints(got.Spec.Taints, []corev1.Taint{foreign}) {
		t.Fatalf("taints = %v, want only the other writer's %v", got.Spec.Taints, foreign)
	}
}

func TestReconcileOutcomes(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "n1")
	boom := errors.New("boom")
	tests := []struct {
		name        string
		objects     []client.Object
		patchErr    error
		wantErr     bool
		wantPatches int
	}{
		{name: "no node is not an error", wantPatches: 0},
		{name: "taint already gone is success", objects: []client.Object{nodeWith(foreign)}, wantPatches: 0},
		{name: "node deleted before the patch is not an error", objects: []client.Object{nodeWith(startup)}, patchErr: gone, wantPatches: 1},
		{name: "other patch errors are returned for a retry", objects: []client.Object{nodeWith(startup)}, patchErr: boom, wantErr: true, wantPatches: 1},
		{name: "removes the taint", objects: []client.Object{nodeWith(startup, foreign)}, wantPatches: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patches := 0
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(tt.objects...).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					patches++
					if tt.patchErr != nil {
						return tt.patchErr
					}
					return cl.Patch(ctx, obj, patch, opts...)
				},
			}).Build()
			err := reconcileNode(t, newTestReconciler(t, c))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Reconcile error = %v, want error: %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, tt.patchErr) {
				t.Fatalf("Reconcile error %v does not wrap %v", err, tt.patchErr)
			}
			if patches != tt.wantPatches {
				t.Fatalf("patches = %d, want %d", patches, tt.wantPatches)
			}
		})
	}
}

func nodeWith(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: taints}}
}

// flipGate is a probed gate whose result the test sets.
type flipGate struct{ err error }

func (g *flipGate) Name() string                             { return "flip" }
func (g *flipGate) Timeout() time.Duration                   { return 0 }
func (g *flipGate) Check(context.Context, gates.Input) error { return g.err }

// errNotReady is a driver's answer that it is not ready yet.
var errNotReady = gates.NotReady(gates.ReasonNotReady, errors.New("driver reports not ready"))

func TestFlappingGateSendsOneEventPerReason(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).Build()
	gate := &flipGate{err: errNotReady}
	recorder := events.NewFakeRecorder(1000)
	r := newTestReconciler(t, c, expectations.AlwaysReady{}, gate)
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

func TestRefusedBacksOffToFiveMinutesAndReportsOnce(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	for name, refusal := range map[string]error{
		"forbidden (RBAC, a policy's check)": apierrors.NewForbidden(nodes, "n1", errors.New("no patch for you")),
		// A policy's validation that fails to evaluate answers Invalid, as one rendered with a
		// placeholder for --retaint-after does.
		"invalid (a policy that fails to evaluate)": apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n1", nil),
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return refusal
				},
			}).Build()
			r := newTestReconciler(t, c)
			recorder := r.Recorder.(*events.FakeRecorder)
			delays := make([]time.Duration, 0, 12)
			for range 12 {
				res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})
				if err != nil {
					t.Fatalf("a refused patch must not be returned as an error (one log line per retry): %v", err)
				}
				delays = append(delays, res.RequeueAfter)
			}
			for i := 1; i < len(delays); i++ {
				if delays[i] < delays[i-1] || delays[i] > MaxRetryInterval {
					t.Fatalf("backoff %v does not grow up to %v", delays, MaxRetryInterval)
				}
			}
			if delays[0] != time.Second || delays[len(delays)-1] != MaxRetryInterval {
				t.Fatalf("backoff %v: want 1s first, %v at last", delays, MaxRetryInterval)
			}
			if len(recorder.Events) != 1 {
				t.Fatalf("%d events for the same failure, want 1", len(recorder.Events))
			}
			if e := <-recorder.Events; !strings.Contains(e, startuptaint.EventReasonRemovalFailed) {
				t.Fatalf("event %q, want %s", e, startuptaint.EventReasonRemovalFailed)
			}
		})
	}
}
