// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// pendingPod is a pod of namespace ns that the scheduler found unschedulable, with tolerations.
func pendingPod(ns, name string, change func(*corev1.Pod), tolerations ...corev1.Toleration) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Tolerations: tolerations}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 node(s) had untolerated taint"}}
	if change != nil {
		change(p)
	}
	return p
}

// untoleratedTest is an episode whose gate holds the startup taint, with pods in the node agents'
// namespace (kube-system) and a tenant's, counting the agent's lists of pods.
func untoleratedTest(t *testing.T, pods ...client.Object) (*episodeTest, *atomic.Int32) {
	t.Helper()
	var lists atomic.Int32
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("u1", startup)).WithObjects(pods...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				lists.Add(1)
			}
			return c.List(ctx, list, opts...)
		}})
	e := newEpisodeTestOf(t, b)
	e.set(func(r *NodeReconciler) {
		r.NodeAgentNamespaces = []string{"kube-system"}
		r.Groups[0].ConditionType = "example.com/AgentReady"
	})
	return e, &lists
}

// A minute into a hold, the agent names the pending pods of the node agents' namespaces that could
// run here but for the startup taint: in one event per change, the condition and a gauge. It never
// names a tenant's pod, one that tolerates the taint, or one that could not run here anyway, and
// it lists the pods once a minute at most, and never while the gates pass.
func TestThePodsTheStartupTaintKeepsAwayAreNamedAMinuteIntoTheHold(t *testing.T) {
	typha := pendingPod("kube-system", "typha-5f7c9-x2k", func(p *corev1.Pod) {
		p.Labels = map[string]string{"pod-template-hash": "5f7c9"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "typha-5f7c9", UID: "rs",
			Controller: new(true)}}
	})
	// Tolerates NoSchedule only, and the taint is NoExecute.
	wrongEffect := pendingPod("kube-system", "csi-controller-0", nil,
		corev1.Toleration{Key: startup.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	e, lists := untoleratedTest(t, typha, wrongEffect,
		pendingPod("kube-system", "tolerates", nil, corev1.Toleration{Key: startup.Key, Operator: corev1.TolerationOpExists}),
		pendingPod("kube-system", "tolerates-all", nil, corev1.Toleration{Operator: corev1.TolerationOpExists}),
		pendingPod("kube-system", "other-zone", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }),
		pendingPod("kube-system", "not-tried-yet", func(p *corev1.Pod) { p.Status.Conditions = nil }),
		pendingPod("kube-system", "placed", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }),
		pendingPod("team-a", "tenant", nil))
	gauge := e.r.wired.metrics.UntoleratedPods.WithLabelValues(startup.Key)

	if requeue := e.reconcile(); requeue <= 0 || requeue > lookAfter {
		t.Errorf("requeue %s at the hold's start, want at most %s, to look a minute in", requeue, lookAfter)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("%d lists of pods before the hold is a minute old, want none", n)
	}
	e.events()

	e.clock.Step(lookAfter)
	e.reconcile()
	got := e.events()
	if len(got) != 1 {
		t.Fatalf("events %q a minute in, want one %s", got, startuptaint.EventReasonUntoleratedStartupTaint)
	}
	for _, want := range []string{"Warning " + startuptaint.EventReasonUntoleratedStartupTaint,
		"kube-system/csi-controller-0, kube-system/typha-5f7c9-x2k (Deployment kube-system/typha) cannot run on any node " +
			"that carries the startup taint example.com/agent-not-ready",
		"kubectl label namespace kube-system " + startuptaint.TolerateLabel + "=true"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q, want %q in it", got[0], want)
		}
	}
	for _, never := range []string{"tolerates", "other-zone", "not-tried-yet", "placed", "tenant"} {
		if strings.Contains(got[0], never) {
			t.Errorf("event %q names %s", got[0], never)
		}
	}
	if v := testutil.ToFloat64(gauge); v != 2 {
		t.Errorf("startup_taint_untolerated_pods %v, want 2", v)
	}
	c := gates.FindCondition(e.node().Status.Conditions, "example.com/AgentReady")
	if c == nil || !strings.Contains(c.Message, "kube-system/typha-5f7c9-x2k (Deployment kube-system/typha)") {
		t.Errorf("condition %+v, want the pods named in its message", c)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("%d lists of pods a minute in, want 1: one namespace", n)
	}

	// Between looks, and at the next look that finds the same pods: no list, and no event.
	e.clock.Step(time.Second)
	if requeue := e.reconcile(); requeue != lookAfter-time.Second {
		t.Errorf("requeue %s between looks, want %s", requeue, lookAfter-time.Second)
	}
	e.clock.Step(lookAfter)
	e.reconcile()
	if n := lists.Load(); n != 2 {
		t.Errorf("%d lists after two minutes and three reconciles, want 2", n)
	}
	expectEvents(t, e.events())

	// Once the gates pass, the taint goes, the gauge is 0, and nothing is listed.
	e.ready(true)
	e.clock.Step(lookAfter)
	e.reconcile()
	if v := testutil.ToFloat64(gauge); v != 0 {
		t.Errorf("startup_taint_untolerated_pods %v once the gates pass, want 0", v)
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("%d lists once the gates pass, want still 2", n)
	}
}

