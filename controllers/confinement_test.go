// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
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

func TestConfinementCheckClassifiesTheAnswer(t *testing.T) {
	tests := []struct {
		name    string
		answer  error
		want    string
		wantErr bool
	}{
		{"refused by the shipped policy", policyDenial, Confined, false},
		{"admitted", nil, NotConfined, false},
		{"refused by RBAC", apierrors.NewForbidden(nodesResource, "n1",
			errors.New(`User "system:serviceaccount:x:y" cannot patch resource "nodes"`)), CannotWrite, false},
		{"refused by another policy", apierrors.NewForbidden(nodesResource, "n1",
			errors.New("ValidatingAdmissionPolicy 'labels' with binding 'labels' denied request: no labels")), CannotWrite, false},
		{"node not there yet", apierrors.NewNotFound(nodesResource, "n1"), "", true},
		{"API server unreachable", errors.New("connection refused"), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []client.PatchOption
			check := &ConfinementCheck{Client: patchAnswering(tt.answer, &opts), NodeName: "n1"}
			got, _, err := check.Check(context.Background())
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Check() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
			applied := &client.PatchOptions{}
			applied.ApplyOptions(opts)
			if len(applied.DryRun) != 1 || applied.DryRun[0] != metav1.DryRunAll {
				t.Errorf("the check must be a dry run, got DryRun=%v", applied.DryRun)
			}
		})
	}
}

func TestConfinementCheckWritesNothing(t *testing.T) {
	c := patchAnswering(nil, nil)
	check := &ConfinementCheck{Client: c, NodeName: "n1"}
	if _, _, err := check.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels[startuptaint.ConfinementProbeLabel]; ok {
		t.Fatal("the dry-run label was written")
	}
}

// apiAnswers is what a fake API server answers the check's two dry runs, the labelling (label)
// and the removal (removal), safe to change while the check runs. A nil answer applies the dry
// run, which changes nothing.
type apiAnswers struct {
	mu               sync.Mutex
	label, removal   error
	labels, removals int
}

func (a *apiAnswers) set(err error) { a.mu.Lock(); defer a.mu.Unlock(); a.label = err }

func (a *apiAnswers) refuseRemoval(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.removal = err
}

func (a *apiAnswers) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.labels }

func (a *apiAnswers) removalCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.removals
}

func (a *apiAnswers) client() client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, o ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			a.mu.Lock()
			answer := a.removal
			if strings.Contains(string(data), startuptaint.ConfinementProbeLabel) {
				a.labels++
				answer = a.label
			} else {
				a.removals++
			}
			a.mu.Unlock()
			if answer != nil {
				return answer
			}
			return c.Patch(ctx, obj, patch, o...)
		},
	}).Build()
}

func TestConfinementCheckWarnsOncePerVerdictAndRechecksWhenAsked(t *testing.T) {
	api := &apiAnswers{} // admitted
	recorder := events.NewFakeRecorder(10)
	check := NewConfinementCheck(false)
	check.Client, check.NodeName, check.Recorder = api.client(), "n1", recorder
	metrics.Default().Confined.Set(1)
	startRunnable(t, check.Start)

	eventually(t, "the NotConfined warning", func() bool { return len(recorder.Events) == 1 })
	if ev := <-recorder.Events; !strings.Contains(ev, "Warning "+startuptaint.EventReasonNotConfined) {
		t.Errorf("event %q, want a %s warning", ev, startuptaint.EventReasonNotConfined)
	}
	if got := testutil.ToFloat64(metrics.Default().Confined); got != 0 {
		t.Errorf("startup_taint_confined = %v, want 0", got)
	}
	check.CheckAgain()
	eventually(t, "the second check", func() bool { return api.count() == 2 })
	time.Sleep(50 * time.Millisecond)
	if len(recorder.Events) != 0 {
		t.Errorf("the same verdict warned again: %v", <-recorder.Events)
	}
	api.set(policyDenial)
	check.CheckAgain()
	eventually(t, "the gauge to turn 1", func() bool { return testutil.ToFloat64(metrics.Default().Confined) == 1 })
}

