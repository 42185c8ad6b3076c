// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	nodeaffinity "k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Which DaemonSets the node agents' gate waits for on a node: those whose pod the DaemonSet
// controller would run there by its own rules, once the startup taints go, and that tolerate them.

// tolerated reports whether tolerations tolerate the startup taints: each one on node as it is
// there; one that is not there (it went, or has not come yet) with its configured effect, or with
// either effect that keeps a pod off when none is configured.
func (g *NodeAgentsGate) tolerated(tolerations []corev1.Toleration, node *corev1.Node) bool {
	tolerates := func(t corev1.Taint) bool {
		return corev1helpers.TolerationsTolerateTaint(klog.Background(), tolerations, &t, true)
	}
	for _, spec := range g.startup {
		var on []corev1.Taint
		for _, t := range node.Spec.Taints {
			if matchesStartup(spec, t) {
				on = append(on, t)
			}
		}
		switch {
		case len(on) > 0:
			if slices.ContainsFunc(on, func(t corev1.Taint) bool { return !tolerates(t) }) {
				return false
			}
		case spec.Effect != "":
			if !tolerates(spec) {
				return false
			}
		default:
			noSchedule, noExecute := spec, spec
			noSchedule.Effect, noExecute.Effect = corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute
			if !tolerates(noSchedule) && !tolerates(noExecute) {
				return false
			}
		}
	}
	return true
}

// matchesStartup reports whether taint t is the startup taint spec: its key, and its effect
// where spec has one.
func matchesStartup(spec, t corev1.Taint) bool {
	return spec.Key == t.Key && (spec.Effect == "" || spec.Effect == t.Effect)
}

// bootTaints are the taints a booting node carries until it is initialized and Ready, which go by
// themselves: the DaemonSet controller makes no pod of a DaemonSet that does not tolerate them
// until they go, and nor does the scheduler place a workload's pod, so such a DaemonSet counts from
// the start, or the gate would pass before its pod exists.
var bootTaints = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable,
	"node.cloudprovider.kubernetes.io/uninitialized"}

// withoutStartup returns taints without the startup taints and the taints of a booting node.
func (g *NodeAgentsGate) withoutStartup(taints []corev1.Taint) []corev1.Taint {
	return slices.DeleteFunc(slices.Clone(taints), func(t corev1.Taint) bool {
		return slices.Contains(bootTaints, t.Key) || slices.ContainsFunc(g.startup, func(s corev1.Taint) bool { return matchesStartup(s, t) })
	})
}

// daemonPod is the pod the DaemonSet controller would make of ds for node: its template, with the
// tolerations the controller adds to every daemon pod
// (pkg/controller/daemon/util.AddOrUpdateDaemonPodTolerations).
func daemonPod(ds *appsv1.DaemonSet, node string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Namespace = ds.Namespace
	if pod.Spec.NodeName == "" {
		// Only a template that names another node differs from the pod the controller makes.
		pod.Spec.NodeName = node
	}
	added := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if pod.Spec.HostNetwork {
		added = append(added, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoSchedule})
	}
	for _, t := range added {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	return pod
}

// shouldRun applies the DaemonSet controller's rules for whether pod runs on node
// (pkg/controller/daemon NodeShouldRunDaemonPod): its node name, its required node affinity and
// node selector, and taints of effect NoSchedule or NoExecute it does not tolerate.
func shouldRun(pod *corev1.Pod, node *corev1.Node, taints []corev1.Taint) bool {
	if pod.Spec.NodeName != node.Name {
		return false
	}
	// A term that does not parse matches nothing, as the controller reads it.
	if fits, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !fits {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, true)
	return !untolerated
}

// placementOf is what the DaemonSet controller's rules, and the node agents' gate, read of ds:
// its identity and labels, and its template's node name, node selector, affinity, tolerations and
// host network. The rest (containers, volumes, annotations, status) can be as large as the API
// server stores and is not kept.
func placementOf(ds *appsv1.DaemonSet) appsv1.DaemonSet {
	t := ds.Spec.Template.Spec
	out := appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace, UID: ds.UID, Labels: ds.Labels,
		DeletionTimestamp: ds.DeletionTimestamp}}
	out.Spec.Template.Spec = corev1.PodSpec{NodeName: t.NodeName, NodeSelector: t.NodeSelector, Affinity: t.Affinity,
		Tolerations: t.Tolerations, HostNetwork: t.HostNetwork}
	return out
}
