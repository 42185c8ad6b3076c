// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
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

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// DefaultProbeInterval is how often the probed gates (gates.Probed) are checked when ProbeInterval is zero.
const DefaultProbeInterval = time.Second

// MaxRetryInterval caps the backoff between retries of a failing removal.
const MaxRetryInterval = 5 * time.Minute

// cacheSyncTimeout is, in effect, forever; shutdown still cancels the wait.
const cacheSyncTimeout = 100 * 365 * 24 * time.Hour

// conflictBackoff spaces the retries of a patch that lost a race with another writer; jitter
// keeps two agents that conflict once from conflicting again in lockstep.
var conflictBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1}

// NodeReconciler removes its groups' startup taints from one Node once every readiness gate of
// the group passes, and keeps doing so for its whole life: a taint re-added later is removed again
// on the watch event that shows it.
//
// Everything it needs comes through its fields, so a driver can run it in its own manager:
//
//	r := &controllers.NodeReconciler{NodeName: node, Groups: []controllers.Group{controllers.CSIDriverGroup(node, csiGate)}}
//	err := r.SetupWithManager(mgr)
//
// That manager's cache should hold only this node's objects; see CacheOptions.
type NodeReconciler struct {
	// Client reads from the manager's cache and writes the patch; the manager's when nil.
	Client client.Client
	// APIReader reads the Node from the API server after a conflict, when the cache may still be
	// behind; the manager's when nil.
	APIReader client.Reader

	// NodeName is the Node this controller looks after: the one its pod runs on.
	NodeName string
	// Groups are the independent groups of startup taints and their gates, each removed as soon as
	// its own gates pass. All groups share one cache of the Node, and each reconcile sends at most
	// one patch for all of them.
	Groups []Group

	// ProbeInterval is how often the probed gates (gates.Probed) are checked; DefaultProbeInterval when zero.
	ProbeInterval time.Duration
	// MaxWait, when positive, is a fail-open deadline measured from the Node's creation: once it
	// has passed, the startup taints are removed even though a gate does not pass, for clusters
	// that prefer a usable node with a broken agent to a node that never schedules.
	MaxWait time.Duration
	// RetaintAfter, when positive, turns on continuous mode: once no startup taint of a group is on
	// the Node and one of its gates has not passed for this long without interruption,
	// startuptaint.RetaintSpec(the group's Taints) goes back on, and it comes off again once every gate of the
	// group has passed for as long. It needs Taints in every group.
	RetaintAfter time.Duration
	// DryRun evaluates everything and never writes to the Node: where it would remove the startup
	// taints, or put one back, it reports that instead, once per episode, so it can run beside
	// another remover.
	DryRun bool
	// ConditionsOnly publishes each group's verdict as its ConditionType condition and never
	// writes a taint, for clusters where another controller (node-readiness-controller, a
	// platform's) removes the taint that the condition gates. Every group needs a ConditionType;
	// the Taints are then only observed (startup_taint_present, startuptaint.EventReasonRegisteredWithoutTaint).
	ConditionsOnly bool
	// Recorder records events on the Node; the manager's, for startuptaint.EventSource, when nil.
	Recorder events.EventRecorder
	// Confinement, when set, checks at start, and whenever the patches change between forbidden
	// and allowed, that the API server admits the removal of this agent's startup taints and that
	// the admission policy confines it; when it requires confinement, the reconciler writes
	// nothing until then. SetupWithManager adds it to the manager, and its Ready to
	// the manager's readiness checks; where its fields are empty, it uses the reconciler's.
	Confinement *ConfinementCheck

	// Clock tells the time of the state's episodes and the gates' probes; the real clock when nil.
	Clock clock.WithTicker
	// Registerer receives the reconciler's startup_taint_ metrics; controller-runtime's registry,
	// which the manager's metrics server serves, when nil. A driver that embeds two reconcilers
	// gives each its own (prometheus.WrapRegistererWith a label of its own), or they share series.
	Registerer prometheus.Registerer

	// wired is what the reconciler runs with: the fields above, or their defaults where empty.
	// SetupWithManager sets it and leaves the fields as their owner set them.
	wired wiring

	// running are the groups built from Groups by SetupWithManager, with their probers and state.
	running []*group
}

