package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// DefaultProbeInterval is how often the local gates are probed when ProbeInterval is zero.
const DefaultProbeInterval = time.Second

// MaxRetryInterval caps the backoff between retries of a failing removal.
const MaxRetryInterval = 5 * time.Minute

// gateCSINode names the CSINode registration gate in logs, events and metrics.
const gateCSINode = "csinode"

// cacheSyncTimeout is, in effect, forever; shutdown still cancels the wait.
const cacheSyncTimeout = 100 * 365 * 24 * time.Hour

// conflictBackoff spaces the retries of a patch that lost a race with another writer; jitter
// keeps two agents that conflict once from conflicting again in lockstep.
var conflictBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1}

// EventSource names the controller in the events it records; the admission policy lets the agent
// record events only as it.
const EventSource = "startup-taint-remover"

// Reasons of the events the controller records on its Node.
const (
	ReasonTaintRemoved      = "TaintRemoved"
	ReasonTaintRemovedAgain = "TaintRemovedAgain"
	ReasonWaitingForDriver  = "WaitingForDriver"
	ReasonRemovalFailed     = "RemovalFailed"
)

// NodeReconciler removes the configured startup taints from one Node once every readiness gate
// passes, and keeps doing so for its whole life: a taint re-added later is removed again on the
// watch event that shows it.
//
// Everything it needs comes through its fields, so a driver can run it in its own manager:
//
//	err := (&controllers.NodeReconciler{NodeName: node, CSI: gate}).SetupWithManager(mgr)
//
// That manager's cache should hold only this node's objects; see CacheOptions.
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
	// Recorder records events on the Node. Set by SetupWithManager when nil.
	Recorder events.EventRecorder
	// Confinement, when set, checks at start, and whenever the patches change between forbidden
	// and allowed, that the admission policy confines this agent. SetupWithManager adds it to the
	// manager and fills in its empty fields from the reconciler's.
	Confinement *ConfinementCheck

	prober *prober
	state  nodeState
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

// RESTMapper knows the few kinds this controller touches. A manager that serves only this
// controller can use it as its MapperProvider and so start without API discovery, which fails,
// and keeps failing, while the API server is unreachable, and which otherwise delays the first
// patch while the mapping is looked up.
func RESTMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	m.Add(storagev1.SchemeGroupVersion.WithKind("CSINode"), meta.RESTScopeRoot)
	return m, nil
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
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(EventSource)
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
	if c := r.Confinement; c != nil {
		if c.Client == nil {
			c.Client = r.Client
		}
		if c.NodeName == "" {
			c.NodeName = r.NodeName
		}
		if c.Recorder == nil {
			c.Recorder = r.Recorder
		}
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("adding the confinement check: %w", err)
		}
	}

	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("startup-taint").
		For(&corev1.Node{}, builder.WithPredicates(thisNode, taintsChanged())).
		WatchesRawSource(source.Channel(r.prober.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, MaxRetryInterval),
			// A node agent waits for the API server however long it is away; giving up after the
			// default two minutes would make the pod exit and crash-loop through an outage.
			CacheSyncTimeout: cacheSyncTimeout,
		})
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

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
// Events about a Node can only be written in "default" (the API server's rule for cluster-scoped
// objects), and a Role there would be moved by any overlay's namespace; the admission policy
// confines these events to the agent's own Node instead.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

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
	st := &r.state
	if st.uid != node.UID {
		// A new Node under this name (re-registered): its history starts afresh.
		*st = nodeState{uid: node.UID}
	}
	now := time.Now()
	held := r.observeTaints(ctx, node, specs, now)

	notReady, readySince := r.notReady(ctx, now)
	if len(held) == 0 {
		logger.V(4).Info("no startup taint on the node")
		return ctrl.Result{}, nil
	}
	if notReady != nil {
		// Not an error to retry: the prober or the CSINode watch triggers the next reconcile.
		r.waiting(ctx, node, notReady)
		return ctrl.Result{}, nil
	}

	removed, err := r.removeTaints(ctx, node, specs)
	if err != nil {
		return r.removalFailed(ctx, node, specsSelecting(held, specs), err)
	}
	if st.failure == metrics.ResultForbidden {
		r.permissionsChanged()
	}
	st.failure, st.retryAfter = "", 0
	if len(removed) == 0 {
		return ctrl.Result{}, nil // already gone, or the Node was deleted meanwhile
	}
	r.removed(ctx, node, removed, specsSelecting(removed, specs), maxTime(readySince, st.heldSince))
	return ctrl.Result{}, nil
}

