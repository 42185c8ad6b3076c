// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A DaemonSet created after the gate listed them counts as soon as its pod shows here, or at
// the latest when the gate is about to pass: never after the taint went.
func TestTheNodeAgentsGateCountsADaemonSetAddedWhileTheNodeWaits(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	cni := daemonSet("cni")
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cni).Build()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup}, Clock: clk})
	ctx := context.Background()
	check := func() string {
		err := g.Check(ctx, Input{Node: node, Reader: c, Lister: c})
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
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cni, forged, wrongKind, daemonPodOn(cni, "n1", false)).Build()
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup}, Clock: clocktesting.NewFakePassiveClock(time.Now())})
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods); err != nil {
		t.Fatal(err)
	}
	err := g.check(node, []appsv1.DaemonSet{*cni}, pods.Items, nil)
	if err == nil || Reason(err) != ReasonDaemonPodNotReady || !strings.Contains(err.Error(), "kube-system/cni") {
		t.Fatalf("check() = %v, want kube-system/cni held as %s", err, ReasonDaemonPodNotReady)
	}
}