// CacheOptions restricts a manager's cache to what r reads, so the cost of each agent does not
// grow with the size of the cluster: r's Node, and what each of its gates that reads API objects
// declares (this node's CSINode, the agent's own Pod, this node's ResourceSlices).
func (r *NodeReconciler) CacheOptions() cache.Options {
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", r.NodeName)},
	}}
	for obj, entry := range r.cacheEntries() {
		opts.ByObject[obj] = entry
	}
	return opts
}

// ManagerOptions are the options the binary runs its manager with: r's CacheOptions and its
// static RESTMapper. Callers add their scheme, endpoints and logger.
func (r *NodeReconciler) ManagerOptions() ctrl.Options {
	return ctrl.Options{Cache: r.CacheOptions(), MapperProvider: r.RESTMapper}
}

// RESTMapper knows the few kinds this controller touches: Nodes, and what its gates read. A
// manager that serves only this controller can use it as its MapperProvider and so start without
// API discovery, which fails, and keeps failing, while the API server is unreachable, and which
// otherwise delays the first patch while the mapping is looked up.
func (r *NodeReconciler) RESTMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	// Read once, uncached (csidriver.go).
	m.Add(storagev1.SchemeGroupVersion.WithKind("CSIDriver"), meta.RESTScopeRoot)
	// Listed uncached by the node agents' gate (gates.NodeAgentsGate), never watched.
	m.Add(appsv1.SchemeGroupVersion.WithKind("DaemonSet"), meta.RESTScopeNamespace)
	m.Add(appsv1.SchemeGroupVersion.WithKind("DaemonSetList"), meta.RESTScopeNamespace)
	for _, c := range r.cachedGates() {
		gvk, scope := c.RESTMapping()
		m.Add(gvk, scope)
		// A cache of a kind held by namespace looks the scope of a List up by the list's kind.
		m.Add(gvk.GroupVersion().WithKind(gvk.Kind+"List"), scope)
	}
	return m, nil
}

// SetupWithManager validates the reconciler's fields (Validate) and adds it, with its probers, to
// mgr.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if errs := r.Validate(); len(errs) > 0 {
		return fmt.Errorf("NodeReconciler: %w", errs.ToAggregate())
	}
	r.build()
	r.wired.from(mgr)
	for _, g := range r.running {
		if err := mgr.Add(g.prober); err != nil {
			return fmt.Errorf("adding the readiness prober: %w", err)
		}
	}
	if err := r.setupConfinement(mgr); err != nil {
		return err
	}
	if err := mgr.Add(atShutdown{r}); err != nil {
		return fmt.Errorf("adding the shutdown re-taint: %w", err)
	}

	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("startup-taint").
		For(&corev1.Node{}, builder.WithPredicates(thisNode, r.nodeChanged())).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, MaxRetryInterval),
			// A node agent waits for the API server however long it is away; giving up after the
			// default two minutes would make the pod exit and crash-loop through an outage.
			CacheSyncTimeout: cacheSyncTimeout,
			// The reconciler's state of its one Node assumes one worker; set it here, so a
			// manager's defaults cannot raise it.
			MaxConcurrentReconciles: 1,
		})
	for _, g := range r.running {
		b = b.WatchesRawSource(source.Channel(g.prober.events, &handler.EnqueueRequestForObject{}))
	}
	if r.Confinement != nil {
		b = b.WatchesRawSource(source.Channel(r.Confinement.confined, &handler.EnqueueRequestForObject{}))
	}
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.NodeName}}}
	})
	// One watch per gate: each lets through what it reads; the kinds' informers are shared.
	for _, c := range r.cachedGates() {
		obj, h, predicates := c.Watches(toNode)
		b = b.Watches(obj, h, builder.WithPredicates(predicates...))
	}
	return b.Complete(r)
}

