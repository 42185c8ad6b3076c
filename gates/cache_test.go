// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"testing"

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
