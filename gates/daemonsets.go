// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// DaemonSetsName names the node agents' gate in logs, events and metrics.
const DaemonSetsName = "daemonsets"

// NodeAgentLabel on a DaemonSet says whether it is a node agent this node waits for: "false"
// leaves it out; with NodeAgentsLabelled, only DaemonSets labelled "true" count.
const NodeAgentLabel = "startup-taint-remover.github.io/node-agent"

// The reason classes of the node agents' gate: a DaemonSet's pod the DaemonSet controller has not
// created here yet, one not Ready, and one whose registrar does not serve kubelet yet.
const (
	ReasonNoDaemonPod         = "no_daemon_pod"
	ReasonDaemonPodNotReady   = "daemon_pod_not_ready"
	ReasonRegistrarNotServing = "registrar_not_serving"
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

// relistAfter is how old the list of DaemonSets may be while the gate waits: a DaemonSet added,
// or one that stops counting, shows within it. A pod of a DaemonSet not on the list, and a verdict
// that would pass on a list older than confirmAfter, list again at once.
const (
	relistAfter  = 5 * time.Second
	confirmAfter = time.Second
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
// It needs no configuration: the DaemonSets are listed from the API server's watch cache while
// the gate is checked, never watched, so a DaemonSet's status updates reach no agent; the pods are
// this node's only, in the manager's cache, and their watch events cause the reconcile.
type NodeAgentsGate struct {
	node     string
	self     types.NamespacedName
	startup  []corev1.Taint
	choose   NodeAgents
	registry *PluginRegistry
	clock    clock.PassiveClock

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
	g := &NodeAgentsGate{node: o.Node, self: o.Self, startup: o.Startup, choose: o.Choose, registry: o.Registry,
		clock: o.Clock}
	if g.choose == "" {
		g.choose = NodeAgentsAll
	}
	if g.clock == nil {
		g.clock = clock.RealClock{}
	}
	return g
}

// Name implements Gate.
func (g *NodeAgentsGate) Name() string { return DaemonSetsName }

// Title implements Titled.
func (g *NodeAgentsGate) Title() string { return "DaemonSets" }

// CacheEntry implements Cached: this node's pods, in every namespace.
func (g *NodeAgentsGate) CacheEntry() (client.Object, cache.ByObject) {
	return &corev1.Pod{}, cache.ByObject{Field: fields.OneTermEqualSelector("spec.nodeName", g.node)}
}

// Watches implements Cached: this node's pods that a DaemonSet controls; other pods come and go
// with the workload and change nothing here.
func (g *NodeAgentsGate) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	daemon := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && pod.Spec.NodeName == g.node && daemonSetOf(pod) != ""
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
	// The cache holds this node's pods only; the filter keeps a wider cache's out.
	if err := in.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("listing node %s's pods: %w", g.node, err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != g.node })
	daemons, err := g.daemonSets(ctx, in.Lister, pods, 0)
	if err != nil {
		return err
	}
	// The registry is read at most once per check, and only if a pod here registers a plugin.
	serving := sync.OnceValues(func() ([]Plugin, error) { return g.registry.Serving(ctx) })
	err = g.check(in.Node, daemons, pods, serving)
	if err == nil && g.listAge() > confirmAfter {
		// About to pass: on a list of now, so that a DaemonSet added since counts.
		if daemons, err = g.daemonSets(ctx, in.Lister, pods, confirmAfter); err != nil {
			return err
		}
		err = g.check(in.Node, daemons, pods, serving)
	}
	return err
}