// setupConfinement adds the Confinement check, when there is one, to mgr and to its readiness
// checks, and gives it the reconciler's settings for the fields its owner left empty.
func (r *NodeReconciler) setupConfinement(mgr ctrl.Manager) error {
	c := r.Confinement
	if c == nil {
		return nil
	}
	c.channels()
	c.inherited = inherited{client: r.wired.client, nodeName: r.NodeName, recorder: r.wired.recorder, clock: r.wired.clock,
		taints: r.servedTaints, metrics: r.wired.metrics}
	if r.ConditionsOnly {
		for _, g := range r.Groups {
			c.inherited.conditions = append(c.inherited.conditions, g.ConditionType)
		}
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("adding the confinement check: %w", err)
	}
	if err := mgr.AddReadyzCheck("startup-taint-removal", c.Ready); err != nil {
		return fmt.Errorf("adding the confinement check's readiness check: %w", err)
	}
	return nil
}

// build wires the reconciler from its fields and makes its groups; SetupWithManager then fills
// what is still empty from the manager.
func (r *NodeReconciler) build() {
	interval := r.ProbeInterval
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	r.wired = wiring{client: r.Client, reader: r.APIReader, recorder: r.Recorder, clock: r.Clock, metrics: metrics.For(r.Registerer)}
	if r.wired.clock == nil {
		r.wired.clock = clock.RealClock{}
	}
	r.running = nil
	for _, cfg := range r.Groups {
		r.running = append(r.running, r.buildGroup(cfg, interval))
	}
}

// wiring is what a NodeReconciler runs with.
type wiring struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
	clock    clock.WithTicker
	metrics  *metrics.Metrics
}

// from takes what is still empty from mgr.
func (w *wiring) from(mgr ctrl.Manager) {
	if w.client == nil {
		w.client = mgr.GetClient()
	}
	if w.reader == nil {
		w.reader = mgr.GetAPIReader()
	}
	if w.recorder == nil {
		w.recorder = mgr.GetEventRecorder(startuptaint.EventSource)
	}
}

// servedTaints returns every group's startup taints that are known: a CSI group's default taint
// is known once its driver has told its name.
func (r *NodeReconciler) servedTaints() []startuptaint.TaintSpec {
	specs := make([]startuptaint.TaintSpec, 0, len(r.running))
	for _, g := range r.running {
		specs = append(specs, g.taintSpecs(true)...)
	}
	return specs
}

