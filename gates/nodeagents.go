// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// NodeAgentsName names the node agents' gate in logs, events and metrics: "daemonsets", the name it
// has had since it was first released, which dashboards and alerts select by.
const NodeAgentsName = "daemonsets"

// NodeAgentLabel on a DaemonSet says whether it is a node agent this node waits for: "false"
// leaves it out; with NodeAgentsLabelled, only DaemonSets labelled "true" count.
const NodeAgentLabel = "startup-taint-remover.github.io/node-agent"

// The reason classes of the node agents' gate: a DaemonSet's pod the DaemonSet controller has not
// created here yet, one the scheduler has not placed here for a minute though the node has room for
// it, one not Ready, and one whose registrar does not serve kubelet yet.
const (
	ReasonNoDaemonPod            = "no_daemon_pod"
	ReasonDaemonPodUnschedulable = "daemon_pod_unschedulable"
	ReasonDaemonPodNotReady      = "daemon_pod_not_ready"
	ReasonRegistrarNotServing    = "registrar_not_serving"
)

// NodeAgents says which DaemonSets count as node agents.
type NodeAgents string

// The ways to choose node agents.
const (
	// NodeAgentsAll counts every DaemonSet that should run here and tolerates the startup taint,
	// but those labelled NodeAgentLabel=false.
	NodeAgentsAll NodeAgents = "all"
	// NodeAgentsLabelled counts only those labelled NodeAgentLabel=true.
	NodeAgentsLabelled NodeAgents = "labelled"
)

// NodeAgentsGate passes while every node agent that should run on this node is ready: each
// DaemonSet that the DaemonSet controller would run here, by its own rules (the template's node
// name, node selector and required node affinity, and the Node's taints other than the startup
// taints, with the tolerations the controller adds to every daemon pod), and that tolerates the
// startup taints, so that it can start before they go, has a Ready pod on this node; and each such
// pod that mounts kubelet's plugins registry read-write has a registration server there that serves a
// plugin whose endpoint is in one of its host paths. Whether kubelet has registered those plugins
// is the PluginsGate's.
//
// Only DaemonSets in the cluster admin's namespaces count (NodeAgentsOptions.Namespaces): anyone
// who may create a DaemonSet or a pod elsewhere can neither hold the node nor reach the agent's
// memory. The DaemonSets are listed from the API server's watch cache while the gate is checked,
// never watched, so a DaemonSet's status updates reach no agent; the pods are this node's only, in
// those namespaces, in the manager's cache, and their watch events cause the reconcile.
type NodeAgentsGate struct {
	node       string
	namespaces []string
	self       types.NamespacedName
	startup    []corev1.Taint
	choose     NodeAgents
	registry   *PluginRegistry
	clock      clock.PassiveClock

	mu       sync.Mutex
	listed   []appsv1.DaemonSet
	listedAt time.Time
}

// NodeAgentsOptions are a NodeAgentsGate's settings.
type NodeAgentsOptions struct {
	// Node is this node's name.
	Node string
	// Self is the agent's own Pod, whose DaemonSet is left out; none when empty.
	Self types.NamespacedName
	// Namespaces are where node agents' DaemonSets count; DefaultNodeAgentNamespaces(Self's) when
	// empty. Only the cluster admin should be able to create DaemonSets and pods there: whoever
	// can may hold the node until its deadline.
	Namespaces []string
	// Startup are the startup taints the gate holds: a DaemonSet counts only if it tolerates
	// them, and they do not keep one from running here. An empty Effect stands for any.
	Startup []corev1.Taint
	// Choose says which DaemonSets count; NodeAgentsAll when empty.
	Choose NodeAgents
	// Registry is kubelet's plugins registry; without it, a pod's plugins are not looked for.
	Registry *PluginRegistry
	// Clock tells the list's age; the real clock when nil.
	Clock clock.PassiveClock
}

// NewNodeAgentsGate returns a gate on the node agents o describes.
func NewNodeAgentsGate(o NodeAgentsOptions) *NodeAgentsGate {
	g := &NodeAgentsGate{node: o.Node, namespaces: o.Namespaces, self: o.Self, startup: o.Startup, choose: o.Choose,
		registry: o.Registry, clock: o.Clock}
	if len(g.namespaces) == 0 {
		g.namespaces = DefaultNodeAgentNamespaces(o.Self.Namespace)
	}
	g.namespaces = slices.Compact(slices.Sorted(slices.Values(g.namespaces)))
	if g.choose == "" {
		g.choose = NodeAgentsAll
	}
	if g.clock == nil {
		g.clock = clock.RealClock{}
	}
	return g
}

