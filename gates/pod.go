// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// PodName names the pod readiness gate in logs, events and metrics.
const PodName = "pod"

// The reason classes of the pod gate: no matching pod on this node, and none of them ready.
const (
	ReasonNoPod       = "no_pod"
	ReasonPodNotReady = "pod_not_ready"
)

// PodRequirement asks for a Ready pod on this node in Namespace whose labels match Selector: another
// DaemonSet's pod, such as a CNI agent's, that this agent waits for without being its sidecar.
type PodRequirement struct {
	Namespace string
	Selector  labels.Selector
}

// String returns the requirement in the NAMESPACE/LABEL_SELECTOR form --require-pod accepts.
func (q PodRequirement) String() string { return q.Namespace + "/" + q.Selector.String() }

// ParsePodRequirement parses NAMESPACE/LABEL_SELECTOR: a namespace and a label selector that
// selects something (k8s-app=cilium, app.kubernetes.io/name in (calico-node)).
func ParsePodRequirement(s string) (PodRequirement, error) {
	ns, selector, ok := strings.Cut(s, "/")
	if !ok {
		return PodRequirement{}, fmt.Errorf("%q is not NAMESPACE/LABEL_SELECTOR", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return PodRequirement{}, fmt.Errorf("%q: %q is not a namespace: %s", s, ns, strings.Join(errs, "; "))
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return PodRequirement{}, fmt.Errorf("%q: %q is not a label selector: %w", s, selector, err)
	}
	if sel.Empty() {
		return PodRequirement{}, fmt.Errorf("%q: an empty selector would match every pod of the namespace", s)
	}
	return PodRequirement{Namespace: ns, Selector: sel}, nil
}

// PodGate passes while, for each requirement, a pod on this node that matches it is Ready. The
// manager caches only the pods of the required namespaces on this node that match the selectors,
// and a watch event of one causes the reconcile. It reads pods through a Role in each namespace,
// not through cluster-wide reads.
type PodGate struct {
	node     string
	required []PodRequirement
}

// NewPodGate returns a gate for the required pods on node.
func NewPodGate(node string, required ...PodRequirement) *PodGate {
	return &PodGate{node: node, required: required}
}

// Name implements Gate.
func (g *PodGate) Name() string { return PodName }

// CacheEntry implements Cached: in each required namespace, this node's pods that match its
// selector. Two selectors in one namespace cannot both be a cache's: that namespace then caches
// this node's pods.
func (g *PodGate) CacheEntry() (client.Object, cache.ByObject) {
	onNode := fields.OneTermEqualSelector("spec.nodeName", g.node)
	var entry cache.ByObject
	for i, q := range g.required {
		one := cache.ByObject{Namespaces: map[string]cache.Config{q.Namespace: {LabelSelector: q.Selector, FieldSelector: onNode}}}
		if i > 0 {
			one = MergeCacheEntries(entry, one)
		}
		entry = one
	}
	return &corev1.Pod{}, entry
}

// Watches implements Cached.
func (g *PodGate) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	required := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && pod.Spec.NodeName == g.node && slices.ContainsFunc(g.required, func(q PodRequirement) bool {
			return q.Namespace == pod.Namespace && q.Selector.Matches(labels.Set(pod.Labels))
		})
	})
	return &corev1.Pod{}, toNode, []predicate.Predicate{required}
}

// RESTMapping implements Cached.
func (g *PodGate) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace
}

// Check implements Gate.
func (g *PodGate) Check(ctx context.Context, in Input) error {
	for _, q := range g.required {
		pods := &corev1.PodList{}
		if err := in.Reader.List(ctx, pods, client.InNamespace(q.Namespace), client.MatchingLabelsSelector{Selector: q.Selector}); err != nil {
			return fmt.Errorf("listing the pods %s: %w", q, err)
		}
		found := false
		ready := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			if p.Spec.NodeName != g.node || p.DeletionTimestamp != nil {
				return false
			}
			found = true
			return podReady(&p)
		})
		switch {
		case !found:
			return NotReady(ReasonNoPod, fmt.Errorf("no pod %s on node %s yet", q, g.node))
		case !ready:
			return NotReady(ReasonPodNotReady, fmt.Errorf("no pod %s on node %s is Ready", q, g.node))
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}