// nodeChanged lets through node creations, and updates that change the taints, what a put-back
// rule reads (putBackChanged: the boot ID, spec.unschedulable) or what a gate reads of the Node
// (NodeReader). Kubelet's other status updates and resyncs cannot change the outcome, so they
// cause no reconcile.
func (r *NodeReconciler) nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			return !okOld || !okNew || !equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints) ||
				putBackChanged(oldNode, newNode) ||
				r.anyGroup(func(g *group) bool {
					// The configured gates, never g.checks: the informer's goroutine runs this
					// while the reconcile writes the checks' logs.
					return slices.ContainsFunc(g.Gates, func(gate gates.Gate) bool {
						n, ok := gate.(gates.NodeReader)
						return ok && n.NodeChanged(oldNode, newNode)
					})
				})
		},
	}
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// The Node condition (ConditionType); the admission policy allows only that condition, and only
// when the install sets it.
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;list;watch
// The agent's own Pod, for --ready-container, is read only where an install turns that gate on:
// config/sidecar/ready-container grants it, in the driver's namespace (no marker, so that the
// roles every install gets do not).
// Events about a Node can only be written in "default" (the API server's rule for cluster-scoped
// objects), and a Role there would be moved by any overlay's namespace; the admission policy
// confines these events to the agent's own Node instead.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile removes each group's startup taints from the node when all the group's readiness
// gates pass: for each group, observe the taints, check the gates and decide (decide), publish the
// verdict as a condition (with ConditionType); then patch every group's change at once, and
// report each outcome. With none of a group's startup taints on the node, continuous mode may put
// one back instead. The clock is read once for the decisions, and once when the patch is accepted.
func (r *NodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.wired.client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.wired.clock.Now()
	plans := make([]*plan, 0, len(r.running))
	var errs []error
	permitted := r.Confinement.Permits()
	for _, g := range r.running {
		p := r.decide(g.logContext(ctx), g, node, now)
		if p == nil {
			continue
		}
		r.reportDecision(g.logContext(ctx), node, p)
		if permitted {
			plans = append(plans, p)
			errs = append(errs, r.publishCondition(g.logContext(ctx), node, p))
		}
	}
	if !permitted {
		// The confinement check's verdict, once it permits writes, reconciles again.
		log.FromContext(ctx).V(4).Info("writing nothing until an admission policy is seen to confine this agent")
		return ctrl.Result{}, nil
	}
	r.write(ctx, node, slices.DeleteFunc(slices.Clone(plans), func(p *plan) bool { return !p.changes() }))
	var res ctrl.Result
	for _, p := range plans {
		requeue, err := r.outcome(p.g.logContext(ctx), node, p)
		errs = append(errs, err)
		if requeue > 0 && (res.RequeueAfter == 0 || requeue < res.RequeueAfter) {
			res.RequeueAfter = requeue
		}
	}
	return res, errors.Join(errs...)
}

// decide observes the group's taints, checks its gates and decides what to change and what to
// say, which reportDecision says: nil when the group's taints are not known yet.
func (r *NodeReconciler) decide(ctx context.Context, g *group, node *corev1.Node, now time.Time) *plan {
	putBack := r.putsBack(g, node)
	specs := g.taintSpecs(putBack)
	if len(specs) == 0 {
		log.FromContext(ctx).V(4).Info("waiting for the driver's name to know its startup taint")
		return nil
	}
	obs := g.state.observe(node, specs, g.retaintKey(putBack), now)
	notReady, readySince := g.checkGates(ctx, r.wired.client, r.wired.reader, node, now)
	p := &plan{g: g, specs: specs, now: now, obs: obs, v: g.state.judge(notReady, readySince, now), readySince: readySince,
		notReady: notReady}
	switch {
	case r.ConditionsOnly:
		// The condition is the whole job: another controller owns the taints.
	case len(obs.held) == 0:
		r.planPutBack(node, p)
	default:
		r.planRemoval(ctx, node, p)
	}
	return p
}

// planRemoval decides whether the startup taints the group holds go now: once its gates pass, or
// once MaxWait has passed. Until then it records the wait, for reportDecision to say, and asks to
// be called again at the deadline or when a taint that came back has been held long enough.
func (r *NodeReconciler) planRemoval(ctx context.Context, node *corev1.Node, p *plan) {
	now := p.now
	notReady := p.v.notReady
	// Never forced before the gates have been probed once: a restarted agent would otherwise
	// remove a taint unready that its first probe would have removed ready. Nor for a taint that
	// came back: the deadline is the Node's startup's, and continuous mode puts taints back.
	p.forced = notReady != nil && notReady.reason != gates.ReasonNotProbed && !p.obs.again && r.deadlinePassed(node, now)
	if r.holdWhileCordoned(node, p) {
		// Uncordoning is an update of the Node that nodeChanged lets through.
		log.FromContext(ctx).V(4).Info("holding the taint put back on a cordoned node until it is uncordoned")
		return
	}
	if notReady != nil && !p.forced {
		// Not an error to retry: the prober or a gate's watch triggers the next reconcile,
		// and the deadline, when there is one, the last.
		p.waiting, p.firstWait = true, p.g.state.firstWait(notReady)
		p.requeue = r.untilDeadline(node, now)
		if recheck := notReady.recheck; recheck > 0 && (p.requeue == 0 || recheck < p.requeue) {
			p.requeue = recheck
		}
		return
	}
	if hold := r.holdFor(p.obs, p.v); hold > 0 {
		log.FromContext(ctx).V(4).Info("holding a startup taint that came back until the gates have passed long enough", "for", hold.String())
		p.requeue = hold
		return
	}
	if r.DryRun {
		p.wouldRemove = p.g.state.firstWouldRemove()
		return
	}
	p.remove = true
}