// nodeState is what the reconciler remembers about its Node between reconciles. Only the single
// worker of this controller touches it.
type nodeState struct {
	uid types.UID
	// present is, by taint spec, whether it was on the node at the last reconcile.
	present map[string]bool
	// removedBefore holds the specs this pod has removed from this Node at least once.
	removedBefore map[string]bool
	// readded holds the specs that came back since their last removal.
	readded map[string]bool
	// heldSince is when a startup taint was first seen in the current episode.
	heldSince time.Time
	// firstRemovalDone is set once this Node's first removal has been measured.
	firstRemovalDone bool
	// csinodeSince is when the CSINode gate was first seen passing; zero while it does not.
	csinodeSince time.Time
	// csinodeReason is the CSINode gate's last result ("passes" or a reason class), to log only changes.
	csinodeReason string
	// waitEvents holds the gate and reason classes already sent as events in this episode, so a
	// flapping driver cannot cause an event storm.
	waitEvents map[string]bool
	// failure is the last removal failure class, to report only changes; retryAfter is the
	// current backoff for failures that a retry does not cure by itself.
	failure    string
	retryAfter time.Duration
}

// observeTaints records which configured taints are on the node, counts the ones that came back
// after this pod removed them, and returns the matching taints.
func (r *NodeReconciler) observeTaints(ctx context.Context, node *corev1.Node, specs []TaintSpec, now time.Time) []corev1.Taint {
	st := &r.state
	if st.present == nil {
		st.present, st.removedBefore, st.readded, st.waitEvents = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	held := MatchingTaints(node.Spec.Taints, specs)
	for _, spec := range specs {
		key := spec.String()
		present := len(MatchingTaints(node.Spec.Taints, []TaintSpec{spec})) > 0
		if present && !st.present[key] && st.removedBefore[key] {
			log.FromContext(ctx).Info("startup taint came back", "taint", key)
			metrics.Readded.WithLabelValues(key).Inc()
			st.readded[key] = true
		}
		st.present[key] = present
		metrics.Present.WithLabelValues(key).Set(boolToFloat(present))
	}
	switch {
	case len(held) == 0:
		st.heldSince = time.Time{}
	case st.heldSince.IsZero():
		st.heldSince = now
	}
	return held
}

// notReady returns the first gate that does not pass, or nil and the time since when all pass.
// It evaluates every gate, so the gate metrics stay current.
func (r *NodeReconciler) notReady(ctx context.Context, now time.Time) (*gateError, time.Time) {
	local, since := r.prober.notReady()
	if !r.RequireCSINode {
		return local, since
	}
	csiNodeErr := r.csiNodeRegistered(ctx)
	st := &r.state
	reason := "passes"
	if csiNodeErr != nil {
		reason = csiNodeErr.reason
	}
	if reason != st.csinodeReason {
		// Logged on change only, like the local gates' results in the prober.
		if csiNodeErr == nil {
			log.FromContext(ctx).Info("readiness gate passes", "gate", gateCSINode)
		} else {
			log.FromContext(ctx).Info("readiness gate does not pass", "gate", gateCSINode, "reason", reason, "detail", csiNodeErr.err.Error())
		}
		st.csinodeReason = reason
	}
	if csiNodeErr != nil {
		metrics.GateReady.WithLabelValues(gateCSINode).Set(0)
		st.csinodeSince = time.Time{}
	} else {
		metrics.GateReady.WithLabelValues(gateCSINode).Set(1)
		if st.csinodeSince.IsZero() {
			st.csinodeSince = now
		}
	}
	switch {
	case local != nil:
		return local, time.Time{}
	case csiNodeErr != nil:
		return csiNodeErr, time.Time{}
	}
	return nil, maxTime(since, st.csinodeSince)
}

// csiNodeRegistered checks that kubelet has listed the CSI driver in this node's CSINode.
func (r *NodeReconciler) csiNodeRegistered(ctx context.Context) *gateError {
	driver := r.CSI.DriverName()
	if driver == "" {
		return &gateError{gate: gateCSINode, reason: reasonNotProbed, err: errors.New("the CSI driver has not told its name yet")}
	}
	csiNode := &storagev1.CSINode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, csiNode); err != nil {
		if apierrors.IsNotFound(err) {
			return &gateError{gate: gateCSINode, reason: reasonNotRegistered, err: fmt.Errorf("CSINode %s does not exist yet", r.NodeName)}
		}
		return &gateError{gate: gateCSINode, reason: reasonError, err: fmt.Errorf("reading CSINode %s: %w", r.NodeName, err)}
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name != driver {
			continue
		}
		if r.RequireAllocatable && (d.Allocatable == nil || d.Allocatable.Count == nil) {
			return &gateError{gate: gateCSINode, reason: reasonNoAllocatable,
				err: fmt.Errorf("CSINode %s: driver %s has no allocatable count yet", r.NodeName, driver)}
		}
		return nil
	}
	return &gateError{gate: gateCSINode, reason: reasonNotRegistered,
		err: fmt.Errorf("CSINode %s does not list driver %s yet", r.NodeName, driver)}
}

// waiting reports a gate that holds the taint with an event, the first time each gate and reason
// class holds it in this episode, so a flapping driver cannot cause an event storm. The gates log
// their own changes.
func (r *NodeReconciler) waiting(ctx context.Context, node *corev1.Node, gerr *gateError) {
	log.FromContext(ctx).V(4).Info("holding startup taints", "gate", gerr.gate, "reason", gerr.reason)
	st := &r.state
	if gerr.reason == reasonNotProbed || st.waitEvents[gerr.key()] {
		return
	}
	st.waitEvents[gerr.key()] = true
	r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, ReasonWaitingForDriver, "WaitForReadiness",
		"Holding startup taints: %s", gerr.Error())
}

