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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

var nodesResource = schema.GroupResource{Resource: "nodes"}

// policyDenial is how the API server words a refusal by the shipped policy.
var policyDenial = apierrors.NewForbidden(nodesResource, "n1", errors.New(
	"ValidatingAdmissionPolicy 'startup-taint-remover-own-node-only' with binding 'startup-taint-remover-own-node-only' denied request: "+
		"the startup-taint-remover may not change a Node's metadata (changed: labels)"))

// patchAnswering is a fake client whose Patch answers err (nil: the fake applies it) and records
// the options of each patch.
func patchAnswering(err error, opts *[]client.PatchOption) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, o ...client.PatchOption) error {
			if opts != nil {
				*opts = append(*opts, o...)
			}
			if err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, o...)
		},
	}).Build()
}

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
	if _, ok := node.Labels[ConfinementProbeLabel]; ok {
		t.Fatal("the dry-run label was written")
	}
}

// apiAnswers is what a fake API server answers the check's patches, safe to change while the
// check runs.
type apiAnswers struct {
	mu      sync.Mutex
	err     error
	patches int
}

func (a *apiAnswers) set(err error) { a.mu.Lock(); defer a.mu.Unlock(); a.err = err }
func (a *apiAnswers) count() int    { a.mu.Lock(); defer a.mu.Unlock(); return a.patches }

func (a *apiAnswers) client() client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.patches++
			return a.err
		},
	}).Build()
}

// startRunnable runs start (a manager.Runnable's Start) until the test ends and returns what it
// returned, when it does.
func startRunnable(t *testing.T, start func(context.Context) error) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return done
}

// eventually polls cond for up to 10 s: Start runs in its own goroutine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestConfinementCheckWarnsOncePerVerdictAndRechecksWhenAsked(t *testing.T) {
	api := &apiAnswers{} // admitted
	recorder := events.NewFakeRecorder(10)
	check := NewConfinementCheck(false)
	check.Client, check.NodeName, check.Recorder = api.client(), "n1", recorder
	metrics.Confined.Set(1)
	startRunnable(t, check.Start)

	eventually(t, "the NotConfined warning", func() bool { return len(recorder.Events) == 1 })
	if ev := <-recorder.Events; !strings.Contains(ev, "Warning "+ReasonNotConfined) {
		t.Errorf("event %q, want a %s warning", ev, ReasonNotConfined)
	}
	if got := testutil.ToFloat64(metrics.Confined); got != 0 {
		t.Errorf("startup_taint_confined = %v, want 0", got)
	}
	check.Recheck()
	eventually(t, "the second check", func() bool { return api.count() == 2 })
	time.Sleep(50 * time.Millisecond)
	if len(recorder.Events) != 0 {
		t.Errorf("the same verdict warned again: %v", <-recorder.Events)
	}
	api.set(policyDenial)
	check.Recheck()
	eventually(t, "the gauge to turn 1", func() bool { return testutil.ToFloat64(metrics.Confined) == 1 })
}

func TestConfinementCheckStopsWhenRequiredAndNotConfined(t *testing.T) {
	check := NewConfinementCheck(true)
	check.Client, check.NodeName, check.Recorder = patchAnswering(nil, nil), "n1", events.NewFakeRecorder(10)
	select {
	case err := <-startRunnable(t, check.Start):
		if err == nil || !strings.Contains(err.Error(), "no admission policy confines this agent") {
			t.Fatalf("Start() = %v, want the not-confined error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not stop")
	}
}

func TestConfinementCheckRetriesWithoutAVerdictOnItsBackoff(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	api := &apiAnswers{err: apierrors.NewNotFound(nodesResource, "n1")}
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
	eventually(t, "the verdict after 2s more", func() bool { return testutil.ToFloat64(metrics.Confined) == 1 })
	time.Sleep(20 * time.Millisecond)
	if clock.HasWaiters() {
		t.Error("a verdict must end the retries")
	}
}
