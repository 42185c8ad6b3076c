package controllers

import (
	"context"
	"fmt"
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gateResourceSlice names the DRA gate in logs, events and metrics.
const gateResourceSlice = "resourceslice"

// reasonNoDevices is the reason class of a DRA driver that has published no device for the node.
const reasonNoDevices = "no_devices"

// resourceSliceGate passes while each required Dynamic Resource Allocation driver has published a
// ResourceSlice for this node with at least one device. It reads the manager's cache, which holds
// only this node's slices (see NodeReconciler.CacheOptions), and a slice's event triggers the
// reconcile.
type resourceSliceGate struct {
	reader  client.Reader
	node    string
	drivers []string

	log gateLog
}

// check returns why the gate of group does not pass, or nil.
func (g *resourceSliceGate) check(ctx context.Context, group string) *gateError {
	return g.log.report(ctx, group, gateResourceSlice, g.published(ctx))
}

func (g *resourceSliceGate) published(ctx context.Context) *gateError {
	list := &resourcev1.ResourceSliceList{}
	// The cache holds this node's slices only; the node is checked below all the same.
	if err := g.reader.List(ctx, list); err != nil {
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