// check returns why the node agents among daemons are not all ready on node, naming the
// DaemonSets that hold it by reason, or nil.
func (g *NodeAgentsGate) check(node *corev1.Node, daemons []appsv1.DaemonSet, pods []corev1.Pod,
	serving func() ([]Plugin, error)) error {
	own := g.ownDaemonSet(pods)
	waiting := map[string][]string{}
	var reasons []string
	for i := range daemons {
		ds := &daemons[i]
		if ds.UID == own || !g.counts(ds, node) {
			continue
		}
		pod := podOf(ds, pods)
		var why string
		switch {
		case pod == nil:
			why = ReasonNoDaemonPod
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
	}
	if len(reasons) == 0 {
		return nil
	}
	parts := make([]string, 0, len(reasons))
	var holders []string
	for _, r := range reasons {
		parts = append(parts, waitingFor[r]+": "+strings.Join(waiting[r], ", "))
		holders = append(holders, waiting[r]...)
	}
	slices.Sort(holders)
	nr := NotReady(reasons[0], errors.New(strings.Join(parts, "; ")))
	nr.Holders = holders
	return nr
}

// waitingFor says what each reason class means, before the DaemonSets it names.
var waitingFor = map[string]string{
	ReasonNoDaemonPod:         "DaemonSets without a pod on this node yet",
	ReasonDaemonPodNotReady:   "DaemonSets whose pod on this node is not Ready",
	ReasonRegistrarNotServing: "DaemonSets whose pod mounts kubelet's plugins registry read-write and serves no plugin there yet",
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

// tolerated reports whether tolerations tolerate the startup taints: each one on node as it is
// there; one that is not there (it went, or has not come yet) with its configured effect, or with
// either effect that keeps a pod off when none is configured.
func (g *NodeAgentsGate) tolerated(tolerations []corev1.Toleration, node *corev1.Node) bool {
	tolerates := func(t corev1.Taint) bool {
		return corev1helpers.TolerationsTolerateTaint(klog.Background(), tolerations, &t, true)
	}
	for _, spec := range g.startup {
		var on []corev1.Taint
		for _, t := range node.Spec.Taints {
			if matchesStartup(spec, t) {
				on = append(on, t)
			}
		}
		switch {
		case len(on) > 0:
			if slices.ContainsFunc(on, func(t corev1.Taint) bool { return !tolerates(t) }) {
				return false
			}
		case spec.Effect != "":
			if !tolerates(spec) {
				return false
			}
		default:
			noSchedule, noExecute := spec, spec
			noSchedule.Effect, noExecute.Effect = corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute
			if !tolerates(noSchedule) && !tolerates(noExecute) {
				return false
			}
		}
	}
	return true
}

// matchesStartup reports whether taint t is the startup taint spec: its key, and its effect
// where spec has one.
func matchesStartup(spec, t corev1.Taint) bool {
	return spec.Key == t.Key && (spec.Effect == "" || spec.Effect == t.Effect)
}

// bootTaints are the taints a booting node carries until it is initialized and Ready, which go by
// themselves: the DaemonSet controller makes no pod of a DaemonSet that does not tolerate them
// until they go, and nor does the scheduler place a workload's pod, so such a DaemonSet counts from
// the start, or the gate would pass before its pod exists.
var bootTaints = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable,
	"node.cloudprovider.kubernetes.io/uninitialized"}

// withoutStartup returns taints without the startup taints and the taints of a booting node.
func (g *NodeAgentsGate) withoutStartup(taints []corev1.Taint) []corev1.Taint {
	return slices.DeleteFunc(slices.Clone(taints), func(t corev1.Taint) bool {
		return slices.Contains(bootTaints, t.Key) || slices.ContainsFunc(g.startup, func(s corev1.Taint) bool { return matchesStartup(s, t) })
	})
}

// daemonPod is the pod the DaemonSet controller would make of ds for node: its template, with the
// tolerations the controller adds to every daemon pod
// (pkg/controller/daemon/util.AddOrUpdateDaemonPodTolerations).
func daemonPod(ds *appsv1.DaemonSet, node string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Namespace = ds.Namespace
	if pod.Spec.NodeName == "" {
		// Only a template that names another node differs from the pod the controller makes.
		pod.Spec.NodeName = node
	}
	added := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if pod.Spec.HostNetwork {
		added = append(added, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoSchedule})
	}
	for _, t := range added {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	return pod
}

// shouldRun applies the DaemonSet controller's rules for whether pod runs on node
// (pkg/controller/daemon NodeShouldRunDaemonPod): its node name, its required node affinity and
// node selector, and taints of effect NoSchedule or NoExecute it does not tolerate.
func shouldRun(pod *corev1.Pod, node *corev1.Node, taints []corev1.Taint) bool {
	if pod.Spec.NodeName != node.Name {
		return false
	}
	// A term that does not parse matches nothing, as the controller reads it.
	if fits, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !fits {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, true)
	return !untolerated
}

// daemonSets returns the DaemonSets that may count, listed again when the last list is older
// than maxAge (relistAfter when zero) or some pod here belongs to a DaemonSet it lacks.
func (g *NodeAgentsGate) daemonSets(ctx context.Context, lister client.Reader, pods []corev1.Pod,
	maxAge time.Duration) ([]appsv1.DaemonSet, error) {
	if maxAge == 0 {
		maxAge = relistAfter
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	fresh := !g.listedAt.IsZero() && g.clock.Since(g.listedAt) <= maxAge
	if fresh && !slices.ContainsFunc(pods, func(p corev1.Pod) bool {
		uid := daemonSetOf(&p)
		return uid != "" && !slices.ContainsFunc(g.listed, func(ds appsv1.DaemonSet) bool { return ds.UID == uid })
	}) {
		return g.listed, nil
	}
	selector := labels.NewSelector()
	op, value := "!=", "false"
	if g.choose == NodeAgentsLabelled {
		op, value = "=", "true"
	}
	req, err := labels.ParseToRequirements(NodeAgentLabel + op + value)
	if err != nil {
		return nil, fmt.Errorf("selecting node agents: %w", err)
	}
	list := &appsv1.DaemonSetList{}
	// From the API server's watch cache (resourceVersion 0): no read of etcd per booting node.
	err = lister.List(ctx, list, client.MatchingLabelsSelector{Selector: selector.Add(req...)},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
	if err != nil {
		return nil, fmt.Errorf("listing DaemonSets: %w", err)
	}
	g.listed, g.listedAt = list.Items, g.clock.Now()
	return g.listed, nil
}

// listAge is the age of the last list of DaemonSets.
func (g *NodeAgentsGate) listAge() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clock.Since(g.listedAt)
}

// ownDaemonSet is the UID of the DaemonSet of the agent's own pod, when it is among pods.
func (g *NodeAgentsGate) ownDaemonSet(pods []corev1.Pod) types.UID {
	for i := range pods {
		if pods[i].Namespace == g.self.Namespace && pods[i].Name == g.self.Name {
			return daemonSetOf(&pods[i])
		}
	}
	return ""
}

// daemonSetOf is the UID of the DaemonSet that controls pod, or "".
func daemonSetOf(pod *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "DaemonSet" {
		return ref.UID
	}
	return ""
}

// podOf returns the pod of ds among pods, or nil: a Ready one that is not being deleted first,
// then a Ready one (a rollout's old pod, still serving), then any.
func podOf(ds *appsv1.DaemonSet, pods []corev1.Pod) *corev1.Pod {
	var found *corev1.Pod
	rank := func(p *corev1.Pod) int {
		r := 0
		if podReady(p) {
			r += 2
		}
		if p.DeletionTimestamp == nil {
			r++
		}
		return r
	}
	for i := range pods {
		p := &pods[i]
		if daemonSetOf(p) != ds.UID || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if found == nil || rank(p) > rank(found) {
			found = p
		}
	}
	return found
}

// mountsRegistry reports whether pod mounts kubelet's plugins registry from the host so that it
// can write there: it registers a plugin with kubelet, as node-driver-registrar does, which must
// create its socket. A read-only mount only reads the registry (this agent's own installs do).
func mountsRegistry(pod *corev1.Pod) bool {
	_, ok := registryMount(pod)
	return ok
}

// registryMount returns kubelet's root directory as pod sees the host: the directory that holds
// the plugins registry it mounts.
func registryMount(pod *corev1.Pod) (string, bool) {
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && filepath.Base(filepath.Clean(v.HostPath.Path)) == registryDirName && writes(pod, v.Name) {
			return filepath.Dir(filepath.Clean(v.HostPath.Path)), true
		}
	}
	return "", false
}

// writes reports whether a container of pod mounts the volume named volume read-write.
func writes(pod *corev1.Pod, volume string) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume && !m.ReadOnly })
	})
}

