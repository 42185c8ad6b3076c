// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Whose pod is whose: a node agent's pods by their controller reference, checked by name, UID and
// namespace, and the agent's own.

// selfPod is the agent's own pod, when it is among pods.
func (g *NodeAgentsGate) selfPod(pods []corev1.Pod) *corev1.Pod {
	for i := range pods {
		if pods[i].Namespace == g.self.Namespace && pods[i].Name == g.self.Name {
			return &pods[i]
		}
	}
	return nil
}

// daemonSetRef is pod's controller reference when it names a DaemonSet (apps), or nil.
func daemonSetRef(pod *corev1.Pod) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "DaemonSet" || !strings.HasPrefix(ref.APIVersion, appsv1.GroupName+"/") {
		return nil
	}
	return ref
}

// controlledBy reports whether ds controls pod: its controller reference names ds by name and
// UID, and the pod is in ds's namespace, where an owner must be. Anyone who may create a pod can
// write any UID into its reference, so a UID alone would let a pod in another namespace pass
// for a node agent's.
func controlledBy(pod *corev1.Pod, ds *appsv1.DaemonSet) bool {
	ref := daemonSetRef(pod)
	return ref != nil && pod.Namespace == ds.Namespace && ref.Name == ds.Name && ref.UID == ds.UID
}

// podOf returns the pod of ds among pods, or nil: a Ready one that is not being deleted first,
// then a Ready one (a rollout's old pod, still serving), then any.
func podOf(ds *appsv1.DaemonSet, pods []corev1.Pod) *corev1.Pod {
	var found *corev1.Pod
	rank := func(p *corev1.Pod) int {
		r := 0
		if podReady(p) {
			r += 2
		}
		if p.DeletionTimestamp == nil {
			r++
		}
		return r
	}
	for i := range pods {
		p := &pods[i]
		if !controlledBy(p, ds) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if found == nil || rank(p) > rank(found) {
			found = p
		}
	}
	return found
}
