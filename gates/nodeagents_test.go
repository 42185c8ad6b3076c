// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A DaemonSet created after the gate listed them counts as soon as its pod shows here, or at
// the latest when the gate is about to pass: never after the taint went.
func TestTheNodeAgentsGateCountsADaemonSetAddedWhileTheNodeWaits(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	cni := daemonSet("cni")
	c := nodeAgentsClient(cni)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup}, Clock: clk})
	ctx := context.Background()
	check := func() string {
		err := g.Check(ctx, Input{Node: node, Reader: c, APIReader: c})
		if err == nil {
			return ""
		}
		return err.Error()
	}
	if got := check(); !strings.Contains(got, "kube-system/cni") {
		t.Fatalf("first check: %q", got)
	}
	logs := daemonSet("logs")
	for _, o := range []client.Object{logs, daemonPodOn(cni, "n1", true)} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The list is fresh, but passing asks for a list of now once it is older than a second.
	clk.SetTime(clk.Now().Add(confirmAfter + time.Millisecond))
	if got := check(); !strings.Contains(got, "kube-system/logs") {
		t.Fatalf("after a DaemonSet was added: %q, want it named", got)
	}
	dns := daemonSet("dns")
	if err := c.Create(ctx, dns); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, daemonPodOn(dns, "n1", false)); err != nil {
		t.Fatal(err)
	}
	// A pod of a DaemonSet the list lacks lists again, however fresh the list.
	if got := check(); !strings.Contains(got, "kube-system/dns") {
		t.Fatalf("after a pod of a new DaemonSet showed: %q, want it named", got)
	}
}

// A tenant who may only create pods binds one to the node, Ready, with a controller reference that
// names a node agent's DaemonSet by name and UID, from its own namespace: it does not pass for the
// agent's pod, which is not Ready.
func TestAPodOfAnotherNamespaceNeverPassesForANodeAgentsPod(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	cni := daemonSet("cni")
	forged := daemonPodOn(cni, "n1", true)
	forged.Namespace, forged.Name, forged.UID = "tenant", "forged", "forged-uid"
	wrongKind := daemonPodOn(cni, "n1", true)
	wrongKind.Name, wrongKind.UID = "wrong-kind", "wrong-kind-uid"
	wrongKind.OwnerReferences[0].APIVersion = "example.com/v1"
	c := nodeAgentsClient(cni, forged, wrongKind, daemonPodOn(cni, "n1", false))
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup}, Clock: clocktesting.NewFakePassiveClock(time.Now())})
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods); err != nil {
		t.Fatal(err)
	}
	err := g.verdict(node, []appsv1.DaemonSet{*cni}, pods.Items, nil, nil)
	if err == nil || Reason(err) != ReasonDaemonPodNotReady || !strings.Contains(err.Error(), "kube-system/cni") {
		t.Fatalf("check() = %v, want kube-system/cni held as %s", err, ReasonDaemonPodNotReady)
	}
}

// A tenant who may create DaemonSets only in its own namespace makes one that tolerates every
// taint and is never Ready: it does not hold the node, unless its namespace is named a node
// agents' one. The agent's own namespace and kube-system are, unless others are named.
func TestOnlyTheNodeAgentsNamespacesHoldTheNode(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	inNamespace := func(ns string) func(*appsv1.DaemonSet) { return func(ds *appsv1.DaemonSet) { ds.Namespace = ns } }
	cni, csi, tenant := daemonSet("cni"), daemonSet("csi", inNamespace("storage")), daemonSet("hold", inNamespace("tenant"))
	squat := daemonSet("squat", inNamespace(metav1.NamespaceDefault))
	c := nodeAgentsClient(cni, csi, tenant, squat,
		daemonPodOn(cni, "n1", true), daemonPodOn(csi, "n1", false), daemonPodOn(tenant, "n1", false), daemonPodOn(squat, "n1", false))
	for _, tc := range []struct {
		name       string
		own        string
		namespaces []string
		want       []string
	}{
		{"the defaults, the agent in kube-system", "kube-system", nil, nil},
		{"the defaults, the agent beside its agents", "storage", nil, []string{"storage/csi"}},
		{"the defaults, the agent in default, where anyone's pods land", "default", nil, nil},
		{"named", "kube-system", []string{"storage", "kube-system"}, []string{"storage/csi"}},
		{"a tenant's namespace named", "kube-system", []string{"tenant"}, []string{"tenant/hold"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Self: types.NamespacedName{Namespace: tc.own, Name: "agent"},
				Namespaces: tc.namespaces, Startup: []corev1.Taint{startup}, Clock: clocktesting.NewFakePassiveClock(time.Now())})
			err := g.Check(context.Background(), Input{Node: node, Reader: c, APIReader: c})
			var nr *NotReadyError
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Check = %v, want it to pass", err)
			case tc.want != nil && !errors.As(err, &nr):
				t.Fatalf("Check = %v, want not ready", err)
			case tc.want != nil && !slices.Equal(nr.Holders, tc.want):
				t.Fatalf("holders %q, want %q", nr.Holders, tc.want)
			}
			_, entry := g.CacheEntry()
			if got := slices.Sorted(maps.Keys(entry.Namespaces)); !slices.Equal(got, g.namespaces) {
				t.Errorf("the cache holds pods of %q, want %q", got, g.namespaces)
			}
		})
	}
}

