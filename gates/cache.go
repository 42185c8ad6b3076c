// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// MergeCacheEntries returns one cache entry that holds what a and b, two gates' entries for the
// same kind, each hold. A cache has one label and one field selector per namespace, so where the
// two differ the merged entry keeps what both require: the field terms they share (such as
// spec.nodeName), and a label selector only if it is the same.
func MergeCacheEntries(a, b cache.ByObject) cache.ByObject {
	if len(a.Namespaces) == 0 || len(b.Namespaces) == 0 {
		// One of them watches every namespace: so must the merged entry, with what every
		// namespace's selectors share (this node's pods, for the node agents' gate and the
		// container gate).
		la, fa := everywhere(a)
		lb, fb := everywhere(b)
		return cache.ByObject{Label: commonLabels(la, lb), Field: commonFields(fa, fb)}
	}
	out := cache.ByObject{Label: commonLabels(a.Label, b.Label), Field: commonFields(a.Field, b.Field)}
	out.Namespaces = map[string]cache.Config{}
	for _, m := range []map[string]cache.Config{a.Namespaces, b.Namespaces} {
		for ns, c := range m {
			if have, ok := out.Namespaces[ns]; ok {
				c = cache.Config{LabelSelector: commonLabels(have.LabelSelector, c.LabelSelector),
					FieldSelector: commonFields(have.FieldSelector, c.FieldSelector)}
			}
			out.Namespaces[ns] = c
		}
	}
	return out
}

// everywhere returns the selectors an entry holds in all of its namespaces: its own, or what each
// namespace's share, a namespace's selector standing in for the entry's where it has one.
func everywhere(e cache.ByObject) (labels.Selector, fields.Selector) {
	if len(e.Namespaces) == 0 {
		return e.Label, e.Field
	}
	first := true
	var label labels.Selector
	var field fields.Selector
	for _, c := range e.Namespaces {
		l, f := c.LabelSelector, c.FieldSelector
		if l == nil {
			l = e.Label
		}
		if f == nil {
			f = e.Field
		}
		if first {
			label, field, first = l, f, false
			continue
		}
		label, field = commonLabels(label, l), commonFields(field, f)
	}
	return label, field
}

func commonLabels(a, b labels.Selector) labels.Selector {
	if a == nil || b == nil || a.String() != b.String() {
		return nil
	}
	return a
}

func commonFields(a, b fields.Selector) fields.Selector {
	if a == nil || b == nil {
		return nil
	}
	var common []fields.Selector
	for _, ra := range a.Requirements() {
		for _, rb := range b.Requirements() {
			if ra == rb && (ra.Operator == selection.Equals || ra.Operator == selection.DoubleEquals) {
				common = append(common, fields.OneTermEqualSelector(ra.Field, ra.Value))
			}
		}
	}
	if len(common) == 0 {
		return nil
	}
	return fields.AndSelectors(common...)
}

// TrimPod is the cache's transform of the pods the gates read: it keeps what they read (the
// name, labels, owner and deletion, the node, host path volumes and the containers' mounts, the
// phase, conditions and container statuses) and drops the rest, which a pod's author can make as
// large as the API server stores (annotations, environment values, commands, probes, other
// volumes), so the cache's memory does not grow with what others write into their pods.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	kept := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion, CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		Labels: pod.Labels, OwnerReferences: pod.OwnerReferences}}
	kept.Spec.NodeName = pod.Spec.NodeName
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			kept.Spec.Volumes = append(kept.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{HostPath: v.HostPath}})
		}
	}
	for _, c := range pod.Spec.Containers {
		kept.Spec.Containers = append(kept.Spec.Containers, corev1.Container{Name: c.Name, VolumeMounts: c.VolumeMounts})
	}
	kept.Status = corev1.PodStatus{Phase: pod.Status.Phase, Conditions: pod.Status.Conditions, ContainerStatuses: pod.Status.ContainerStatuses}
	return kept, nil
}
