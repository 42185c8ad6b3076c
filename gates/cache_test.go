// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Two gates that cache one kind in one namespace differently get one entry that holds what both
// read: what their selectors share (this node's pods), never the namespace's every pod when they
// share something.
func TestCacheEntriesMergeToWhatBothRead(t *testing.T) {
	onNode := fields.OneTermEqualSelector("spec.nodeName", "n1")
	agents := cache.ByObject{Namespaces: map[string]cache.Config{
		"kube-system":   {LabelSelector: labels.SelectorFromSet(labels.Set{"k8s-app": "cilium"}), FieldSelector: onNode},
		"calico-system": {LabelSelector: labels.SelectorFromSet(labels.Set{"k8s-app": "calico-node"}), FieldSelector: onNode},
	}}
	_, own := NewContainerGate("n1", types.NamespacedName{Namespace: "kube-system", Name: "agent-x"}, "driver").CacheEntry()
	merged := MergeCacheEntries(agents, own)
	if got := merged.Namespaces["kube-system"]; got.LabelSelector != nil || got.FieldSelector.String() != "spec.nodeName=n1" {
		t.Errorf("kube-system caches %v / %v, want this node's pods", got.LabelSelector, got.FieldSelector)
	}
	if got := merged.Namespaces["calico-system"]; got.LabelSelector.String() != "k8s-app=calico-node" || got.FieldSelector.String() != "spec.nodeName=n1" {
		t.Errorf("calico-system caches %v / %v, want what its one gate reads", got.LabelSelector, got.FieldSelector)
	}
	if same := MergeCacheEntries(agents, agents).Namespaces["kube-system"]; same.LabelSelector.String() != "k8s-app=cilium" {
		t.Errorf("one entry twice: %v, want its selector kept", same.LabelSelector)
	}
	nothing := MergeCacheEntries(cache.ByObject{Label: labels.Everything(), Field: onNode},
		cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", "x")})
	if nothing.Field != nil || nothing.Label != nil {
		t.Errorf("nothing in common: %v / %v, want no selector", nothing.Label, nothing.Field)
	}
	if everywhere := MergeCacheEntries(agents, cache.ByObject{Field: onNode}); everywhere.Namespaces != nil {
		t.Errorf("an entry for every namespace merged into one for some: %v", everywhere.Namespaces)
	}
}

// A gate that reads this node's pods in every namespace merged with one that reads the agent's own
// Pod keeps the cache to this node's pods: never every pod of the cluster.
func TestAnEntryForEveryNamespaceKeepsWhatTheOthersShare(t *testing.T) {
	onNode := fields.OneTermEqualSelector("spec.nodeName", "n1")
	_, own := NewContainerGate("n1", types.NamespacedName{Namespace: "kube-system", Name: "agent-x"}, "driver").CacheEntry()
	for _, merged := range []cache.ByObject{MergeCacheEntries(cache.ByObject{Field: onNode}, own), MergeCacheEntries(own, cache.ByObject{Field: onNode})} {
		if merged.Namespaces != nil || merged.Field == nil || merged.Field.String() != "spec.nodeName=n1" {
			t.Errorf("merged into %v / %v, want this node's pods in every namespace", merged.Namespaces, merged.Field)
		}
	}
}

// A pod of 1 MB (annotations, environment values, a command) is cached as the little the gates
// read, and the node agents' gate judges the trimmed pod as it judges the whole one.
func TestTrimPodKeepsWhatTheGatesRead(t *testing.T) {
	ds := daemonSet("csi", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Volumes = []corev1.Volume{hostPath("registration", "/var/lib/kubelet/plugins_registry"),
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}
		ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "driver", Command: []string{strings.Repeat("c", 300<<10)},
			Env:          []corev1.EnvVar{{Name: "SECRET", Value: strings.Repeat("s", 300<<10)}},
			VolumeMounts: []corev1.VolumeMount{{Name: "registration", MountPath: "/registration"}}}}
	})
	pod := daemonPodOn(ds, "n1", true)
	pod.Labels = map[string]string{"app": "csi"}
	pod.Annotations = map[string]string{"big": strings.Repeat("a", 300<<10)}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "driver", Ready: true}}
	out, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*corev1.Pod)
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, Labels: pod.Labels,
		OwnerReferences: pod.OwnerReferences},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{hostPath("registration", "/var/lib/kubelet/plugins_registry")},
			Containers: []corev1.Container{{Name: "driver", VolumeMounts: pod.Spec.Containers[0].VolumeMounts}}},
		Status: corev1.PodStatus{Conditions: pod.Status.Conditions, ContainerStatuses: pod.Status.ContainerStatuses}}
	if !equality.Semantic.DeepEqual(kept, want) {
		t.Fatalf("TrimPod kept %+v, want %+v", kept, want)
	}
	if data, _ := json.Marshal(kept); len(data) > 2<<10 {
		t.Fatalf("the trimmed pod is %d bytes, want under 2 KiB", len(data))
	}
	if got, _ := TrimPod(ds); got != ds {
		t.Fatal("TrimPod changed an object that is not a pod")
	}
}

// The node agents' gate keeps, of each DaemonSet it lists, what placement reads: a 1 MB template
// is kept as its tolerations, affinity and node selector.
func TestPlacementOfKeepsWhatPlacementReads(t *testing.T) {
	ds := daemonSet("csi", func(ds *appsv1.DaemonSet) {
		ds.Labels = map[string]string{NodeAgentLabel: "true"}
		ds.Annotations = map[string]string{"big": strings.Repeat("a", 200<<10)}
		ds.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "a"}
		ds.Spec.Template.Spec.HostNetwork = true
		ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("e", 1<<20)}}}}
	})
	kept := placementOf(ds)
	if data, _ := json.Marshal(kept); len(data) > 1<<10 {
		t.Fatalf("the DaemonSet kept is %d bytes, want under 1 KiB", len(data))
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "a"}}}
	if !equality.Semantic.DeepEqual(daemonPod(&kept, "n1").Spec.Tolerations, daemonPod(ds, "n1").Spec.Tolerations) ||
		!shouldRun(daemonPod(&kept, "n1"), node, nil) || kept.UID != ds.UID || kept.Labels[NodeAgentLabel] != "true" {
		t.Fatalf("placementOf lost what placement reads: %+v", kept)
	}
}
