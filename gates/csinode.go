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
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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
	// missing is set once a check found the driver's entry missing; again, once a later check
	// found it written back (RegisteredAgain).
	missing, again bool
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
func (g *CSINodeGate) Watches(handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == g.node })
	return &storagev1.CSINode{}, &handler.EnqueueRequestForObject{}, []predicate.Predicate{thisNode}
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
			g.listed(false)
			return NotReady(ReasonNotRegistered, fmt.Errorf("CSINode %s does not exist yet", g.node))
		}
		return fmt.Errorf("reading CSINode %s: %w", g.node, err)
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name != driver {
			continue
		}
		g.listed(true)
		if g.requireAllocatable && (d.Allocatable == nil || d.Allocatable.Count == nil) {
			return NotReady(ReasonNoAllocatable, fmt.Errorf("CSINode %s: driver %s has no allocatable count yet", g.node, driver))
		}
		return nil
	}
	g.listed(false)
	return NotReady(ReasonNotRegistered, fmt.Errorf("CSINode %s does not list driver %s yet", g.node, driver))
}

// listed records whether a check found the driver's entry.
func (g *CSINodeGate) listed(found bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.again = g.again || found && g.missing
	g.missing = g.missing || !found
}

// RegisteredAgain reports whether kubelet has written the driver into CSINode since a check of
// this gate found it missing: it registered the driver after this process started, so in this
// boot, whatever the entry said before. Kubelet writes the entry only when it differs, so an
// entry from the boot before, unchanged, never shows this.
func (g *CSINodeGate) RegisteredAgain() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.again
}
