package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// DefaultProbeInterval is how often the local gates are probed when ProbeInterval is zero.
const DefaultProbeInterval = time.Second

// NodeReconciler removes the configured startup taints from one Node once every readiness gate
// passes, and keeps doing so for its whole life: a taint re-added later is removed again on the
// watch event that shows it.
//
// Everything it needs comes through its fields, so a driver can run it in its own manager:
//
//	err := (&controllers.NodeReconciler{NodeName: node, CSI: gate}).SetupWithManager(mgr)
//
// That manager's cache should hold only this node's objects; see CacheOptions.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
type NodeReconciler struct {
	// Client reads from the manager's cache and writes the patch. Set by SetupWithManager when nil.
	Client client.Client
	// APIReader reads the Node from the API server after a conflict, when the cache may still be
	// behind. Set by SetupWithManager when nil.
	APIReader client.Reader

	// NodeName is the Node this controller looks after: the one its pod runs on.
	NodeName string
	// Taints selects the startup taints to remove. When empty, the CSI driver's conventional
	// taint, "<driver name>/agent-not-ready", is used once the driver has reported its name.
	Taints []TaintSpec

	// CSI, when set, is the CSI driver gate: its socket must answer Probe.
	CSI *CSIGate
	// RequireCSINode also waits until kubelet has registered the CSI driver in this node's
	// CSINode object. It needs CSI.
	RequireCSINode bool
	// RequireAllocatable also waits until that CSINode entry has allocatable.count, so the
	// scheduler knows the attach limit before pods arrive. It needs RequireCSINode.
	RequireAllocatable bool
	// Gates are further local readiness checks, such as an HTTP health endpoint.
	Gates []Gate
	// ProbeInterval is how often the local gates are probed; DefaultProbeInterval when zero.
	ProbeInterval time.Duration

	prober *prober
}

// CacheOptions restricts a manager's cache to the named node's Node and CSINode, so the cost of
// each agent does not grow with the size of the cluster.
func CacheOptions(nodeName string) cache.Options {
	byName := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", nodeName)}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}:       byName,
		&storagev1.CSINode{}: byName,
	}}
}

// SetupWithManager validates the reconciler's fields and adds it, with its prober, to mgr.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.validate(); err != nil {
		return err
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	interval := r.ProbeInterval
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	var gates []Gate
	if r.CSI != nil {
		gates = append(gates, r.CSI)
	}
	gates = append(gates, r.Gates...)
	r.prober = newProber(gates, interval, r.NodeName)
	if err := mgr.Add(r.prober); err != nil {
		return fmt.Errorf("adding the readiness prober: %w", err)
	}

	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("startup-taint").
		For(&corev1.Node{}, builder.WithPredicates(thisNode, taintsChanged())).
		WatchesRawSource(source.Channel(r.prober.events, &handler.EnqueueRequestForObject{}))
	if r.RequireCSINode {
		// The CSINode shares its Node's name, so its events map to that Node's request.
		b = b.Watches(&storagev1.CSINode{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(thisNode))
	}
	return b.Complete(r)
}

func (r *NodeReconciler) validate() error {
	switch {
	case r.NodeName == "":
		return errors.New("NodeReconciler: NodeName is required")
	case r.CSI == nil && len(r.Gates) == 0:
		return errors.New("NodeReconciler: at least one readiness gate is required (CSI or Gates)")
	case r.CSI == nil && len(r.Taints) == 0:
		return errors.New("NodeReconciler: Taints is required without a CSI driver to name the default taint")
	case r.RequireCSINode && r.CSI == nil:
		return errors.New("NodeReconciler: RequireCSINode needs CSI")
	case r.RequireAllocatable && !r.RequireCSINode:
		return errors.New("NodeReconciler: RequireAllocatable needs RequireCSINode")
	}
	return nil
}

// taintsChanged lets through node creations and updates that change the taints. Kubelet's
// status updates and resyncs cannot change the outcome, so they cause no reconcile.
func taintsChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			return !okOld || !okNew || !equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints)
		},
	}
}

// taintSpecs returns the configured specs, or the CSI driver's default once its name is known.
func (r *NodeReconciler) taintSpecs() []TaintSpec {
	if len(r.Taints) > 0 {
		return r.Taints
	}
	if name := r.CSI.DriverName(); name != "" {
		return []TaintSpec{DefaultTaintSpec(name)}
	}
	return nil
}

// Reconcile removes the startup taints from the node when all readiness gates pass.
func (r *NodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	specs := r.taintSpecs()
	if len(specs) == 0 {
		logger.V(4).Info("waiting for the CSI driver's name to know its startup taint")
		return ctrl.Result{}, nil
	}
	if len(MatchingTaints(node.Spec.Taints, specs)) == 0 {
		logger.V(4).Info("no startup taint on the node")
		return ctrl.Result{}, nil
	}
	if gate, err := r.notReady(ctx); err != nil {
		// Not an error to retry: the prober or the CSINode watch triggers the next reconcile.
		logger.V(4).Info("holding startup taints", "gate", gate, "reason", err.Error())
		return ctrl.Result{}, nil
	}
	removed, err := r.removeTaints(ctx, node, specs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(removed) > 0 {
		logger.Info("removed startup taints", "taints", taintStrings(removed))
	}
	return ctrl.Result{}, nil
}

// notReady returns the first gate that does not pass and why, or "" and nil when all pass.
func (r *NodeReconciler) notReady(ctx context.Context) (string, error) {
	if gate, err := r.prober.notReady(); err != nil {
		return gate, err
	}
	if !r.RequireCSINode {
		return "", nil
	}
	driver := r.CSI.DriverName()
	csiNode := &storagev1.CSINode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, csiNode); err != nil {
		return "csinode", fmt.Errorf("CSINode %s: %w", r.NodeName, err)
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name != driver {
			continue
		}
		if r.RequireAllocatable && (d.Allocatable == nil || d.Allocatable.Count == nil) {
			return "csinode", fmt.Errorf("CSINode %s: driver %s has no allocatable count yet", r.NodeName, driver)
		}
		return "", nil
	}
	return "csinode", fmt.Errorf("CSINode %s does not list driver %s yet", r.NodeName, driver)
}

// removeTaints patches the matching taints away and returns the ones it removed. A taint that is
// already gone counts as success, and a Node that no longer exists is not an error.
func (r *NodeReconciler) removeTaints(ctx context.Context, node *corev1.Node, specs []TaintSpec) ([]corev1.Taint, error) {
	var removed []corev1.Taint
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			// The cache lost the race; read the Node as the API server has it now.
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
				return err
			}
		}
		first = false
		orig := node.DeepCopy()
		node.Spec.Taints = WithoutTaints(orig.Spec.Taints, specs)
		if equality.Semantic.DeepEqual(orig.Spec.Taints, node.Spec.Taints) {
			removed = nil
			return nil
		}
		// A merge patch replaces the whole taint list; the resourceVersion lock makes it fail
		// instead of dropping a taint another writer added since we read the Node.
		if err := r.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		removed = MatchingTaints(orig.Spec.Taints, specs)
		return nil
	})
	if err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("removing startup taints from node %s: %w", node.Name, err)
	}
	return removed, nil
}

func taintStrings(taints []corev1.Taint) []string {
	out := make([]string, len(taints))
	for i, t := range taints {
		out[i] = t.ToString()
	}
	return out
}
