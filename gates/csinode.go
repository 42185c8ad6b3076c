// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"sync"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// CSINodeName names the CSINode registration gate in logs, events and metrics.
const CSINodeName = "csinode"

// The reason classes of the CSINode gate: a driver kubelet has not registered, and one without its
// attach limit.
const (
	ReasonNotRegistered = "not_registered"
	ReasonNoAllocatable = "no_allocatable"
)

// CSINodeGate passes once kubelet has registered the CSI driver in this node's CSINode (and, when
// asked, published its attach limit). It reads this node's CSINode from the manager's cache, and
// a CSINode watch event causes the reconcile.
type CSINodeGate struct {
	node               string
	driver             DriverNamer
	requireAllocatable bool

	mu sync.Mutex
	// written holds the drivers whose entries kubelet added to this node's CSINode since the
	// gate's watch began (RegisteredAgain).
	written map[string]bool
}

// NewCSINodeGate returns a gate for node's CSINode entry of the driver that driver names, such as
// a CSIGate. With requireAllocatable it also waits for the entry's allocatable.count, so the
// scheduler knows the attach limit before pods arrive.
func NewCSINodeGate(node string, driver DriverNamer, requireAllocatable bool) *CSINodeGate {
	return &CSINodeGate{node: node, driver: driver, requireAllocatable: requireAllocatable}
}

// Name implements Gate.
func (g *CSINodeGate) Name() string { return CSINodeName }

// Title implements Titled.
func (g *CSINodeGate) Title() string { return "CSINode" }

// CacheEntry implements Cached: this node's CSINode only.
func (g *CSINodeGate) CacheEntry() (client.Object, cache.ByObject) {
	return &storagev1.CSINode{}, cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", g.node)}
}

// Watches implements Cached. It enqueues the CSINode's own request: it shares its Node's name.
// On the way it records the drivers each event adds (RegisteredAgain), whatever the reconciles
// that follow see: kubelet can take an entry out and write it back within a second.
func (g *CSINodeGate) Watches(handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == g.node })
	enqueue := &handler.EnqueueRequestForObject{}
	record := handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// The initial list is what CSINode held before this process: no write of this boot.
			if !e.IsInInitialList {
				g.recordAdded(nil, e.Object)
			}
			enqueue.Create(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			g.recordAdded(e.ObjectOld, e.ObjectNew)
			enqueue.Update(ctx, e, q)
		},
		DeleteFunc:  enqueue.Delete,
		GenericFunc: enqueue.Generic,
	}
	return &storagev1.CSINode{}, record, []predicate.Predicate{thisNode}
}

// recordAdded records the drivers newObj lists and oldObj (nil for a new CSINode) does not.
func (g *CSINodeGate) recordAdded(oldObj, newObj client.Object) {
	had := map[string]bool{}
	if old, ok := oldObj.(*storagev1.CSINode); ok {
		for _, d := range old.Spec.Drivers {
			had[d.Name] = true
		}
	}
	cn, ok := newObj.(*storagev1.CSINode)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range cn.Spec.Drivers {
		if !had[d.Name] {
			if g.written == nil {
				g.written = map[string]bool{}
			}
			g.written[d.Name] = true
		}
	}
}

// RegisteredAgain reports whether kubelet has added the driver's entry to CSINode since this
// process began to watch it: kubelet registered the driver after this process started, so in this
// boot, whatever the entry said before. Kubelet writes the entry only when it differs, so an entry
// from the boot before, unchanged, never shows this.
func (g *CSINodeGate) RegisteredAgain() bool {
	driver := g.driver.DriverName()
	g.mu.Lock()
	defer g.mu.Unlock()
	return driver != "" && g.written[driver]
}

// RESTMapping implements Cached.
func (g *CSINodeGate) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return storagev1.SchemeGroupVersion.WithKind("CSINode"), meta.RESTScopeRoot
}

// Check implements Gate.
func (g *CSINodeGate) Check(ctx context.Context, in Input) error {
	driver := g.driver.DriverName()
	if driver == "" {
		return NotReady(ReasonNotProbed, errors.New("the CSI driver has not told its name yet"))
	}
	csiNode := &storagev1.CSINode{}
	if err := in.Reader.Get(ctx, types.NamespacedName{Name: g.node}, csiNode); err != nil {
		if apierrors.IsNotFound(err) {
			return NotReady(ReasonNotRegistered, fmt.Errorf("CSINode %s does not exist yet", g.node))
		}
		return fmt.Errorf("reading CSINode %s: %w", g.node, err)
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name != driver {
			continue
		}
		if g.requireAllocatable && (d.Allocatable == nil || d.Allocatable.Count == nil) {
			return NotReady(ReasonNoAllocatable, fmt.Errorf("CSINode %s: driver %s has no allocatable count yet", g.node, driver))
		}
		return nil
	}
	return NotReady(ReasonNotRegistered, fmt.Errorf("CSINode %s does not list driver %s yet", g.node, driver))
}