// A pod the taint keeps away is reported again when the pods change, and a node whose gates pass
// at once never lists.
func TestUntoleratedPodsAreReportedOncePerChange(t *testing.T) {
	e, lists := untoleratedTest(t, pendingPod("kube-system", "a", nil))
	e.reconcile()
	e.events()
	e.clock.Step(lookAfter)
	e.reconcile()
	expectEvents(t, e.events(), "kube-system/a cannot run")
	if err := e.c.Create(context.Background(), pendingPod("kube-system", "b", nil)); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(lookAfter)
	e.reconcile()
	expectEvents(t, e.events(), "kube-system/a, kube-system/b cannot run")
	// Said again once it has gone unsaid for half an hour, before the event expires.
	for range sayAgainAfter/lookAfter - 1 {
		e.clock.Step(lookAfter)
		e.reconcile()
	}
	expectEvents(t, e.events())
	e.clock.Step(lookAfter)
	e.reconcile()
	expectEvents(t, e.events(), "kube-system/a, kube-system/b cannot run")
	if n, looks := lists.Load(), int32(2+sayAgainAfter/lookAfter); n != looks {
		t.Errorf("%d lists in %d looks, want as many", n, looks)
	}

	ready, readyLists := untoleratedTest(t, pendingPod("kube-system", "a", nil))
	ready.ready(true)
	ready.reconcile()
	ready.clock.Step(lookAfter)
	ready.reconcile()
	if n := readyLists.Load(); n != 0 {
		t.Errorf("%d lists on a node whose gates pass, want none", n)
	}
}

// An install that grants no list of pods there: the look is refused, nothing is named and nothing
// fails, and it is tried again a minute later, when the grant may have come.
func TestARefusedLookNamesNothingAndIsTriedAgain(t *testing.T) {
	var lists atomic.Int32
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("u1", startup), pendingPod("kube-system", "a", nil)).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				lists.Add(1)
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no grant"))
			}
			return c.List(ctx, list, opts...)
		}})
	e := newEpisodeTestOf(t, b)
	e.set(func(r *NodeReconciler) { r.NodeAgentNamespaces = []string{"kube-system"} })
	e.reconcile()
	e.events()
	for range 2 {
		e.clock.Step(lookAfter)
		if requeue := e.reconcile(); requeue != lookAfter {
			t.Errorf("requeue %s after a refused look, want %s", requeue, lookAfter)
		}
	}
	expectEvents(t, e.events())
	if n := lists.Load(); n != 2 {
		t.Errorf("%d refused lists in two minutes, want 2", n)
	}
}