// removed records a successful removal of the taints that specs selected: metrics, an event and a
// log line.
func (r *NodeReconciler) removed(ctx context.Context, node *corev1.Node, removed []corev1.Taint, specs []TaintSpec, readySince time.Time) {
	st := &r.state
	now := time.Now()
	names := taintStrings(removed)
	again := false
	for _, spec := range specs {
		key := spec.String()
		metrics.Removals.WithLabelValues(key, metrics.ResultRemoved).Inc()
		metrics.Present.WithLabelValues(key).Set(0)
		again = again || st.readded[key]
		st.present[key], st.removedBefore[key], st.readded[key] = false, true, false
	}
	if !readySince.IsZero() {
		metrics.ReadyToRemovedSeconds.Observe(now.Sub(readySince).Seconds())
	}
	logger := log.FromContext(ctx)
	switch {
	case again:
		held := now.Sub(st.heldSince).Round(time.Millisecond)
		logger.Info("removed startup taints again", "taints", names, "heldFor", held.String())
		r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, ReasonTaintRemovedAgain, "RemoveTaint",
			"Startup taints %v came back and were removed again after %s", names, held)
	default:
		sinceCreation := now.Sub(node.CreationTimestamp.Time)
		if !st.firstRemovalDone {
			metrics.RemovalSeconds.Observe(sinceCreation.Seconds())
			st.firstRemovalDone = true
		}
		logger.Info("removed startup taints", "taints", names, "sinceNodeCreation", sinceCreation.Round(time.Millisecond).String())
		r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, ReasonTaintRemoved, "RemoveTaint",
			"Removed startup taints %v, %s after the node was created", names, sinceCreation.Round(time.Second))
	}
	st.heldSince = time.Time{}
	clear(st.waitEvents)
}

// removalFailed reports a failed removal of the taints that specs selected, once per failure
// class, and decides the retry. A
// forbidden patch does not heal by itself, so it is retried on a backoff of its own, without the
// log line controller-runtime writes for every returned error; other errors are returned.
func (r *NodeReconciler) removalFailed(ctx context.Context, node *corev1.Node, specs []TaintSpec, err error) (ctrl.Result, error) {
	st := &r.state
	result := metrics.ResultError
	switch {
	case apierrors.IsConflict(err):
		result = metrics.ResultConflict // each conflict was counted as it happened
	case apierrors.IsForbidden(err):
		result = metrics.ResultForbidden
	}
	if result != metrics.ResultConflict {
		for _, spec := range specs {
			metrics.Removals.WithLabelValues(spec.String(), result).Inc()
		}
	}
	if st.failure != result {
		if result == metrics.ResultForbidden {
			r.permissionsChanged()
		}
		st.failure = result
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonRemovalFailed, "RemoveTaint",
			"Could not remove startup taints: %v", err)
		if result == metrics.ResultForbidden {
			log.FromContext(ctx).Error(err, "not allowed to remove startup taints; retrying with backoff until the permission is granted")
		}
	}
	if result != metrics.ResultForbidden {
		return ctrl.Result{}, err
	}
	st.retryAfter = min(max(2*st.retryAfter, time.Second), MaxRetryInterval)
	return ctrl.Result{RequeueAfter: st.retryAfter}, nil
}

// permissionsChanged asks for a new confinement check: a patch that was allowed is now forbidden,
// or the other way round.
func (r *NodeReconciler) permissionsChanged() {
	if r.Confinement != nil {
		r.Confinement.Recheck()
	}
}

// removeTaints patches the matching taints away and returns the ones it removed. A taint that is
// already gone counts as success, and a Node that no longer exists is not an error.
func (r *NodeReconciler) removeTaints(ctx context.Context, node *corev1.Node, specs []TaintSpec) ([]corev1.Taint, error) {
	var removed []corev1.Taint
	first := true
	err := retry.RetryOnConflict(conflictBackoff, func() error {
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
		err := r.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(FieldManager))
		if apierrors.IsConflict(err) {
			for _, spec := range specsSelecting(orig.Spec.Taints, specs) {
				metrics.Removals.WithLabelValues(spec.String(), metrics.ResultConflict).Inc()
			}
		}
		if err != nil {
			return err
		}
		removed = MatchingTaints(orig.Spec.Taints, specs)
		return nil
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("removing startup taints from node %s: %w", node.Name, err)
	}
	return removed, nil
}

// specsSelecting returns the specs that select at least one of taints: the ones a removal attempt
// is about, and so the taint labels its metrics carry.
func specsSelecting(taints []corev1.Taint, specs []TaintSpec) []TaintSpec {
	var out []TaintSpec
	for _, spec := range specs {
		if len(MatchingTaints(taints, []TaintSpec{spec})) > 0 {
			out = append(out, spec)
		}
	}
	return out
}

func taintStrings(taints []corev1.Taint) []string {
	out := make([]string, len(taints))
	for i, t := range taints {
		out[i] = t.ToString()
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
