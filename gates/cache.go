// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
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