func TestConfinementCheckHoldsWritesWhileRequiredAndNotConfined(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	api := &apiAnswers{} // admitted: nothing judges the agent
	recorder := events.NewFakeRecorder(10)
	check := NewConfinementCheck(true)
	check.Client, check.NodeName, check.Recorder, check.Clock = api.client(), "n1", recorder, clock
	check.Server = &version.Info{Major: "1", Minor: "33", GitVersion: "v1.33.13"}
	if check.Permits() {
		t.Fatal("Permits() before any verdict; a required confinement must be seen first")
	}
	done := startRunnable(t, check.Start)

	eventually(t, "the NotConfined warning", func() bool { return len(recorder.Events) == 1 })
	ev := <-recorder.Events
	for _, want := range []string{"Warning " + startuptaint.EventReasonNotConfined, "confinement is required: it removes no startup taint",
		"until one does: install the own-node policy"} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q lacks %q", ev, want)
		}
	}
	if check.Permits() {
		t.Error("Permits() = true while nothing judges the agent")
	}
	if err := check.Ready(nil); err == nil || !strings.Contains(err.Error(), "confinement is required") {
		t.Errorf("Ready() = %v, want the missing confinement", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Start() returned %v; it must keep checking", err)
	default:
	}

	// The policy is installed: the check finds it on its backoff, permits writes and wakes the
	// reconciler, without a restart and without a second warning.
	api.set(policyDenial)
	eventually(t, "the backoff", clock.HasWaiters)
	clock.Step(time.Second)
	select {
	case ev := <-check.confined:
		if ev.Object.GetName() != "n1" {
			t.Errorf("woke the reconciler for %q, want n1", ev.Object.GetName())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciler was not woken once confined")
	}
	if !check.Permits() || check.Ready(nil) != nil {
		t.Errorf("Permits() = %v, Ready() = %v once confined", check.Permits(), check.Ready(nil))
	}
	if len(recorder.Events) != 0 {
		t.Errorf("unexpected event: %v", <-recorder.Events)
	}
}

// Below the oldest supported minor the policy compiles and judges the agent's token, but the agent
// counts on no confinement there: it sends no dry-run label, writes nothing, and says to upgrade.
func TestBelowTheMinimumARequiredConfinementHoldsEveryWriteWhateverJudgesTheAgent(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	api := &apiAnswers{}
	api.set(policyDenial) // a policy judges the agent
	recorder := events.NewFakeRecorder(10)
	check := NewConfinementCheck(true)
	check.Client, check.NodeName, check.Recorder, check.Clock = api.client(), "n1", recorder, clock
	check.Server = &version.Info{Major: "1", Minor: "32", GitVersion: "v1.32.13"}
	startRunnable(t, check.Start)

	eventually(t, "the NotConfined warning", func() bool { return len(recorder.Events) == 1 })
	ev := <-recorder.Events
	for _, want := range []string{"Warning " + startuptaint.EventReasonNotConfined,
		"The API server runs v1.32.13, older than Kubernetes 1.33, the oldest minor this release supports, and confinement is required",
		"until the control plane runs Kubernetes 1.33 or later"} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q lacks %q", ev, want)
		}
	}
	if check.Permits() {
		t.Error("Permits() = true below the minimum")
	}
	if err := check.Ready(nil); err == nil || !strings.Contains(err.Error(), "older than Kubernetes 1.33") {
		t.Errorf("Ready() = %v, want the API server's minor", err)
	}
	if got := testutil.ToFloat64(metrics.Default().Confined); got != 0 {
		t.Errorf("startup_taint_confined = %v, want 0", got)
	}
	if api.count() != 0 {
		t.Errorf("sent %d dry-run labels below the minimum, want none", api.count())
	}
	// Checking again on its backoff changes nothing and warns no more.
	eventually(t, "the backoff", clock.HasWaiters)
	clock.Step(time.Second)
	eventually(t, "a second removal check", func() bool { return api.removalCount() >= 2 })
	if check.Permits() || len(recorder.Events) != 0 {
		t.Errorf("Permits() = %v, events %d after the second check", check.Permits(), len(recorder.Events))
	}
}

func TestAConfinementCheckThatIsNotRequiredPermitsEveryWrite(t *testing.T) {
	var none *ConfinementCheck
	if !none.Permits() || !NewConfinementCheck(false).Permits() {
		t.Error("no check, or one that does not require confinement, must permit writes")
	}
}

