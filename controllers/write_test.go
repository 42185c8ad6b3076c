// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// sentWrite is one write as the API server would receive it: its subresource, patch type, bytes
// and options.
type sentWrite struct {
	subresource string
	patchType   string
	data        string
	owner       string
	dryRun      []string
}

// recordingClient records every patch it is sent, Node and status, and admits none of them.
func recordingClient(t *testing.T, sent *[]sentWrite, objs ...client.Object) client.Client {
	t.Helper()
	record := func(sub string, obj client.Object, patch client.Patch, owner string, dryRun []string) {
		data, err := patch.Data(obj)
		if err != nil {
			t.Fatal(err)
		}
		*sent = append(*sent, sentWrite{subresource: sub, patchType: string(patch.Type()), data: string(data), owner: owner, dryRun: dryRun})
	}
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			o := (&client.PatchOptions{}).ApplyOptions(opts)
			record("", obj, patch, o.FieldManager, o.DryRun)
			return nil
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			o := (&client.SubResourcePatchOptions{}).ApplyOptions(opts)
			record(sub, obj, patch, o.FieldManager, o.DryRun)
			return nil
		},
	}).Build()
}

// The confinement check dry-runs the reconciler's own requests: the same bytes, less the dry-run
// option, for the taints' removal and for the condition.
func TestTheDryRunsSendTheReconcilersOwnRequests(t *testing.T) {
	const conditionType = "example.com/AgentReady"
	var sent []sentWrite
	c := recordingClient(t, &sent, nodeWith(startup, foreign))
	r := newTestReconciler(t, c)
	r.Groups[0].ConditionType = conditionType
	r.build()
	probe(r)
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	clock := r.Clock.(*clocktesting.FakeClock)
	check := &ConfinementCheck{Client: c, NodeName: "n1", Clock: clock, Taints: r.servedTaints}
	if _, refusal, err := check.CheckRemoval(context.Background()); err != nil || refusal != nil {
		t.Fatalf("CheckRemoval() = %v, %v", refusal, err)
	}
	check.Conditions = []string{conditionType}
	if _, refusal, err := check.CheckRemoval(context.Background()); err != nil || refusal != nil {
		t.Fatalf("CheckRemoval() of the condition = %v, %v", refusal, err)
	}

	find := func(sub string, dryRun bool) sentWrite {
		t.Helper()
		for _, w := range sent {
			if w.subresource == sub && (len(w.dryRun) > 0) == dryRun {
				return w
			}
		}
		t.Fatalf("no %q write with dry run %v among %+v", sub, dryRun, sent)
		return sentWrite{}
	}
	for _, sub := range []string{"", "status"} {
		real, dry := find(sub, false), find(sub, true)
		if !reflect.DeepEqual(dry.dryRun, []string{"All"}) {
			t.Errorf("%q: the check's options are %v, want a dry run", sub, dry.dryRun)
		}
		dry.dryRun = nil
		if !reflect.DeepEqual(dry, real) {
			t.Errorf("%q: the check sends\n%+v\nthe reconciler sends\n%+v", sub, dry, real)
		}
		if real.owner != startuptaint.FieldManager {
			t.Errorf("%q: sent as %q, want the field manager %s", sub, real.owner, startuptaint.FieldManager)
		}
	}
}

// A conflict is retried at once, on the Node as the API server has it, and counted; the envtest
// spec "loses no other writer's taint while it removes its own" races a real writer.
func TestAConflictIsRetriedAtOnceOnTheNodeAsTheAPIServerHasIt(t *testing.T) {
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
	if !testkit.EqualTaints(got.Spec.Taints, []corev1.Taint{foreign}) {
		t.Fatalf("taints = %v, want only the other writer's %v", got.Spec.Taints, foreign)
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

// A record beyond startuptaint's bounds is one the admission policy neither reads nor lets the
// agent change: a removal leaves it as it is, and no reconcile plans to bring it up to date.
func TestRecordBootLeavesARecordBeyondTheBoundsAsItIs(t *testing.T) {
	const key = "disk.example.com/agent-not-ready"
	spec := []startuptaint.TaintSpec{{Key: key}}
	tests := []struct {
		name, before, want string
		// behind: whether a reconcile plans to bring the record up to this boot.
		behind bool
	}{
		{"no record", "", key + "=boot-2", false},
		{"another boot", "other=boot-0," + key + "=boot-1", "other=boot-0," + key + "=boot-2", true},
		{"8 KB repeating the agent's key", strings.Repeat(key+"=boot-1,", 250), "", false},
		{"20 KB of empty entries", strings.Repeat(",", 20000), "", false},
		{"one its entry would make too long", strings.Repeat("x", startuptaint.MaxBootRecordLength-len(key)-len("=boot-2")), "", false},
		{"one its entry would fill", strings.Repeat("x", startuptaint.MaxBootRecordLength-len(key)-len("=boot-2")-1),
			strings.Repeat("x", startuptaint.MaxBootRecordLength-len(key)-len("=boot-2")-1) + "," + key + "=boot-2", false},
		{"the most entries with room for its own", strings.Repeat(",", startuptaint.MaxBootRecordEntries-2),
			strings.Repeat(",", startuptaint.MaxBootRecordEntries-2) + "," + key + "=boot-2", false},
		{"too many entries for its own", strings.Repeat(",", startuptaint.MaxBootRecordEntries-1), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-2"}}}
			if tt.before != "" {
				node.Annotations = map[string]string{startuptaint.BootAnnotation: tt.before}
			}
			behind := bootBehind(node, spec)
			recordBoot(node, []string{key})
			want := tt.want
			if want == "" {
				want = tt.before
			}
			if got := node.Annotations[startuptaint.BootAnnotation]; got != want {
				t.Errorf("recordBoot: the record is %.60q..., want %.60q...", got, want)
			}
			if behind != tt.behind {
				t.Errorf("bootBehind = %v, want %v", behind, tt.behind)
			}
		})
	}
}

// An empty record (`boot=` where `boot-` was meant) has no entries, for the agent as for the
// admission policy: the agent's first entry is the whole record, with no empty entry before it.
func TestRecordBootWritesItsEntryAloneIntoAnEmptyRecord(t *testing.T) {
	const key = "disk.example.com/agent-not-ready"
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{startuptaint.BootAnnotation: ""}},
		Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}},
	}
	recordBoot(node, []string{key})
	if got, want := node.Annotations[startuptaint.BootAnnotation], key+"=boot-1"; got != want {
		t.Errorf("recordBoot into an empty record: %q, want %q", got, want)
	}
}

