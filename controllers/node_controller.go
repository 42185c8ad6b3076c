package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
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
	"k8s.io/utils/clock"
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
	ReasonTaintRemoved        = "TaintRemoved"
	ReasonTaintRemovedAgain   = "TaintRemovedAgain"
	ReasonWaitingForDriver    = "WaitingForDriver"
	ReasonRemovalFailed       = "RemovalFailed"
	ReasonTaintRemovedUnready = "TaintRemovedUnready"
	ReasonWouldRemoveTaint    = "WouldRemoveTaint"
	ReasonTaintAddedBack      = "TaintAddedBack"
	ReasonWouldAddTaint       = "WouldAddTaint"
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
	// ReadyContainer, when set, is a gate that passes while the container of that name in the
	// agent's own Pod is ready, as kubelet's readiness probe says. It needs Pod, and the manager's
	// cache must hold that Pod (see CacheOptions).
	ReadyContainer string
	// Pod is the agent's own Pod, for ReadyContainer.
	Pod types.NamespacedName
	// RequireResources is a gate that passes while the Node's status.allocatable has at least the
	// given amount of each resource, as a device plugin advertises it through kubelet.
	RequireResources []ResourceRequirement
	// RequireResourceSlices is a gate that passes while each of these Dynamic Resource Allocation
	// drivers has published a ResourceSlice for this node with at least one device. The manager's
	// cache must hold this node's slices (see CacheOptions).
	RequireResourceSlices []string
	// ProbeInterval is how often the local gates are probed; DefaultProbeInterval when zero.
	ProbeInterval time.Duration
	// MaxWait, when positive, is a fail-open deadline measured from the Node's creation: once it
	// has passed, the startup taints are removed even though a gate does not pass, for clusters
	// that prefer a usable node with a broken agent to a node that never schedules.
	MaxWait time.Duration
	// RetaintAfter, when positive, turns on continuous mode: once no startup taint is on the Node
	// and a gate has not passed for this long without interruption, RetaintSpec(Taints) goes back
	// on, and it comes off again once every gate has passed for as long. It needs Taints.
	RetaintAfter time.Duration
	// ConditionType, when set, publishes the gates' verdict as a Node condition of this type,
	// written to the Node's status when it changes. See ValidateConditionType.
	ConditionType string
	// DryRun evaluates everything and never writes to the Node: where it would remove the startup
	// taints, or put one back, it reports that instead, once per episode, so it can run beside
	// another remover.
	DryRun bool
	// Recorder records events on the Node. Set by SetupWithManager when nil.
	Recorder events.EventRecorder
	// Confinement, when set, checks at start, and whenever the patches change between forbidden
	// and allowed, that the admission policy confines this agent. SetupWithManager adds it to the
	// manager and fills in its empty fields from the reconciler's.
	Confinement *ConfinementCheck

	// Clock tells the time of the state's episodes and the gates' probes; the real clock when nil.
	Clock clock.WithTicker

	prober    *prober
	csiNode   *csiNodeGate
	container *containerGate
	resources *resourceGate
	slices    *resourceSliceGate
	state     nodeState
}

// CacheOptions restricts a manager's cache to what r reads, so the cost of each agent does not
// grow with the size of the cluster: the Node and CSINode of r's node, the agent's own Pod with
// ReadyContainer, and the node's ResourceSlices with RequireResourceSlices.
func (r *NodeReconciler) CacheOptions() cache.Options {
	byName := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", r.NodeName)}
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}:       byName,
		&storagev1.CSINode{}: byName,
	}}
	if r.ReadyContainer != "" {
		opts.ByObject[&corev1.Pod{}] = cache.ByObject{Namespaces: map[string]cache.Config{
			r.Pod.Namespace: {FieldSelector: fields.OneTermEqualSelector("metadata.name", r.Pod.Name)},
		}}
	}
	if len(r.RequireResourceSlices) > 0 {
		opts.ByObject[&resourcev1.ResourceSlice{}] = cache.ByObject{
			Field: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, r.NodeName),
		}
	}
	return opts
}

// ManagerOptions are the options the binary runs its manager with: r's CacheOptions and the
// static RESTMapper. Callers add their scheme, endpoints and logger.
func (r *NodeReconciler) ManagerOptions() ctrl.Options {
	return ctrl.Options{Cache: r.CacheOptions(), MapperProvider: RESTMapper}
}