func TestConfinementCheckRetriesWithoutAVerdictOnItsBackoff(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	api := &apiAnswers{label: apierrors.NewNotFound(nodesResource, "n1")}
	check := NewConfinementCheck(false)
	check.Client, check.NodeName, check.Recorder, check.Clock = api.client(), "n1", events.NewFakeRecorder(10), clock
	startRunnable(t, check.Start)

	// 1 s, then 2 s: nothing happens before each step has passed.
	eventually(t, "the first check and its timer", func() bool { return api.count() == 1 && clock.HasWaiters() })
	clock.Step(999 * time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if n := api.count(); n != 1 {
		t.Fatalf("retried after 999ms: %d checks", n)
	}
	clock.Step(time.Millisecond)
	eventually(t, "the retry after 1s", func() bool { return api.count() == 2 && clock.HasWaiters() })
	api.set(policyDenial)
	clock.Step(2 * time.Second)
	eventually(t, "the verdict after 2s more", func() bool { return testutil.ToFloat64(metrics.Default().Confined) == 1 })
	time.Sleep(20 * time.Millisecond)
	if clock.HasWaiters() {
		t.Error("a verdict must end the retries")
	}
}

func TestCheckRemovalSendsTheReconcilersPatchAsADryRun(t *testing.T) {
	var sent []byte
	var opts []client.PatchOption
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup, foreign)).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, o ...client.PatchOption) error {
			sent, _ = patch.Data(obj)
			opts = append(opts, o...)
			return c.Patch(ctx, obj, patch, o...)
		},
	}).Build()
	check := &ConfinementCheck{Client: c, NodeName: "n1", Taints: func() []startuptaint.TaintSpec { return []startuptaint.TaintSpec{{Key: startup.Key}} }}
	node, refusal, err := check.CheckRemoval(context.Background())
	if err != nil || refusal != nil || node == nil {
		t.Fatalf("CheckRemoval() = %v, %v, %v; want the Node, admitted", node, refusal, err)
	}
	for _, want := range []string{`"resourceVersion"`, startuptaint.RemovedAnnotation, `"taints":[{"effect":"NoSchedule","key":"example.com/foreign"}]`} {
		if !strings.Contains(string(sent), want) {
			t.Errorf("the dry run %s lacks %s: it must be the reconciler's own patch", sent, want)
		}
	}
	applied := &client.PatchOptions{}
	applied.ApplyOptions(opts)
	if len(applied.DryRun) != 1 || applied.DryRun[0] != metav1.DryRunAll || applied.FieldManager != startuptaint.FieldManager {
		t.Errorf("DryRun=%v startuptaint.FieldManager=%q, want a dry run as %s", applied.DryRun, applied.FieldManager, startuptaint.FieldManager)
	}
	after := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, after); err != nil {
		t.Fatal(err)
	}
	if len(after.Spec.Taints) != 2 || after.Annotations[startuptaint.RemovedAnnotation] != "" {
		t.Errorf("the dry run changed the Node: taints %v, annotations %v", after.Spec.Taints, after.Annotations)
	}
}

func TestCheckRemovalOfTaintsAlreadyGoneSendsOnlyTheLock(t *testing.T) {
	var sent []byte
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(foreign)).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, o ...client.PatchOption) error {
			sent, _ = patch.Data(obj)
			return c.Patch(ctx, obj, patch, o...)
		},
	}).Build()
	check := &ConfinementCheck{Client: c, NodeName: "n1", Taints: func() []startuptaint.TaintSpec { return []startuptaint.TaintSpec{{Key: startup.Key}} }}
	if _, refusal, err := check.CheckRemoval(context.Background()); err != nil || refusal != nil {
		t.Fatalf("CheckRemoval() = %v, %v", refusal, err)
	}
	// The record may list a taint only in the patch that removes it; the policy judges its
	// settings on this changeless patch all the same.
	if !strings.Contains(string(sent), `"resourceVersion"`) || strings.Contains(string(sent), startuptaint.RemovedAnnotation) ||
		strings.Contains(string(sent), "taints") {
		t.Errorf("the dry run %s: want only the resourceVersion lock", sent)
	}
}

func TestCheckRemovalClassifiesTheAnswer(t *testing.T) {
	tests := []struct {
		name        string
		answer      error
		wantRefusal bool
		wantErr     bool
	}{
		{"admitted", nil, false, false},
		{"refused by the policy, failing to evaluate (Invalid)", removalDenial, true, false},
		{"refused by the policy's check (Forbidden)", policyDenial, true, false},
		{"refused by RBAC", apierrors.NewForbidden(nodesResource, "n1",
			errors.New(`User "system:serviceaccount:x:y" cannot patch resource "nodes"`)), true, false},
		{"a conflict", apierrors.NewConflict(nodesResource, "n1", errors.New("changed")), false, true},
		{"API server unreachable", errors.New("connection refused"), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &apiAnswers{removal: tt.answer}
			check := &ConfinementCheck{Client: api.client(), NodeName: "n1"}
			_, refusal, err := check.CheckRemoval(context.Background())
			if (refusal != nil) != tt.wantRefusal || (err != nil) != tt.wantErr {
				t.Fatalf("CheckRemoval() refusal %v, error %v; want refusal %v, error %v", refusal, err, tt.wantRefusal, tt.wantErr)
			}
		})
	}
	check := &ConfinementCheck{Client: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), NodeName: "n1"}
	if _, _, err := check.CheckRemoval(context.Background()); !apierrors.IsNotFound(err) {
		t.Errorf("CheckRemoval() of a Node not there yet = %v, want NotFound", err)
	}
}