// A DaemonSet whose pod the scheduler has not placed on the node for a minute holds the node,
// named with the scheduler's reason and the fix, unless the pod asks more than the node has at all:
// the scheduler's verdict counts every pod on the node, and a tenant can fill a node with pods of
// its own (issue 57, finding 1), so only the pod and the Node decide that it will never run here.
func TestADaemonSetWhosePodTheSchedulerCannotPlace(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	const insufficient = "0/1 nodes are available: 1 Insufficient cpu."
	for _, tc := range []struct {
		name    string
		asks    corev1.ResourceList
		since   time.Duration
		node    string
		message string
		// want is the reason class that holds the node, or "" when the gate passes.
		want string
		// says is in the verdict.
		says []string
	}{
		{name: "asking more CPU than the node has at all, for a minute", asks: cpu("3"), since: unplaceableAfter, node: "n1",
			message: insufficient},
		{name: "asking more than the node has, for a minute, with no verdict of the scheduler's", asks: cpu("3"),
			since: unplaceableAfter, node: "n1"},
		{name: "asking more than the node has, for less than a minute", asks: cpu("3"), since: unplaceableAfter - time.Second,
			node: "n1", message: insufficient, want: ReasonNoDaemonPod, says: []string{"kube-system/huge"}},
		{name: "asking what a tenant's pod holds, for a minute", asks: cpu("2"), since: time.Hour, node: "n1", message: insufficient,
			want: ReasonDaemonPodUnschedulable, says: []string{"kube-system/huge (pod huge-x: " + insufficient + ")",
				"priorityClassName system-node-critical"}},
		{name: "a host port another pod holds, for a minute", since: time.Hour, node: "n1",
			message: "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.",
			want:    ReasonDaemonPodUnschedulable, says: []string{"didn't have free ports"}},
		{name: "a device plugin's resource the node does not list yet", asks: corev1.ResourceList{"example.com/gpu": resource.MustParse("1")},
			since: time.Hour, node: "n1", message: "0/1 nodes are available: 1 Insufficient example.com/gpu.",
			want: ReasonDaemonPodUnschedulable, says: []string{"Insufficient example.com/gpu"}},
		{name: "a long message, clipped", asks: cpu("1"), since: time.Hour, node: "n1", message: strings.Repeat("é", 500),
			want: ReasonDaemonPodUnschedulable, says: []string{strings.Repeat("é", maxSchedulerMessage/2) + "…)"}},
		{name: "only another node's pod unschedulable", asks: cpu("3"), since: time.Hour, node: "n2", message: insufficient,
			want: ReasonNoDaemonPod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Now())
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(clk.Now().Add(-time.Hour))},
				Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}, Status: corev1.NodeStatus{Allocatable: cpu("2")}}
			huge := daemonSet("huge")
			pending := daemonPodOn(huge, "", false)
			pending.Spec.Containers = []corev1.Container{{Name: "agent", Resources: corev1.ResourceRequirements{Requests: tc.asks}}}
			pending.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{tc.node}}}}}}}}
			// The DaemonSet controller made it when the scheduler first tried it.
			pending.CreationTimestamp = metav1.NewTime(clk.Now().Add(-tc.since))
			if tc.message != "" {
				pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
					Reason: corev1.PodReasonUnschedulable, Message: tc.message, LastTransitionTime: metav1.NewTime(clk.Now().Add(-tc.since))}}
			}
			c := nodeAgentsClient(huge, pending)
			g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup}, Clock: clk})
			err := g.Check(context.Background(), Input{Node: node, Reader: c, APIReader: c})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want it to pass", err)
				}
				return
			}
			if got := Reason(err); got != tc.want {
				t.Fatalf("Check = %v (%s), want %s", err, got, tc.want)
			}
			if got := Holders(err); !slices.Equal(got, []string{"kube-system/huge"}) {
				t.Errorf("holders %q, want kube-system/huge", got)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Check = %q, want it to say %q", err, want)
				}
			}
		})
	}
}

// cpu is a resource list of n CPUs.
func cpu(n string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(n)}
}
