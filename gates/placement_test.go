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
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestTheNodeAgentsGateWaitsForEveryDaemonSetThatShouldRunHereAndToleratesTheStartupTaint(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "pool": "a"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup,
			// kubelet's until the node is Ready: every daemon pod tolerates it.
			{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}}}
	gpuNode := node.DeepCopy()
	gpuNode.Spec.Taints = append(gpuNode.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	notReady := node.DeepCopy()
	notReady.Spec.Taints = append(notReady.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule})
	released := node.DeepCopy()
	released.Spec.Taints = released.Spec.Taints[1:]
	withoutToleration := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Tolerations = nil }
	selecting := func(k, v string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{k: v} }
	}
	affinity := func(op corev1.NodeSelectorOperator, values ...string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: op, Values: values}}}}}}}
		}
	}
	tolerating := func(tol corev1.Toleration) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, tol)
		}
	}
	labelled := func(v string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) { ds.Labels = map[string]string{NodeAgentLabel: v} }
	}
	cni := daemonSet("cni")
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		choose NodeAgents
		self   string // the agent's own pod's DaemonSet
		// anyEffect configures the startup taint without an effect, as --taint=KEY does.
		anyEffect bool
		objects   []client.Object
		want      string // reason class; "" passes
		names     []string
	}{
		{name: "no DaemonSets", want: ""},
		{name: "a node agent the DaemonSet controller has not made a pod of here yet", objects: []client.Object{cni},
			want: ReasonNoDaemonPod, names: []string{"kube-system/cni"}},
		{name: "its pod not Ready", objects: []client.Object{cni, daemonPodOn(cni, "n1", false)},
			want: ReasonDaemonPodNotReady, names: []string{"kube-system/cni"}},
		{name: "its pod Ready", objects: []client.Object{cni, daemonPodOn(cni, "n1", true)}},
		{name: "its pod Ready on another node only", objects: []client.Object{cni, daemonPodOn(cni, "n2", true)},
			want: ReasonNoDaemonPod},
		{name: "a DaemonSet that does not tolerate the startup taint cannot be waited for",
			objects: []client.Object{daemonSet("app", withoutToleration)}},
		{name: "tolerating every taint", want: ReasonNoDaemonPod,
			objects: []client.Object{daemonSet("all", withoutToleration, tolerating(corev1.Toleration{Operator: corev1.TolerationOpExists}))}},
		{name: "tolerating another effect only", objects: []client.Object{daemonSet("other", withoutToleration,
			tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}))}},
		{name: "configured without an effect: tolerating the effect the taint has on the node", anyEffect: true, want: ReasonNoDaemonPod,
			objects: []client.Object{daemonSet("ns", withoutToleration,
				tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}))}},
		{name: "configured without an effect: tolerating another effect than the node's", anyEffect: true,
			objects: []client.Object{daemonSet("ne", withoutToleration,
				tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}))}},
		{name: "configured without an effect, the taint gone: tolerating either effect", anyEffect: true, node: released, want: ReasonNoDaemonPod,
			objects: []client.Object{daemonSet("ne", withoutToleration,
				tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}))}},
		{name: "a node selector of other nodes", objects: []client.Object{daemonSet("win", selecting("kubernetes.io/os", "windows"))}},
		{name: "a node selector of this node", objects: []client.Object{daemonSet("linux", selecting("kubernetes.io/os", "linux"))},
			want: ReasonNoDaemonPod},
		{name: "a required node affinity of other nodes", objects: []client.Object{daemonSet("b", affinity(corev1.NodeSelectorOpIn, "b"))}},
		{name: "a required node affinity of this node", objects: []client.Object{daemonSet("a", affinity(corev1.NodeSelectorOpIn, "a", "c"))},
			want: ReasonNoDaemonPod},
		{name: "another taint it does not tolerate", node: gpuNode, objects: []client.Object{cni}},
		{name: "another taint it tolerates", node: gpuNode, want: ReasonNoDaemonPod, objects: []client.Object{daemonSet("gpu",
			tolerating(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu"}))}},
		{name: "not Ready yet, before the DaemonSet controller makes pods of those that do not tolerate that", want: ReasonNoDaemonPod,
			node: notReady, objects: []client.Object{cni}},
		{name: "a template for another node", objects: []client.Object{daemonSet("pinned", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.NodeName = "n2"
		})}},
		{name: "labelled out", objects: []client.Object{daemonSet("noisy", labelled("false"))}},
		{name: "labelled in, when only those labelled count", choose: NodeAgentsLabelled,
			objects: []client.Object{cni, daemonSet("csi", labelled("true"))}, want: ReasonNoDaemonPod, names: []string{"kube-system/csi"}},
		{name: "the agent's own DaemonSet", self: "agent", objects: []client.Object{daemonSet("agent"), daemonPodOn(daemonSet("agent"), "n1", false)}},
		{name: "several, each named under its reason", objects: []client.Object{cni, daemonSet("logs"), daemonSet("dns"),
			daemonPodOn(daemonSet("dns"), "n1", false)}, want: ReasonNoDaemonPod, names: []string{"kube-system/cni", "kube-system/logs", "kube-system/dns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodeAgentsClient(tc.objects...)
			n := tc.node
			if n == nil {
				n = node
			}
			configured := startup
			if tc.anyEffect {
				configured.Effect = ""
			}
			o := NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{configured}, Choose: tc.choose,
				Clock: clocktesting.NewFakePassiveClock(time.Now())}
			if tc.self != "" {
				o.Self = types.NamespacedName{Namespace: "kube-system", Name: tc.self + "-x"}
			}
			err := NewNodeAgentsGate(o).Check(context.Background(), Input{Node: n, Reader: c, APIReader: c})
			got := ""
			if err != nil {
				got = Reason(err)
			}
			if got != tc.want {
				t.Fatalf("reason %q, want %q (%v)", got, tc.want, err)
			}
			for _, name := range tc.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("%q does not name %s", err, name)
				}
			}
		})
	}
}