// outcome records and reports what the write did for the plan's group, and returns when to
// reconcile again and the error to retry with.
func (r *NodeReconciler) outcome(ctx context.Context, node *corev1.Node, p *plan) (time.Duration, error) {
	switch {
	case p.remove:
		return r.removalOutcome(ctx, node, p)
	case p.retaint != nil:
		return 0, r.retaintOutcome(ctx, node, p)
	case p.recordBoot && refused(p.err):
		// An install's policy from before the boot record refuses it; the removal's own
		// confinement check reports that (RemovalRefused). Tried again at the next change.
		log.FromContext(ctx).Info("the boot record was refused; a reboot will not put the taint back until it is written",
			"error", p.err.Error())
	case p.recordBoot && p.err != nil:
		return 0, fmt.Errorf("recording node %s's boot: %w", node.Name, p.err)
	}
	return p.requeue, nil
}

// removalOutcome records and reports the removal of the group's taints, or its failure.
func (r *NodeReconciler) removalOutcome(ctx context.Context, node *corev1.Node, p *plan) (time.Duration, error) {
	if p.err != nil {
		err := fmt.Errorf("removing startup taints from node %s: %w", node.Name, p.err)
		f := p.g.state.recordFailure(failureClass(err))
		r.reportFailure(ctx, node, specsSelecting(p.obs.held, p.specs), f, err)
		if f.result != metrics.ResultForbidden {
			return 0, err
		}
		// A forbidden patch does not heal by itself: it is retried on a backoff of its own,
		// without the log line controller-runtime writes for every returned error.
		return f.retryAfter, nil
	}
	removed := p.removed()
	if len(removed) == 0 {
		return 0, nil // already gone, or the Node was deleted meanwhile
	}
	rem := p.g.state.recordRemoval(node, removed, specsSelecting(removed, p.specs), p.readySince, p.written)
	if p.forced {
		rem.unready = p.v.notReady
	}
	r.reportRemoval(ctx, node, rem)
	return 0, nil
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

// failureClass sorts a failed patch into a metrics.Result* class.
func failureClass(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return metrics.ResultConflict
	case refused(err):
		return metrics.ResultForbidden
	}
	return metrics.ResultError
}

// refused tells a request the API server will not admit as it was sent, which no retry of the
// same request heals: RBAC and the policy's own checks answer Forbidden, while a validation that
// fails to evaluate (a policy rendered with the wrong settings) answers Invalid.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
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
			if err := r.wired.reader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
				return err
			}
		}
		first = false
		orig := node.DeepCopy()
		change(node)
		// Skipped when it changes nothing: the taints and the boot record are all it writes (the
		// removed record changes only with the taints).
		if equality.Semantic.DeepEqual(orig.Spec.Taints, node.Spec.Taints) &&
			orig.Annotations[startuptaint.BootAnnotation] == node.Annotations[startuptaint.BootAnnotation] {
			sent = nil
			return nil
		}
		err := writeTaints(ctx, r.wired.client, orig, node)
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
func specsSelecting(taints []corev1.Taint, specs []startuptaint.TaintSpec) []startuptaint.TaintSpec {
	var out []startuptaint.TaintSpec
	for _, spec := range specs {
		if len(startuptaint.MatchingTaints(taints, []startuptaint.TaintSpec{spec})) > 0 {
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