const testConditionType = "example.com/AgentReady"

// countStatusPatches counts the status writes that reach the client.
func countStatusPatches(n *int) interceptor.Funcs {
	return interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			*n++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}
}

func TestTheConditionIsWrittenOncePerChangeAndLeavesKubeletsAlone(t *testing.T) {
	writes := 0
	node := testNode("uid-c1", startup)
	kubelets := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.NewTime(testStart), LastTransitionTime: metav1.NewTime(testStart)}
	node.Status.Conditions = []corev1.NodeCondition{kubelets}
	e := newEpisodeTest(t, node, countStatusPatches(&writes))
	e.set(func(r *NodeReconciler) { r.Groups[0].ConditionType = testConditionType })

	condition := func() corev1.NodeCondition {
		t.Helper()
		conditions := e.node().Status.Conditions
		ours := gates.FindCondition(conditions, testConditionType)
		if len(conditions) != 2 || ours == nil || !equality.Semantic.DeepEqual(*gates.FindCondition(conditions, corev1.NodeReady), kubelets) {
			t.Fatalf("conditions %+v: want kubelet's unchanged and the agent's", conditions)
		}
		return *ours
	}
	for range 3 {
		e.reconcile()
	}
	got := condition()
	if writes != 1 || got.Status != corev1.ConditionFalse || got.Reason != "FlipNotReady" || got.Message != "The flip gate does not pass: not ready" ||
		!got.LastTransitionTime.Time.Equal(testStart) {
		t.Fatalf("after %d writes: %+v; want one write of False, FlipNotReady", writes, got)
	}

	e.clock.Step(time.Minute)
	e.ready(true)
	for range 3 {
		e.reconcile()
	}
	got = condition()
	if writes != 2 || got.Status != corev1.ConditionTrue || got.Reason != ConditionReasonGatesPass ||
		!got.LastTransitionTime.Time.Equal(testStart.Add(time.Minute)) {
		t.Fatalf("after %d writes: %+v; want a second write, of True", writes, got)
	}
}

func TestTheConditionIsNotWrittenBeforeTheFirstProbe(t *testing.T) {
	writes := 0
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("uid-c2", startup)).
		WithInterceptorFuncs(countStatusPatches(&writes)).Build()
	r := &NodeReconciler{Client: c, APIReader: c, NodeName: "n1", Recorder: events.NewFakeRecorder(10),
		Groups: []Group{{Taints: []startuptaint.TaintSpec{{Key: startup.Key}}, Gates: []gates.Gate{&flipGate{}}, ConditionType: testConditionType}},
		Clock:  clocktesting.NewFakeClock(testStart)}
	r.build()
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	if writes != 0 {
		t.Fatalf("%d status writes before the gates were probed", writes)
	}
}

func TestConditionType(t *testing.T) {
	for _, tt := range []struct{ in, err string }{
		{"example.com/AgentReady", ""},
		{"CSIDriverReady", ""},
		{"agent ready", "not a valid condition type"},
		{"a/b/c", "not a valid condition type"},
		{"", "not a valid condition type"},
		{"Ready", "kubelet writes"},
		{"NetworkUnavailable", "kubelet writes"},
	} {
		problem := conditionTypeProblem(tt.in)
		if (problem == "") != (tt.err == "") || !strings.Contains(problem, tt.err) {
			t.Errorf("conditionTypeProblem(%q) = %q, want %q", tt.in, problem, tt.err)
		}
	}
}

func TestTheConditionMessageStaysWithinThePolicysBound(t *testing.T) {
	long := untoleratedPod{pod: "kube-system/" + strings.Repeat("p", 253), owner: "Deployment kube-system/" + strings.Repeat("d", 253), taint: "t"}
	keptAway := untolerated{pods: slices.Repeat([]untoleratedPod{long}, maxUntolerated), total: 9}
	c := condition("example.com/AgentReady", &gateError{gate: strings.Repeat("g", 2000), reason: gates.ReasonNotReady}, keptAway)
	if len(c.Message) > maxConditionMessage || !strings.HasPrefix(c.Message, "The ggg") {
		t.Errorf("message of %d bytes %.40q..., want at most %d, its start kept", len(c.Message), c.Message, maxConditionMessage)
	}
}

func TestElideKeepsTheStartAndTheEnd(t *testing.T) {
	long := "ValidatingAdmissionPolicy 'p' denied request: expression '" + strings.Repeat("x", 3000) + "' resulted in error: the reason"
	got := elide(long, maxNote)
	if len(got) > maxNote || !strings.HasPrefix(got, "ValidatingAdmissionPolicy 'p'") || !strings.HasSuffix(got, "the reason") {
		t.Errorf("elide() = %d bytes %q...; want at most %d, with the policy's name and the reason", len(got), got[:40], maxNote)
	}
	if got := elide("short", maxNote); got != "short" {
		t.Errorf("elide(short) = %q", got)
	}
}