func TestConfinementCheckIsNotReadyWhileTheRemovalIsRefused(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	api := &apiAnswers{label: policyDenial, removal: removalDenial}
	recorder := events.NewFakeRecorder(10)
	check := NewConfinementCheck(false)
	check.Client, check.NodeName, check.Recorder, check.Clock = api.client(), "n1", recorder, clock
	check.Taints = func() []startuptaint.TaintSpec { return []startuptaint.TaintSpec{{Key: startup.Key}} }
	if err := check.Ready(nil); err == nil {
		t.Fatal("Ready() = nil before the API server answered; want an error")
	}
	startRunnable(t, check.Start)

	eventually(t, "the RemovalRefused warning", func() bool { return len(recorder.Events) == 1 })
	ev := <-recorder.Events
	for _, want := range []string{"Warning " + startuptaint.EventReasonRemovalRefused, "retaintKeys", "google.protobuf.Duration",
		"admission policy startup-taint-remover-own-node-only", "--retaint-after"} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q lacks %q", ev, want)
		}
	}
	if err := check.Ready(nil); err == nil || !strings.Contains(err.Error(), "retaintKeys") {
		t.Errorf("Ready() = %v, want the API server's refusal", err)
	}
	if got := testutil.ToFloat64(metrics.Default().RemovalRefused); got != 1 {
		t.Errorf("startup_taint_removal_refused = %v, want 1", got)
	}

	// Refused again on the backoff: no second event.
	eventually(t, "the backoff", clock.HasWaiters)
	clock.Step(time.Second)
	eventually(t, "the second dry run", func() bool { return api.removalCount() == 2 && clock.HasWaiters() })
	if len(recorder.Events) != 0 {
		t.Errorf("the same refusal warned again: %v", <-recorder.Events)
	}

	// The install is fixed: ready again, without a restart.
	api.refuseRemoval(nil)
	clock.Step(2 * time.Second)
	eventually(t, "the RemovalAdmitted event", func() bool { return len(recorder.Events) == 1 })
	if ev := <-recorder.Events; !strings.Contains(ev, "Normal "+startuptaint.EventReasonRemovalAdmitted) {
		t.Errorf("event %q, want %s", ev, startuptaint.EventReasonRemovalAdmitted)
	}
	if err := check.Ready(nil); err != nil {
		t.Errorf("Ready() = %v once admitted, want nil", err)
	}
	if got := testutil.ToFloat64(metrics.Default().RemovalRefused); got != 0 {
		t.Errorf("startup_taint_removal_refused = %v, want 0", got)
	}
	time.Sleep(20 * time.Millisecond)
	if clock.HasWaiters() {
		t.Error("an admitted removal and a verdict must end the retries")
	}
}

func TestTheReconcilerWritesNothingUntilARequiredConfinementIsSeen(t *testing.T) {
	patches := 0
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, o ...client.PatchOption) error {
			patches++
			return cl.Patch(ctx, obj, patch, o...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, o ...client.SubResourcePatchOption) error {
			patches++
			return cl.SubResource(sub).Patch(ctx, obj, patch, o...)
		},
	}).Build()
	r := newTestReconciler(t, c)
	r.running[0].ConditionType = "example.com/AgentReady"
	r.Confinement = NewConfinementCheck(true)
	r.Confinement.channels()
	for _, verdict := range []string{"", NotConfined, CannotWrite} {
		r.Confinement.verdict = verdict
		if err := reconcileNode(t, r); err != nil || patches != 0 {
			t.Fatalf("verdict %q: Reconcile() = %v after %d writes; want none", verdict, err, patches)
		}
	}
	r.Confinement.verdict = Confined
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startup.Key}})) != 0 || gates.FindCondition(node.Status.Conditions, "example.com/AgentReady") == nil {
		t.Errorf("once confined, the taint must go and the condition be written: %+v", node)
	}
}

func TestInConditionsOnlyModeTheCheckAsksForAConditionNotItsOwn(t *testing.T) {
	var sent []byte
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			t.Error("the check labels the Node; a conditions-only agent may write only its status")
			return nil
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, o ...client.SubResourcePatchOption) error {
			sent, _ = patch.Data(obj)
			return policyDenial
		},
	}).Build()
	check := &ConfinementCheck{Client: c, NodeName: "n1", Conditions: []string{"example.com/AgentReady"}}
	outcome, _, err := check.Check(context.Background())
	if err != nil || outcome != Confined {
		t.Fatalf("Check() = %q, %v; want %q", outcome, err, Confined)
	}
	if !strings.Contains(string(sent), `"type":"`+startuptaint.ConfinementProbeLabel+`"`) {
		t.Errorf("sent %s, want a condition of type %s", sent, startuptaint.ConfinementProbeLabel)
	}
}
