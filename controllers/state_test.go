// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
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

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// testStart is when the test Nodes were created, on the reconcilers' fake clocks.
var testStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// episodeTest drives one reconciler, with a gate the test flips and a fake clock, through a
// Node's life, by calling Reconcile directly.
type episodeTest struct {
	t        *testing.T
	c        client.Client
	r        *NodeReconciler
	gate     *flipGate
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
}

func newEpisodeTest(t *testing.T, node *corev1.Node, interceptors ...interceptor.Funcs) *episodeTest {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node)
	for _, f := range interceptors {
		b = b.WithInterceptorFuncs(f)
	}
	e := &episodeTest{t: t, c: b.Build(), gate: &flipGate{err: errNotReady}}
	e.r = newTestReconciler(t, e.c, e.gate)
	e.clock = e.r.Clock.(*clocktesting.FakeClock)
	e.recorder = e.r.Recorder.(*events.FakeRecorder)
	return e
}

// testNode is a Node created at testStart with uid and taints.
func testNode(uid string, taints ...corev1.Taint) *corev1.Node {
	node := nodeWith(taints...)
	node.UID, node.CreationTimestamp = types.UID(uid), metav1.NewTime(testStart)
	return node
}

// ready sets the gate's result and probes it.
func (e *episodeTest) ready(ready bool) {
	e.gate.err = nil
	if !ready {
		e.gate.err = errNotReady
	}
	probe(e.r)
}

// set changes the reconciler's fields before its first reconcile, and builds and probes it again.
func (e *episodeTest) set(change func(*NodeReconciler)) {
	change(e.r)
	if errs := e.r.Validate(); len(errs) > 0 {
		e.t.Fatal(errs)
	}
	e.r.build()
	probe(e.r)
}

// reconcile reconciles the Node and returns the requeue it asked for.
func (e *episodeTest) reconcile() time.Duration {
	e.t.Helper()
	res, err := e.r.Reconcile(context.Background(), nodeRequest)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.RequeueAfter
}

// events returns the events recorded since the last call.
func (e *episodeTest) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// setTaints changes the Node's taints as another writer would.
func (e *episodeTest) setTaints(taints ...corev1.Taint) {
	e.t.Helper()
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		e.t.Fatal(err)
	}
	node.Spec.Taints = taints
	if err := e.c.Update(context.Background(), node); err != nil {
		e.t.Fatal(err)
	}
}

// histogram returns the sample count and sum of h.
func histogram(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := h.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func expectEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("events %q, want %d: %q", got, len(want), want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Fatalf("event %d is %q, want it to contain %q", i, got[i], want[i])
		}
	}
}

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

func TestWithRemovedOnlyAppends(t *testing.T) {
	disk, file := startuptaint.TaintSpec{Key: "disk.example.com/agent-not-ready"}, startuptaint.TaintSpec{Key: "file.example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name, before string
		specs        []startuptaint.TaintSpec
		want         string
	}{
		{"to no record", "", []startuptaint.TaintSpec{file, disk}, "file.example.com/agent-not-ready:NoSchedule,disk.example.com/agent-not-ready"},
		{"after another group's entry, unsorted", "z.example.com/x", []startuptaint.TaintSpec{disk}, "z.example.com/x,disk.example.com/agent-not-ready"},
		{"an entry already listed: unchanged", "disk.example.com/agent-not-ready", []startuptaint.TaintSpec{disk}, "disk.example.com/agent-not-ready"},
		{"each once", "", []startuptaint.TaintSpec{disk, disk}, "disk.example.com/agent-not-ready"},
		// Whatever another writer put there stays as it was, byte for byte, before the addition.
		{"after another writer's odd value", ",a,a,", []startuptaint.TaintSpec{disk}, ",a,a,,disk.example.com/agent-not-ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{}
			if tt.before != "" {
				node.Annotations = map[string]string{startuptaint.RemovedAnnotation: tt.before}
			}
			if got := withRemoved(node, tt.specs); got != tt.want {
				t.Errorf("withRemoved(%q, %v) = %q, want %q", tt.before, tt.specs, got, tt.want)
			}
		})
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