// RESTMapper knows the few kinds this controller touches. A manager that serves only this
// controller can use it as its MapperProvider and so start without API discovery, which fails,
// and keeps failing, while the API server is unreachable, and which otherwise delays the first
// patch while the mapping is looked up.
func RESTMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	m.Add(storagev1.SchemeGroupVersion.WithKind("CSINode"), meta.RESTScopeRoot)
	m.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	m.Add(resourcev1.SchemeGroupVersion.WithKind("ResourceSlice"), meta.RESTScopeRoot)
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
	r.build()
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
		if c.Clock == nil {
			c.Clock = r.Clock
		}
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("adding the confinement check: %w", err)
		}
	}

	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("startup-taint").
		For(&corev1.Node{}, builder.WithPredicates(thisNode, r.nodeChanged())).
		WatchesRawSource(source.Channel(r.prober.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, MaxRetryInterval),
			// A node agent waits for the API server however long it is away; giving up after the
			// default two minutes would make the pod exit and crash-loop through an outage.
			CacheSyncTimeout: cacheSyncTimeout,
			// The reconciler's state of its one Node assumes one worker; set it here, so a
			// manager's defaults cannot raise it.
			MaxConcurrentReconciles: 1,
		})
	if r.RequireCSINode {
		// The CSINode shares its Node's name, so its events map to that Node's request.
		b = b.Watches(&storagev1.CSINode{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(thisNode))
	}
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.NodeName}}}
	})
	if r.ReadyContainer != "" {
		thisPod := predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == r.Pod.Name && o.GetNamespace() == r.Pod.Namespace
		})
		b = b.Watches(&corev1.Pod{}, toNode, builder.WithPredicates(thisPod))
	}
	if len(r.RequireResourceSlices) > 0 {
		b = b.Watches(&resourcev1.ResourceSlice{}, toNode)
	}
	return b.Complete(r)
}

// build makes the reconciler's parts from its fields, once Client and Recorder are set.
func (r *NodeReconciler) build() {
	interval := r.ProbeInterval
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	var gates []Gate
	if r.CSI != nil {
		gates = append(gates, r.CSI)
	}
	gates = append(gates, r.Gates...)
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.prober = newProber(gates, interval, r.NodeName, r.Clock)
	if r.RequireCSINode {
		r.csiNode = &csiNodeGate{reader: r.Client, node: r.NodeName, driver: r.CSI.DriverName, requireAllocatable: r.RequireAllocatable}
	}
	if r.ReadyContainer != "" {
		r.container = &containerGate{reader: r.Client, pod: r.Pod, container: r.ReadyContainer}
	}
	if len(r.RequireResources) > 0 {
		r.resources = &resourceGate{required: r.RequireResources}
	}
	if len(r.RequireResourceSlices) > 0 {
		r.slices = &resourceSliceGate{reader: r.Client, node: r.NodeName, drivers: r.RequireResourceSlices}
	}
}

func (r *NodeReconciler) validate() error {
	switch {
	case r.NodeName == "":
		return errors.New("NodeReconciler: NodeName is required")
	case r.CSI == nil && len(r.Gates) == 0 && r.ReadyContainer == "" && len(r.RequireResources) == 0 && len(r.RequireResourceSlices) == 0:
		return errors.New("NodeReconciler: at least one readiness gate is required " +
			"(CSI, Gates, ReadyContainer, RequireResources or RequireResourceSlices)")
	case r.ReadyContainer != "" && (r.Pod.Name == "" || r.Pod.Namespace == ""):
		return errors.New("NodeReconciler: ReadyContainer needs Pod, the agent's own Pod")
	case r.CSI == nil && len(r.Taints) == 0:
		return errors.New("NodeReconciler: Taints is required without a CSI driver to name the default taint")
	case r.RequireCSINode && r.CSI == nil:
		return errors.New("NodeReconciler: RequireCSINode needs CSI")
	case r.RequireAllocatable && !r.RequireCSINode:
		return errors.New("NodeReconciler: RequireAllocatable needs RequireCSINode")
	case r.MaxWait < 0:
		return errors.New("NodeReconciler: MaxWait is negative")
	case r.RetaintAfter < 0:
		return errors.New("NodeReconciler: RetaintAfter is negative")
	case r.RetaintAfter > 0 && len(r.Taints) == 0:
		return errors.New("NodeReconciler: RetaintAfter needs Taints, the first of which it puts back")
	}
	if r.ConditionType != "" {
		if err := ValidateConditionType(r.ConditionType); err != nil {
			return fmt.Errorf("NodeReconciler: ConditionType: %w", err)
		}
	}
	return nil
}

