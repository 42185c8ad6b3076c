package controllers

import (
	"context"
	"errors"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gateCSINode names the CSINode registration gate in logs, events and metrics.
const gateCSINode = "csinode"

// csiNodeGate passes once kubelet has registered the CSI driver in this node's CSINode (and, when
// asked, published its attach limit). Unlike the local gates it reads the manager's cache, so the
// reconciler checks it, and a CSINode watch event triggers that.
type csiNodeGate struct {
	reader             client.Reader
	node               string
	driver             func() string
	requireAllocatable bool

	log gateLog
}

// check returns why the gate of group does not pass, or nil.
func (g *csiNodeGate) check(ctx context.Context, group string) *gateError {
	return g.log.report(ctx, group, gateCSINode, g.registered(ctx))
}

func (g *csiNodeGate) registered(ctx context.Context) *gateError {
	driver := g.driver()
	if driver == "" {
		return &gateError{gate: gateCSINode, reason: reasonNotProbed, err: errors.New("the CSI driver has not told its name yet")}
	}
	csiNode := &storagev1.CSINode{}
	if err := g.reader.Get(ctx, types.NamespacedName{Name: g.node}, csiNode); err != nil {
		if apierrors.IsNotFound(err) {
			return &gateError{gate: gateCSINode, reason: reasonNotRegistered, err: fmt.Errorf("CSINode %s does not exist yet", g.node)}
		}
		return &gateError{gate: gateCSINode, reason: reasonError, err: fmt.Errorf("reading CSINode %s: %w", g.node, err)}
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name != driver {
			continue
		}
		if g.requireAllocatable && (d.Allocatable == nil || d.Allocatable.Count == nil) {
			return &gateError{gate: gateCSINode, reason: reasonNoAllocatable,
				err: fmt.Errorf("CSINode %s: driver %s has no allocatable count yet", g.node, driver)}
		}
		return nil
	}
	return &gateError{gate: gateCSINode, reason: reasonNotRegistered,
		err: fmt.Errorf("CSINode %s does not list driver %s yet", g.node, driver)}
}
