// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

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
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

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
	c := condition("example.com/AgentReady", &gateError{gate: strings.Repeat("g", 2000), reason: gates.ReasonNotReady})
	if len(c.Message) > maxConditionMessage || !strings.HasPrefix(c.Message, "The ggg") {
		t.Errorf("message of %d bytes %.40q..., want at most %d, its start kept", len(c.Message), c.Message, maxConditionMessage)
	}
}
