// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ResourceSliceName names the DRA gate in logs, events and metrics.
const ResourceSliceName = "resourceslice"

// ReasonNoDevices is the reason class of a DRA driver that has published no device for the node.
const ReasonNoDevices = "no_devices"

// ResourceSliceGate passes while each required Dynamic Resource Allocation driver has published a
// ResourceSlice for this node with at least one device. The manager caches only this node's
// slices, and a slice's event causes the reconcile.
type ResourceSliceGate struct {
	node    string
	drivers []string
}

// NewResourceSliceGate returns a gate for the slices of node of each of drivers.
func NewResourceSliceGate(node string, drivers ...string) *ResourceSliceGate {
	return &ResourceSliceGate{node: node, drivers: drivers}
}

// Name implements Gate.
func (g *ResourceSliceGate) Name() string { return ResourceSliceName }

// Title implements Titled.
func (g *ResourceSliceGate) Title() string { return "ResourceSlice" }

// CacheEntry implements Cached: this node's slices only.
func (g *ResourceSliceGate) CacheEntry() (client.Object, cache.ByObject) {
	return &resourcev1.ResourceSlice{}, cache.ByObject{
		Field: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, g.node),
	}
}

// Watches implements Cached.
func (g *ResourceSliceGate) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	return &resourcev1.ResourceSlice{}, toNode, nil
}

// RESTMapping implements Cached.
func (g *ResourceSliceGate) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return resourcev1.SchemeGroupVersion.WithKind("ResourceSlice"), meta.RESTScopeRoot
}

// Check implements Gate.
func (g *ResourceSliceGate) Check(ctx context.Context, in Input) error {
	list := &resourcev1.ResourceSliceList{}
	// The cache holds this node's slices only; the node is checked below all the same.
	if err := in.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("listing the ResourceSlices of node %s: %w", g.node, err)
	}
	for _, driver := range g.drivers {
		if !slices.ContainsFunc(list.Items, func(s resourcev1.ResourceSlice) bool {
			return s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == g.node && len(s.Spec.Devices) > 0
		}) {
			return NotReady(ReasonNoDevices, fmt.Errorf("DRA driver %s has published no device for node %s", driver, g.node))
		}
	}
	return nil
}
