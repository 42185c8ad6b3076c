// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

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

// Kubelet rewrites every condition's heartbeat every few seconds on every Node: only a change of a
// required condition may cost a reconcile.
func TestOnlyARequiredConditionsChangeCausesAReconcile(t *testing.T) {
	r := &NodeReconciler{NodeName: "n1", Groups: []Group{{Name: "net", Taints: []startuptaint.TaintSpec{{Key: startup.Key}},
		Gates: []gates.Gate{gates.NewNodeConditionGate(networkRequirement)}}}}
	r.build()
	changed := r.nodeChanged()
	later := testStart.Add(10 * time.Second)
	reconciles := 0
	for _, u := range []struct{ old, new *corev1.Node }{
		{nodeWithConditions(testStart, kubeletReady), nodeWithConditions(later, kubeletReady)},                                        // a heartbeat
		{nodeWithConditions(testStart, kubeletReady), nodeWithConditions(later, kubeletNotReady)},                                     // another condition
		{nodeWithConditions(testStart, kubeletReady), nodeWithConditions(later, kubeletReady, networkUnavailable)},                    // it appears
		{nodeWithConditions(testStart, networkUnavailable), nodeWithConditions(later, networkUnavailable)},                            // its heartbeat
		{nodeWithConditions(testStart, networkUnavailable), nodeWithConditions(later, networkAvailable)},                              // it turns
		{nodeWithConditions(testStart, networkAvailable, kubeletReady), nodeWithConditions(later, networkAvailable, kubeletNotReady)}, // another
		{nodeWithConditions(testStart, kubeletReady), withNewBoot(nodeWithConditions(later, kubeletReady))},                           // a reboot
	} {
		if changed.Update(event.UpdateEvent{ObjectOld: u.old, ObjectNew: u.new}) {
			reconciles++
		}
	}
	if reconciles != 3 {
		t.Errorf("%d of 7 updates cause a reconcile, want 3: the condition appearing and turning, and a new boot ID", reconciles)
	}
}

// The taint goes once the condition holds, and the reaction time counts from then.
func TestTheTaintGoesWhenTheRequiredConditionHolds(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-nc", startup))
	e.set(func(r *NodeReconciler) {
		r.Groups = []Group{{Name: "net", Taints: []startuptaint.TaintSpec{{Key: startup.Key}}, Gates: []gates.Gate{gates.NewNodeConditionGate(networkRequirement)}}}
	})
	e.reconcile()
	expectEvents(t, e.events(), "Normal WaitingForAgent Holding startup taints: node-condition gate of group net: "+
		"node n1 has no condition NetworkUnavailable yet, want False")
	e.clock.Step(time.Minute)
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{networkAvailable}
	if err := e.c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	count, sum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	e.reconcile()
	if got := e.taints(); len(startuptaint.MatchingTaints(got, []startuptaint.TaintSpec{{Key: startup.Key}})) > 0 {
		t.Fatalf("taints %v: want the startup taint gone", got)
	}
	afterCount, afterSum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	if afterCount != count+1 || afterSum-sum > 1 {
		t.Errorf("ready-to-removed observed %d times, %.0fs; want once, under a second after the condition held", afterCount-count, afterSum-sum)
	}
}