// DefaultNodeAgentNamespaces are the namespaces whose DaemonSets count as node agents unless
// others are named: kube-system, where clusters run their own node agents, and the agent's own
// (when known), where an install runs its agents beside it. Tenants are not given either. The
// agent's own is left out when it is "default", where `helm install` without a namespace puts it:
// that is where anyone's `kubectl run` lands, and many clusters let every user create pods there.
func DefaultNodeAgentNamespaces(own string) []string {
	if own == "" || own == metav1.NamespaceSystem || own == metav1.NamespaceDefault {
		return []string{metav1.NamespaceSystem}
	}
	return []string{metav1.NamespaceSystem, own}
}

// Name implements Gate.
func (g *NodeAgentsGate) Name() string { return NodeAgentsName }

// Title implements Titled.
func (g *NodeAgentsGate) Title() string { return "DaemonSets" }

// CacheEntry implements Cached: this node's pods in the node agents' namespaces, so a Role in
// each is all the grant needs, and no one else's pod reaches the agent.
func (g *NodeAgentsGate) CacheEntry() (client.Object, cache.ByObject) {
	onNode := fields.OneTermEqualSelector("spec.nodeName", g.node)
	entry := cache.ByObject{Namespaces: map[string]cache.Config{}}
	for _, ns := range g.namespaces {
		entry.Namespaces[ns] = cache.Config{FieldSelector: onNode}
	}
	return &corev1.Pod{}, entry
}

// Watches implements Cached: this node's pods that a DaemonSet controls, in the node agents'
// namespaces; other pods come and go with the workload and change nothing here.
func (g *NodeAgentsGate) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	daemon := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && pod.Spec.NodeName == g.node && g.inNamespaces(pod.Namespace) && daemonSetRef(pod) != nil
	})
	return &corev1.Pod{}, toNode, []predicate.Predicate{daemon}
}

// RESTMapping implements Cached.
func (g *NodeAgentsGate) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace
}

// NodeChanged implements NodeReader: which DaemonSets should run here follows the Node's labels
// and taints.
func (g *NodeAgentsGate) NodeChanged(oldNode, newNode *corev1.Node) bool {
	return !equality.Semantic.DeepEqual(oldNode.Labels, newNode.Labels) ||
		!equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints)
}

// Recheck implements Rechecked: while it waits, the list of DaemonSets is read again.
func (g *NodeAgentsGate) Recheck() time.Duration { return relistAfter }

// Check implements Gate.
func (g *NodeAgentsGate) Check(ctx context.Context, in Input) error {
	list := &corev1.PodList{}
	// The cache holds this node's pods only; the filter keeps a wider cache's out, and another
	// gate's namespaces'.
	if err := in.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("listing node %s's pods: %w", g.node, err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != g.node || !g.inNamespaces(p.Namespace) })
	daemons, err := g.daemonSets(ctx, in.APIReader, pods, 0)
	if err != nil {
		return err
	}
	// The registry is read at most once per check, and only if a pod here registers a plugin;
	// the pods the scheduler has not placed, once per namespace, and only for a DaemonSet
	// without a pod here.
	serving := sync.OnceValues(func() ([]Plugin, error) { return g.registry.Serving(ctx) })
	pending := g.pendingPods(ctx, in.APIReader)
	err = g.verdict(in.Node, daemons, pods, serving, pending)
	if err == nil && g.listAge() > confirmAfter {
		// About to pass: on a list of now, so that a DaemonSet added since counts.
		if daemons, err = g.daemonSets(ctx, in.APIReader, pods, confirmAfter); err != nil {
			return err
		}
		err = g.verdict(in.Node, daemons, pods, serving, pending)
	}
	return err
}

