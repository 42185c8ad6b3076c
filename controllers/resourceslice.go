package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// gateResourceSlice names the DRA gate in logs, events and metrics.
const gateResourceSlice = "resourceslice"

// reasonNoDevices is the reason class of a DRA driver that has published no device for the node.
const reasonNoDevices = "no_devices"

// resourceSliceGate passes while each required Dynamic Resource Allocation driver has published a
// ResourceSlice for this node with at least one device. The manager caches only this node's
// slices, and a slice's event triggers the reconcile.
type resourceSliceGate struct {
	node    string
	drivers []string
}

func (g *resourceSliceGate) name() string { return gateResourceSlice }

func (g *resourceSliceGate) check(ctx context.Context, reader client.Reader, _ *corev1.Node) *gateError {
	return g.published(ctx, reader)
}

func (g *resourceSliceGate) cacheEntry() (client.Object, cache.ByObject) {
	return &resourcev1.ResourceSlice{}, cache.ByObject{
		Field: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, g.node),
	}
}

func (g *resourceSliceGate) watch(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	return &resourcev1.ResourceSlice{}, toNode, nil
}

func (g *resourceSliceGate) restMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return resourcev1.SchemeGroupVersion.WithKind("ResourceSlice"), meta.RESTScopeRoot
}

func (g *resourceSliceGate) published(ctx context.Context, reader client.Reader) *gateError {
	list := &resourcev1.ResourceSliceList{}
	// The cache holds this node's slices only; the node is checked below all the same.
	if err := reader.List(ctx, list); err != nil {
		return &gateError{gate: gateResourceSlice, reason: reasonError, err: fmt.Errorf("listing the ResourceSlices of node %s: %w", g.node, err)}
	}
	for _, driver := range g.drivers {
		if !slices.ContainsFunc(list.Items, func(s resourcev1.ResourceSlice) bool {
			return s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == g.node && len(s.Spec.Devices) > 0
		}) {
			return &gateError{gate: gateResourceSlice, reason: reasonNoDevices,
				err: fmt.Errorf("DRA driver %s has published no device for node %s", driver, g.node)}
		}
	}
	return nil
}
