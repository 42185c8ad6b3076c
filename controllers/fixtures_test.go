// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
	"sigs.k8s.io/yaml"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// The unit tests' shared fixtures: the reconciler over a fake client, its gates, and the episode
// harness most tests drive it with.

var (
	startup = corev1.Taint{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	foreign = corev1.Taint{Key: "example.com/foreign", Effect: corev1.TaintEffectNoSchedule}
)

// testStart is when the test Nodes were created, on the reconcilers' fake clocks.
var testStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// nodeRequest asks to reconcile the unit tests' Node, n1.
var nodeRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}

// errNotReady is a driver's answer that it is not ready yet.
var errNotReady = gates.NotReady(gates.ReasonNotReady, errors.New("driver reports not ready"))

// newTestReconciler returns a reconciler whose local gates have been probed once, backed by c,
// with gates (one that passes when none is given).
func newTestReconciler(t *testing.T, c client.Client, checks ...gates.Gate) *NodeReconciler {
	t.Helper()
	if len(checks) == 0 {
		checks = []gates.Gate{testkit.AlwaysReady{}}
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

func reconcileNode(t *testing.T, r *NodeReconciler) error {
	t.Helper()
	_, err := r.Reconcile(context.Background(), nodeRequest)
	return err
}

func nodeWith(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: taints}}
}

// flipGate is a probed gate whose result the test sets.
type flipGate struct{ err error }

func (g *flipGate) Name() string { return "flip" }

func (g *flipGate) Timeout() time.Duration { return 0 }

func (g *flipGate) Check(context.Context, gates.Input) error { return g.err }

// namedGate is a passing gate whose driver has told its name.
type namedGate struct{ name string }

func (namedGate) Name() string { return "csi" }

func (namedGate) Check(context.Context, gates.Input) error { return nil }

func (namedGate) Timeout() time.Duration { return 0 }

func (g namedGate) DriverName() string { return g.name }

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
	return newEpisodeTestOf(t, b)
}

// newEpisodeTestOf is newEpisodeTest over the client b builds.
func newEpisodeTestOf(t *testing.T, b *fake.ClientBuilder) *episodeTest {
	t.Helper()
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

// retaintTaint is what continuous mode puts back for startup: its key, NoSchedule.
var retaintTaint = corev1.Taint{Key: startup.Key, Effect: corev1.TaintEffectNoSchedule}

// retaintSpecs configure the startup taint with its effect, so the taint put back is one the
// configured spec does not select.
var retaintSpecs = []startuptaint.TaintSpec{{Key: startup.Key, Effect: corev1.TaintEffectNoExecute}}

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

// The two groups' taints in the group tests: a disk and a file driver's.
var (
	diskTaint = corev1.Taint{Key: "disk.example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	fileTaint = corev1.Taint{Key: "file.example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
)

// groupsTest drives a reconciler with two groups, disk and file, each with a gate the test flips.
type groupsTest struct {
	*episodeTest
	disk, file *flipGate
	patches    int
}

func newGroupsTest(t *testing.T, patch func(client.Object, client.Patch) error) *groupsTest {
	t.Helper()
	g := &groupsTest{disk: &flipGate{err: errNotReady}, file: &flipGate{err: errNotReady}}
	g.episodeTest = newEpisodeTest(t, testNode("uid-g", diskTaint, foreign, fileTaint), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			g.patches++
			if patch != nil {
				if err := patch(obj, p); err != nil {
					return err
				}
			}
			return cl.Patch(ctx, obj, p, opts...)
		},
	})
	g.set(func(r *NodeReconciler) {
		r.Groups = []Group{
			{Name: "disk", Taints: []startuptaint.TaintSpec{{Key: diskTaint.Key}}, Gates: []gates.Gate{g.disk}},
			{Name: "file", Taints: []startuptaint.TaintSpec{{Key: fileTaint.Key}}, Gates: []gates.Gate{g.file}},
		}
	})
	return g
}

// flip sets both gates' results and probes them.
func (g *groupsTest) flip(disk, file bool) {
	for gate, ready := range map[*flipGate]bool{g.disk: disk, g.file: file} {
		gate.err = nil
		if !ready {
			gate.err = errNotReady
		}
	}
	probe(g.r)
}

// nodeWithConditions is the unit tests' Node with these conditions, set at a given heartbeat.
func nodeWithConditions(heartbeat time.Time, conditions ...corev1.NodeCondition) *corev1.Node {
	n := nodeWith()
	for _, c := range conditions {
		c.LastHeartbeatTime = metav1.NewTime(heartbeat)
		n.Status.Conditions = append(n.Status.Conditions, c)
	}
	return n
}

var (
	networkAvailable   = corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse}
	networkUnavailable = corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}
	kubeletReady       = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	kubeletNotReady    = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse}
	networkRequirement = gates.ConditionRequirement{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse}
)

// withNewBoot is n with the boot ID kubelet reports after a reboot.
func withNewBoot(n *corev1.Node) *corev1.Node {
	n.Status.NodeInfo.BootID = "boot-2"
	return n
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

var nodesResource = schema.GroupResource{Resource: "nodes"}

// policyDenial is how the API server words a refusal by the shipped policy.
var policyDenial = apierrors.NewForbidden(nodesResource, "n1", errors.New(
	"ValidatingAdmissionPolicy 'startup-taint-remover-own-node-only' with binding 'startup-taint-remover-own-node-only' denied request: "+
		"the startup-taint-remover may not change a Node's metadata (changed: labels) [metadata]"))

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

// removalDenial is how the API server refuses the removal in an install whose policy kept a
// placeholder for --retaint-after (kustomize before v5.8 with a select by name pattern): a
// validation that fails to evaluate answers Invalid, in the words of a Forbidden.
var removalDenial = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure,
	Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
	Message: `nodes "n1" is forbidden: ValidatingAdmissionPolicy 'startup-taint-remover-own-node-only' with binding 'startup-taint-remover-own-node-only' ` +
		`denied request: expression 'variables.newTaints.all(t, t in variables.oldTaints)' resulted in error: ` +
		`composited variable "retaintKeys" fails to evaluate: type conversion error from 'string' to 'google.protobuf.Duration'`}}

// policyRefusals reads the shipped policies' messages (message or messageExpression, as written)
// and returns, for each rule's tag, the refusal the API server would word from it.
func policyRefusals(t *testing.T) map[string]error {
	t.Helper()
	out := map[string]error{}
	for _, file := range []string{"../config/policy/policy.yaml", "../config/policy/events.yaml"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var policy admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal(raw, &policy); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i, v := range policy.Spec.Validations {
			message := v.Message + v.MessageExpression
			tags := refusalTag.FindAllStringSubmatch(message, -1)
			if len(tags) == 0 {
				t.Errorf("%s: validation %d ends with no tag: %s", file, i, message)
				continue
			}
			tag := tags[len(tags)-1][1]
			if _, dup := out[tag]; dup {
				t.Errorf("%s: tag %s on two rules", file, tag)
			}
			out[tag] = apierrors.NewForbidden(nodesResource, "n1", fmt.Errorf(
				"ValidatingAdmissionPolicy 'startup-taint-remover-%s' with binding 'b' denied request: %s", policy.Name, message))
		}
	}
	return out
}
