// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// DefaultProbeInterval is how often the probed gates (gates.Probed) are checked when ProbeInterval
// is zero.
const DefaultProbeInterval = time.Second

// MaxRetryInterval caps the backoff between retries of a failing removal.
const MaxRetryInterval = 5 * time.Minute

// cacheSyncTimeout is, in effect, forever; shutdown still cancels the wait.
const cacheSyncTimeout = 100 * 365 * 24 * time.Hour

// NodeReconciler removes its groups' startup taints from one Node once every readiness gate of
// the group passes, and keeps doing so for its whole life: a taint that comes back later is removed again
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
	// APIReader reads from the API server, past the manager's cache: the Node after a conflict,
	// when the cache may still be behind, and at shutdown; the group's CSIDriver; and what the
	// gates list from the API server's watch cache (gates.Input.APIReader). The manager's when nil.
	APIReader client.Reader

	// NodeName is the Node this controller looks after: the one its pod runs on.
	NodeName string
	// Groups are the independent groups of startup taints and their gates, each removed as soon as
	// its own gates pass. All groups share one cache of the Node, and each reconcile sends at most
	// one patch for all of them.
	Groups []Group

	// NodeAgentNamespaces are the cluster admin's namespaces where node agents and what they need
	// run: while a group's gates hold its taints, the pending pods there that do not tolerate them
	// are named (startuptaint.EventReasonUntoleratedStartupTaint). Nothing is looked for when empty.
	// The agent needs list on pods in each.
	NodeAgentNamespaces []string

	// ProbeInterval is how often the probed gates (gates.Probed) are checked; DefaultProbeInterval
	// when zero.
	ProbeInterval time.Duration
	// MaxWait, when positive, is a fail-open deadline measured from the Node's creation, and for a
	// taint put back after a reboot from the boot: once it has passed, the startup taints are
	// removed even though a gate does not pass, for clusters that prefer a usable node with a
	// broken agent to a node that never schedules. Continuous mode's own put-back is not bounded.
	MaxWait time.Duration
	// RetaintAfter, when positive, turns on continuous mode: once no startup taint of a group is on
	// the Node and one of its gates has not passed for this long without interruption,
	// startuptaint.RetaintSpec(the group's Taints) goes back on, and it comes off again once every
	// gate of the group has passed for as long. It needs Taints in every group.
	RetaintAfter time.Duration
	// DryRun evaluates everything and never writes to the Node: where it would remove the startup
	// taints, or put one back, it reports that instead, once per episode, so it can run beside
	// another remover.
	DryRun bool
	// ConditionsOnly publishes each group's verdict as its ConditionType condition and never writes
	// a taint, for clusters where another controller (node-readiness-controller, a platform's)
	// removes the taint that the condition gates. Every group needs a ConditionType; the Taints are
	// then only observed (startup_taint_present, startuptaint.EventReasonRegisteredWithoutTaint).
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
	// Read once, uncached (observe.go).
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

// cachedGates returns the groups' gates that read API objects (gates.Cached): the manager's cache
// entries, watches and REST mappings are collected from these instead of listed by kind.
func (r *NodeReconciler) cachedGates() []gates.Cached {
	var out []gates.Cached
	for _, g := range r.Groups {
		for _, gate := range g.Gates {
			if c, ok := gate.(gates.Cached); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// cacheEntries returns one cache entry per kind the gates read, each gate's entry for a kind
// merged with the others' (gates.MergeCacheEntries), however many groups read it.
func (r *NodeReconciler) cacheEntries() map[client.Object]cache.ByObject {
	objects, entries := map[string]client.Object{}, map[string]cache.ByObject{}
	for _, c := range r.cachedGates() {
		obj, entry := c.CacheEntry()
		kind := fmt.Sprintf("%T", obj)
		if have, ok := entries[kind]; ok {
			entry = gates.MergeCacheEntries(have, entry)
		} else {
			objects[kind] = obj
		}
		entries[kind] = entry
	}
	out := make(map[client.Object]cache.ByObject, len(entries))
	for kind, entry := range entries {
		if _, ok := objects[kind].(*corev1.Pod); ok {
			// Pods are others' objects: keep what the gates read of them, not what their authors wrote.
			entry.Transform = gates.TrimPod
		}
		out[objects[kind]] = entry
	}
	return out
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
	r.wired = wiring{client: r.Client, apiReader: r.APIReader, recorder: r.Recorder, clock: r.Clock, metrics: metrics.For(r.Registerer)}
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
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.WithTicker
	metrics   *metrics.Metrics
}

// from takes what is still empty from mgr.
func (w *wiring) from(mgr ctrl.Manager) {
	if w.client == nil {
		w.client = mgr.GetClient()
	}
	if w.apiReader == nil {
		w.apiReader = mgr.GetAPIReader()
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
					// The configured gates, never g.reconciled: the informer's goroutine runs this
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

// +kubebuilder:rbac:groups=storage.k8s.io,resources=csidrivers,verbs=get
