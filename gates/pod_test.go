// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestParsePodRequirement(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"kube-system/k8s-app=cilium", "kube-system/k8s-app=cilium", ""},
		{"calico-system/app.kubernetes.io/name in (calico-node)", "calico-system/app.kubernetes.io/name in (calico-node)", ""},
		{"kube-system/k8s-app=cilium,tier!=test", "kube-system/k8s-app=cilium,tier!=test", ""},
		{"k8s-app=cilium", "", "not NAMESPACE/LABEL_SELECTOR"},
		{"Kube_System/k8s-app=cilium", "", "not a namespace"},
		{"kube-system/k8s-app in cilium", "", "not a label selector"},
		{"kube-system/", "", "would match every pod"},
	} {
		q, err := ParsePodRequirement(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParsePodRequirement(%q) = %v, %v; want an error with %q", tt.in, q, err, tt.err)
		case tt.err == "" && (err != nil || q.String() != tt.want):
			t.Errorf("ParsePodRequirement(%q) = %v, %v; want %s", tt.in, q, err, tt.want)
		}
	}
}

func TestThePodGateWaitsForAReadyMatchingPodOnItsNode(t *testing.T) {
	cilium, err := ParsePodRequirement("kube-system/k8s-app=cilium")
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name, ns, node string, podLabels map[string]string, ready bool, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels}, Spec: corev1.PodSpec{NodeName: node}}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if deleting {
			now := metav1.NewTime(time.Now())
			p.DeletionTimestamp, p.Finalizers = &now, []string{"example.com/hold"}
		}
		return p
	}
	agent := map[string]string{"k8s-app": "cilium"}
	for _, tt := range []struct {
		name   string
		pods   []*corev1.Pod
		reason string
	}{
		{"no pod", nil, ReasonNoPod},
		{"another node's ready pod", []*corev1.Pod{pod("a", "kube-system", "n2", agent, true, false)}, ReasonNoPod},
		{"another namespace's", []*corev1.Pod{pod("a", "default", "n1", agent, true, false)}, ReasonNoPod},
		{"other labels", []*corev1.Pod{pod("a", "kube-system", "n1", map[string]string{"k8s-app": "kube-proxy"}, true, false)}, ReasonNoPod},
		{"not ready yet", []*corev1.Pod{pod("a", "kube-system", "n1", agent, false, false)}, ReasonPodNotReady},
		{"ready but going", []*corev1.Pod{pod("a", "kube-system", "n1", agent, true, true)}, ReasonNoPod},
		{"ready", []*corev1.Pod{pod("a", "kube-system", "n1", agent, false, false), pod("b", "kube-system", "n1", agent, true, false)}, ""},
	} {
		b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
		for _, p := range tt.pods {
			b = b.WithObjects(p)
		}
		err := NewPodGate("n1", cilium).Check(context.Background(), Input{Reader: b.Build()})
		got := ""
		if err != nil {
			got = Reason(err)
		}
		if got != tt.reason {
			t.Errorf("%s: reason %q, want %q (%v)", tt.name, got, tt.reason, err)
		}
	}
}

func TestThePodGateCachesItsNodesMatchingPods(t *testing.T) {
	cilium, _ := ParsePodRequirement("kube-system/k8s-app=cilium")
	proxy, _ := ParsePodRequirement("kube-system/k8s-app=kube-proxy")
	calico, _ := ParsePodRequirement("calico-system/k8s-app=calico-node")
	_, pods := NewPodGate("n1", cilium, calico).CacheEntry()
	for ns, label := range map[string]string{"kube-system": "k8s-app=cilium", "calico-system": "k8s-app=calico-node"} {
		if got := pods.Namespaces[ns]; got.LabelSelector.String() != label || got.FieldSelector.String() != "spec.nodeName=n1" {
			t.Errorf("%s: %v / %v, want %s on this node", ns, got.LabelSelector, got.FieldSelector, label)
		}
	}
	_, two := NewPodGate("n1", cilium, proxy).CacheEntry()
	if got := two.Namespaces["kube-system"]; got.LabelSelector != nil || got.FieldSelector.String() != "spec.nodeName=n1" {
		t.Errorf("two selectors in one namespace: %v / %v, want this node's pods", got.LabelSelector, got.FieldSelector)
	}
}