// nodeChanged lets through node creations, and updates that change the taints or, with
// RequireResources, the allocatable amount of a required resource. Kubelet's other status
// updates and resyncs cannot change the outcome, so they cause no reconcile.
func (r *NodeReconciler) nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			return !okOld || !okNew || !equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints) ||
				r.resources != nil && r.resources.allocatableChanged(oldNode, newNode)
		},
	}
}

// taintSpecs returns the configured specs, with the taint continuous mode puts back when they do
// not select it, or the CSI driver's default once its name is known.
func (r *NodeReconciler) taintSpecs() []TaintSpec {
	if len(r.Taints) > 0 {
		if r.RetaintAfter <= 0 {
			return r.Taints
		}
		retaint := RetaintSpec(r.Taints)
		if len(MatchingTaints([]corev1.Taint{{Key: retaint.Key, Effect: retaint.Effect}}, r.Taints)) > 0 {
			return r.Taints
		}
		return append(slices.Clip(r.Taints), retaint)
	}
	if name := r.CSI.DriverName(); name != "" {
		return []TaintSpec{DefaultTaintSpec(name)}
	}
	return nil
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// The Node condition (ConditionType); the admission policy allows only that condition, and only
// when the install sets it.
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;list;watch
// The agent's own Pod, for --ready-container: a Role in its own namespace only.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch,namespace=system
// Events about a Node can only be written in "default" (the API server's rule for cluster-scoped
// objects), and a Role there would be moved by any overlay's namespace; the admission policy
// confines these events to the agent's own Node instead.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile removes the startup taints from the node when all readiness gates pass: observe the
// taints, check the gates (and publish the verdict as a condition, with ConditionType), patch,
// report. With no startup taint on the node, continuous mode may put one back instead.
func (r *NodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	specs := r.taintSpecs()
	if len(specs) == 0 {
		log.FromContext(ctx).V(4).Info("waiting for the CSI driver's name to know its startup taint")
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	obs := r.state.observe(node, specs, r.retaintKey(), now)
	r.reportObservation(ctx, specs, obs)

	notReady, readySince := r.checkGates(ctx, node, now)
	v := r.state.judge(notReady, readySince, now)
	conditionErr := r.publishCondition(ctx, node, notReady)
	var res ctrl.Result
	var err error
	if len(obs.held) == 0 {
		res, err = r.retaint(ctx, node, v)
	} else {
		res, err = r.untaint(ctx, node, specs, obs, v, readySince)
	}
	return res, errors.Join(err, conditionErr)
}

// untaint removes the startup taints the Node holds once the gates pass, or once MaxWait has
// passed, and reports the outcome.
func (r *NodeReconciler) untaint(ctx context.Context, node *corev1.Node, specs []TaintSpec, obs observation, v verdict,
	readySince time.Time) (ctrl.Result, error) {
	now := r.Clock.Now()
	notReady := v.notReady
	// Never forced before the gates have been probed once: a restarted agent would otherwise
	// remove a taint unready that its first probe would have removed ready. Nor for a taint that
	// came back: the deadline is the Node's startup's, and continuous mode puts taints back.
	forced := notReady != nil && notReady.reason != reasonNotProbed && !obs.again && r.deadlinePassed(node, now)
	if notReady != nil && !forced {
		// Not an error to retry: the prober or the CSINode watch triggers the next reconcile,
		// and the deadline, when there is one, the last.
		r.reportWaiting(ctx, node, notReady, r.state.firstWait(notReady))
		return ctrl.Result{RequeueAfter: r.untilDeadline(node, now)}, nil
	}
	if hold := r.holdFor(obs, v); hold > 0 {
		log.FromContext(ctx).V(4).Info("holding a startup taint that came back until the gates have passed long enough", "for", hold.String())
		return ctrl.Result{RequeueAfter: hold}, nil
	}

	if r.DryRun {
		if r.state.firstWouldRemove() {
			r.reportWouldRemove(ctx, node, obs.held, specsSelecting(obs.held, specs), notReady)
		}
		return ctrl.Result{}, nil
	}
	removed, err := r.removeTaints(ctx, node, specs)
	if err != nil {
		f := r.state.recordFailure(failureClass(err))
		r.reportFailure(ctx, node, specsSelecting(obs.held, specs), f, err)
		if f.result != metrics.ResultForbidden {
			return ctrl.Result{}, err
		}
		// A forbidden patch does not heal by itself: it is retried on a backoff of its own,
		// without the log line controller-runtime writes for every returned error.
		return ctrl.Result{RequeueAfter: f.retryAfter}, nil
	}
	if len(removed) == 0 {
		return ctrl.Result{}, nil // already gone, or the Node was deleted meanwhile
	}
	rem := r.state.recordRemoval(node, removed, specsSelecting(removed, specs), readySince, r.Clock.Now())
	if forced {
		rem.unready = notReady
	}
	r.reportRemoval(ctx, node, rem)
	return ctrl.Result{}, nil
}

// deadlinePassed reports whether MaxWait is set and has passed since the Node's creation.
func (r *NodeReconciler) deadlinePassed(node *corev1.Node, now time.Time) bool {
	return r.MaxWait > 0 && !now.Before(node.CreationTimestamp.Add(r.MaxWait))
}

// untilDeadline is how long until MaxWait passes, or zero when it is not set.
func (r *NodeReconciler) untilDeadline(node *corev1.Node, now time.Time) time.Duration {
	if r.MaxWait <= 0 {
		return 0
	}
	return node.CreationTimestamp.Add(r.MaxWait).Sub(now)
}

// checkGates returns the first gate that does not pass, or nil and the time since when all pass.
// It evaluates every gate, so the gate metrics stay current.
func (r *NodeReconciler) checkGates(ctx context.Context, node *corev1.Node, now time.Time) (*gateError, time.Time) {
	local, since := r.prober.notReady()
	var csiNodeErr, containerErr, resourceErr, sliceErr *gateError
	if r.csiNode != nil {
		var csiNodeSince time.Time
		csiNodeErr, csiNodeSince = r.csiNode.check(ctx, now)
		since = maxTime(since, csiNodeSince)
	}
	if r.container != nil {
		containerErr = r.container.check(ctx)
	}
	if r.resources != nil {
		resourceErr = r.resources.check(ctx, node)
	}
	if r.slices != nil {
		sliceErr = r.slices.check(ctx)
	}
	if local != nil && csiNodeErr == nil && containerErr == nil && resourceErr == nil && sliceErr == nil {
		// Only the local gates hold the taint now that something changed (kubelet registered the
		// driver, the taint came back): the driver may have turned ready since the last tick, so
		// probe it now rather than up to an interval later.
		r.prober.probeNow()
	}
	for _, gerr := range []*gateError{local, csiNodeErr, containerErr, resourceErr, sliceErr} {
		if gerr != nil {
			return gerr, time.Time{}
		}
	}
	return nil, since
}

// failureClass sorts a failed patch into a metrics.Result* class.
func failureClass(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return metrics.ResultConflict
	case apierrors.IsForbidden(err):
		return metrics.ResultForbidden
	}
	return metrics.ResultError
}

// removeTaints patches the matching taints away and returns the ones it removed. A taint that is
// already gone counts as success, and a Node that no longer exists is not an error.
func (r *NodeReconciler) removeTaints(ctx context.Context, node *corev1.Node, specs []TaintSpec) ([]corev1.Taint, error) {
	orig, err := r.patchTaints(ctx, node, func(n *corev1.Node) {
		selecting := specsSelecting(n.Spec.Taints, specs)
		if len(selecting) == 0 {
			return
		}
		// In the same patch, so a later process knows these were removed once (see RemovedAnnotation).
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[RemovedAnnotation] = withRemoved(n, selecting)
		n.Spec.Taints = WithoutTaints(n.Spec.Taints, specs)
	}, func(orig *corev1.Node) {
		for _, spec := range specsSelecting(orig.Spec.Taints, specs) {
			metrics.Removals.WithLabelValues(spec.String(), metrics.ResultConflict).Inc()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("removing startup taints from node %s: %w", node.Name, err)
	}
	if orig == nil {
		return nil, nil
	}
	return MatchingTaints(orig.Spec.Taints, specs), nil
}

// patchTaints applies change to node and sends the result, when its taints differ, as a merge
// patch locked to the resourceVersion it was read at, reading the Node again from the API server
// after each conflict. It returns the Node as it was before the change it sent, or nil when the
// change made no difference or the Node is gone. conflict, when set, sees each conflict.
func (r *NodeReconciler) patchTaints(ctx context.Context, node *corev1.Node, change func(*corev1.Node),
	conflict func(orig *corev1.Node)) (*corev1.Node, error) {
	var sent *corev1.Node
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
		change(node)
		if equality.Semantic.DeepEqual(orig.Spec.Taints, node.Spec.Taints) {
			sent = nil
			return nil
		}
		// A merge patch replaces the whole taint list; the resourceVersion lock makes it fail
		// instead of dropping a taint another writer added since we read the Node.
		err := r.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(FieldManager))
		if apierrors.IsConflict(err) && conflict != nil {
			conflict(orig)
		}
		if err != nil {
			return err
		}
		sent = orig
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return sent, err
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