// owns reports whether plugin p is pod's: of the pods among pods that mount kubelet's plugins
// registry, pod has the host path that holds p's endpoint most closely. Paths under kubelet's root
// compare relative to it, as pod's root and the agent's may differ (a distribution's, a test's).
func (g *NodeAgentsGate) owns(pod *corev1.Pod, p Plugin, pods []corev1.Pod) bool {
	endpoint := relativeTo(g.registry.Root(), p.Endpoint)
	best, mine := -1, -1
	for i := range pods {
		depth := holds(&pods[i], endpoint)
		if pods[i].UID == pod.UID && pods[i].Namespace == pod.Namespace && pods[i].Name == pod.Name {
			mine = depth
		}
		best = max(best, depth)
	}
	return mine >= 0 && mine == best
}

// holds returns how deep the deepest of pod's host paths that holds endpoint is, relative to
// kubelet's root as pod sees it, or -1 when none does or pod does not mount the registry.
func holds(pod *corev1.Pod, endpoint string) int {
	root, ok := registryMount(pod)
	if !ok {
		return -1
	}
	best := -1
	for _, v := range pod.Spec.Volumes {
		if v.HostPath == nil || filepath.Base(filepath.Clean(v.HostPath.Path)) == registryDirName {
			continue
		}
		dir := relativeTo(root, v.HostPath.Path)
		if dir != "." && endpoint != dir && !strings.HasPrefix(endpoint, dir+"/") {
			continue
		}
		depth := 0
		if dir != "." {
			depth = strings.Count(strings.Trim(dir, "/"), "/") + 1
		}
		best = max(best, depth)
	}
	return best
}

// relativeTo returns path relative to root when it is under root, and path, cleaned, otherwise.
func relativeTo(root, path string) string {
	path = filepath.Clean(path)
	if rel, err := filepath.Rel(root, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return rel
	}
	return path
}
