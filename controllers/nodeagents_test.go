// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The node agents' gate holds the taint while a DaemonSet's pod is not Ready here, names it in
// startup_taint_gate_waiting_for, asks to be checked again although no watch tells it about
// DaemonSets, and lets the taint go, and the series, once the pod is Ready.
func TestTheNodeAgentsGateNamesTheDaemonSetItWaitsForAndIsCheckedAgain(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cni", UID: "uid-cni"}}
	ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup), ds).Build()
	gate := gates.NewNodeAgentsGate(gates.NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{{Key: startup.Key}}})
	r := newTestReconciler(t, c, gate)
	reg := prometheus.NewRegistry()
	r.Registerer = reg
	r.build()
	probe(r)
	res, err := r.Reconcile(context.Background(), nodeRequest)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Second {
		t.Errorf("requeue after %v, want the gate checked again within 5s", res.RequeueAfter)
	}
	waiting := r.wired.metrics.WaitingFor.WithLabelValues(gates.NodeAgentsName, "kube-system/cni")
	if got := testutil.ToFloat64(waiting); got != 1 {
		t.Errorf("startup_taint_gate_waiting_for{agent=kube-system/cni} = %v, want 1", got)
	}
	if !hasStartup(t, c) {
		t.Fatal("the taint went while the DaemonSet has no pod here")
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cni-x",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cni", UID: ds.UID, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	if hasStartup(t, c) {
		t.Error("the taint stayed once the DaemonSet's pod is Ready")
	}
	if n, err := testutil.GatherAndCount(reg, "startup_taint_gate_waiting_for"); err != nil || n != 0 {
		t.Errorf("%d startup_taint_gate_waiting_for series (%v) once nothing holds the node, want none", n, err)
	}
}

func hasStartup(t *testing.T, c client.Client) bool {
	t.Helper()
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	return len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startup.Key}})) > 0
}