// verdict returns why the node agents among daemons are not all ready on node, naming the
// DaemonSets that hold it by reason, or nil.
func (g *NodeAgentsGate) verdict(node *corev1.Node, daemons []appsv1.DaemonSet, pods []corev1.Pod,
	serving func() ([]Plugin, error), pending func(namespace string) ([]corev1.Pod, error)) error {
	self := g.selfPod(pods)
	// waiting are the DaemonSets that hold the node by reason class; named, the same as the message
	// names them.
	waiting, named := map[string][]string{}, map[string][]string{}
	var reasons []string
	for i := range daemons {
		ds := &daemons[i]
		if self != nil && controlledBy(self, ds) || !g.counts(ds, node) {
			continue
		}
		pod := podOf(ds, pods)
		name := ds.Namespace + "/" + ds.Name
		var why string
		switch {
		case pod == nil:
			placing, err := g.placing(ds, node, pending)
			if err != nil {
				return err
			}
			switch scheduled := unschedulableFor(placing, g.clock); {
			case placing != nil && g.clock.Since(placing.CreationTimestamp.Time) >= unplaceableAfter && neverFits(placing, node):
				// It asks more than the node has at all: it would hold the node without ever
				// running, whatever else runs there. The pod and the Node decide it, never the
				// scheduler's verdict, which counts every pod on the node, a tenant's too.
			case scheduled == nil:
				why = ReasonNoDaemonPod
			default:
				// The scheduler's verdict only says why the node is held.
				why = ReasonDaemonPodUnschedulable
				name += fmt.Sprintf(" (pod %s: %s)", placing.Name, clip(scheduled.Message, maxSchedulerMessage))
			}
		case !podReady(pod):
			why = ReasonDaemonPodNotReady
		case g.registry != nil && mountsRegistry(pod):
			plugins, err := serving()
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(plugins, func(p Plugin) bool { return g.owns(pod, p, pods) }) {
				why = ReasonRegistrarNotServing
			}
		}
		if why == "" {
			continue
		}
		if _, ok := waiting[why]; !ok {
			reasons = append(reasons, why)
		}
		waiting[why] = append(waiting[why], ds.Namespace+"/"+ds.Name)
		named[why] = append(named[why], name)
	}
	if len(reasons) == 0 {
		return nil
	}
	parts := make([]string, 0, len(reasons))
	var holders []string
	for _, r := range reasons {
		part := waitingFor[r] + ": " + strings.Join(named[r], ", ")
		if fix := fixFor[r]; fix != "" {
			part += ". " + fix
		}
		parts = append(parts, part)
		holders = append(holders, waiting[r]...)
	}
	slices.Sort(holders)
	nr := NotReady(reasons[0], errors.New(strings.Join(parts, "; ")))
	nr.Holders = holders
	return nr
}

// waitingFor says what each reason class means, before the DaemonSets it names.
var waitingFor = map[string]string{
	ReasonNoDaemonPod: "DaemonSets without a pod on this node yet",
	ReasonDaemonPodUnschedulable: "DaemonSets whose pod the scheduler has not placed on this node for a minute, " +
		"though the node has room for it: other pods there hold what it asks",
	ReasonDaemonPodNotReady:   "DaemonSets whose pod on this node is not Ready",
	ReasonRegistrarNotServing: "DaemonSets whose pod mounts kubelet's plugins registry read-write and serves no plugin there yet",
}

// fixFor is the one-line fix of a reason class, where the class has one.
var fixFor = map[string]string{
	ReasonDaemonPodUnschedulable: "Give the DaemonSet priorityClassName system-node-critical, so that its pod preempts them, " +
		"or set --max-wait to release such a node",
}

// counts reports whether ds is a node agent this node waits for.
func (g *NodeAgentsGate) counts(ds *appsv1.DaemonSet, node *corev1.Node) bool {
	switch ds.Labels[NodeAgentLabel] {
	case "false":
		return false
	case "true":
	default:
		if g.choose == NodeAgentsLabelled {
			return false
		}
	}
	if ds.DeletionTimestamp != nil {
		return false
	}
	pod := daemonPod(ds, node.Name)
	if !g.tolerated(pod.Spec.Tolerations, node) {
		// It cannot start before the taints go, so it cannot be what they wait for.
		return false
	}
	return shouldRun(pod, node, g.withoutStartup(node.Spec.Taints))
}

// inNamespaces reports whether ns is one of the node agents' namespaces.
func (g *NodeAgentsGate) inNamespaces(ns string) bool {
	_, found := slices.BinarySearch(g.namespaces, ns)
	return found
}
