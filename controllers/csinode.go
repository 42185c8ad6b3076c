package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// gateCSINode names the CSINode registration gate in logs, events and metrics.
const gateCSINode = "csinode"

// csiNodeGate passes once kubelet has registered the CSI driver in this node's CSINode (and, when
// asked, published its attach limit). It reads this node's CSINode from the manager's cache, and
// a CSINode watch event triggers the reconcile.
type csiNodeGate struct {
	node               string
	driver             func() string
	requireAllocatable bool
}

func (g *csiNodeGate) name() string { return gateCSINode }

func (g *csiNodeGate) check(ctx context.Context, reader client.Reader, _ *corev1.Node) *gateError {
	return g.registered(ctx, reader)
}

func (g *csiNodeGate) cacheEntry() (client.Object, cache.ByObject) {
	return &storagev1.CSINode{}, cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", g.node)}
}

// watch enqueues the CSINode's own request: it shares its Node's name.
func (g *csiNodeGate) watch(handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == g.node })
	return &storagev1.CSINode{}, &handler.EnqueueRequestForObject{}, []predicate.Predicate{thisNode}
}

func (g *csiNodeGate) restMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return storagev1.SchemeGroupVersion.WithKind("CSINode"), meta.RESTScopeRoot
}

func (g *csiNodeGate) registered(ctx context.Context, reader client.Reader) *gateError {
	driver := g.driver()
	if driver == "" {
		return &gateError{gate: gateCSINode, reason: reasonNotProbed, err: errors.New("the CSI driver has not told its name yet")}
	}
	csiNode := &storagev1.CSINode{}
	if err := reader.Get(ctx, types.NamespacedName{Name: g.node}, csiNode); err != nil {
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
