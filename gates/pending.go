// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The pods the scheduler has not placed yet: a node agent's pod that waits for a node, and why it
// may never run there.

// pendingPods returns a function that lists, once per namespace, the pods there that no node
// runs yet, from the API server's watch cache: a DaemonSet's pod waits there, with its node in
// its affinity, until the scheduler places it.
func (g *NodeAgentsGate) pendingPods(ctx context.Context, lister client.Reader) func(namespace string) ([]corev1.Pod, error) {
	listed := map[string][]corev1.Pod{}
	return func(namespace string) ([]corev1.Pod, error) {
		if pods, ok := listed[namespace]; ok {
			return pods, nil
		}
		list := &corev1.PodList{}
		err := lister.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{"spec.nodeName": ""},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		if err != nil {
			return nil, fmt.Errorf("listing the pods not yet placed in namespace %s: %w", namespace, err)
		}
		listed[namespace] = list.Items
		return list.Items, nil
	}
}

// unplaceableAfter is how long the scheduler must have found a node agent's pod unschedulable
// before the gate looks at why: long enough for a preemption, or a resource freed at boot, to place
// it.
const unplaceableAfter = time.Minute

// maxSchedulerMessage bounds how much of the scheduler's message a verdict repeats.
const maxSchedulerMessage = 200

// unschedulableFor returns pod's PodScheduled condition when the scheduler has found it
// unschedulable, without a change, for unplaceableAfter, or nil. A daemon pod can only go to its
// own node, so the verdict is about this node; but it counts every pod there, and anyone who may
// create a pod can fill a node, so it only names why the node is held, and never decides.
func unschedulableFor(pod *corev1.Pod, clk clock.PassiveClock) *corev1.PodCondition {
	if pod == nil {
		return nil
	}
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
			clk.Since(c.LastTransitionTime.Time) >= unplaceableAfter {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// neverFits reports whether pod asks more of some resource than node has allocatable at all, so
// that no eviction or preemption could place it: it would hold the node without ever running. It
// reads the pod, which the DaemonSet controller made from its template, and the Node alone, never
// the other pods on the node. A resource the Node does not list yet (a device plugin's, before it
// registers) may still come, and holds.
func neverFits(pod *corev1.Pod, node *corev1.Node) bool {
	for name, asked := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if has, ok := node.Status.Allocatable[name]; ok && asked.Cmp(has) > 0 {
			return true
		}
	}
	return false
}

// clip returns s cut to at most n bytes (less a rune cut in two), marked when cut, so one long
// message leaves room in a verdict for the DaemonSets after it.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// placing returns ds's pod for node that the scheduler has not placed yet, or nil: the DaemonSet
// controller names the node in the pod's required node affinity (metadata.name In [node]). On a
// Node younger than unplaceableAfter no pod of its can have been unschedulable that long, so the
// pods are not even listed: a booting node's checks, where DaemonSets lack pods for a moment,
// cost no list.
func (g *NodeAgentsGate) placing(ds *appsv1.DaemonSet, node *corev1.Node, pending func(string) ([]corev1.Pod, error)) (*corev1.Pod, error) {
	if pending == nil || g.clock.Since(node.CreationTimestamp.Time) < unplaceableAfter {
		return nil, nil
	}
	pods, err := pending(ds.Namespace)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if controlledBy(&pods[i], ds) && forNode(&pods[i], node.Name) {
			return &pods[i], nil
		}
	}
	return nil, nil
}

// forNode reports whether pod's required node affinity names node, as the DaemonSet controller
// writes it.
func forNode(pod *corev1.Pod, node string) bool {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && slices.Equal(f.Values, []string{node}) {
				return true
			}
		}
	}
	return false
}
