// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// agentsNamespace holds the node agents' DaemonSets of the agents scenario.
const agentsNamespace = "bench-agents"

// noAgent names the agents scenario's run without agents.
const noAgent = "no agent"

// agentsStrategy is how the agents of a booting fleet decide.
type agentsStrategy struct {
	name string
	// group is the agent's group for node; gate is the fake CSI driver's socket.
	group func(node, socket string) controllers.Group
	// csiNode registers the CSI driver in a node's CSINode once its pods are Ready.
	csiNode bool
}

// agentsStrategies are the cases of the agents scenario: the node agents' gate, today's defaults
// (the CSI driver and its CSINode entry), and, as what the gate avoids, the same gate fed by a
// cluster-wide DaemonSet watch.
var agentsStrategies = []agentsStrategy{
	// No agent: the watch events the API server's own watchers get (its admission plugins' and
	// authorizers' informers), which the other rows' counts are net of.
	{name: noAgent},
	{name: "every node agent, no configuration (--node-agents=all)", group: func(node, _ string) controllers.Group {
		return controllers.Group{Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{nodeAgentsGate(node)}}
	}},
	{name: "the defaults (the CSI driver and its CSINode entry)", csiNode: true, group: func(node, socket string) controllers.Group {
		gate, _ := gates.NewCSIGate(socket, 3*time.Second)
		return controllers.CSIDriverGroup(node, gate)
	}},
	{name: "the same, watching DaemonSets cluster-wide (what the gate avoids)", group: func(node, _ string) controllers.Group {
		return controllers.Group{Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{nodeAgentsGate(node), daemonSetWatch{}}}
	}},
}

func nodeAgentsGate(node string) *gates.NodeAgentsGate {
	return gates.NewNodeAgentsGate(gates.NodeAgentsOptions{Node: node, Namespaces: []string{agentsNamespace}, Startup: []corev1.Taint{{Key: startupTaint.Key}}})
}

// daemonSetWatch is a gate that always passes and caches every DaemonSet of the cluster, each of
// whose events reconciles: beside the node agents' gate, what an agent that watched DaemonSets
// would receive.
type daemonSetWatch struct{}

// Name implements gates.Gate.
func (daemonSetWatch) Name() string { return "daemonset-watch" }

// Check implements gates.Gate.
func (daemonSetWatch) Check(context.Context, gates.Input) error { return nil }

// CacheEntry implements gates.Cached: every DaemonSet.
func (daemonSetWatch) CacheEntry() (client.Object, cache.ByObject) {
	return &appsv1.DaemonSet{}, cache.ByObject{}
}

// Watches implements gates.Cached: every DaemonSet's event reconciles.
func (daemonSetWatch) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	return &appsv1.DaemonSet{}, toNode, nil
}

// RESTMapping implements gates.Cached.
func (daemonSetWatch) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return appsv1.SchemeGroupVersion.WithKind("DaemonSet"), meta.RESTScopeNamespace
}

// nodeAgentsResult is one strategy's boot of one fleet size.
type nodeAgentsResult struct {
	strategy string
	nodes    int
	elapsed  time.Duration
	// requests are the agents' requests by verb, per node.
	requests map[string]float64
	// events are the watch events the API server sent, by resource, per node.
	events map[string]float64
	// dsStatusWrites counts the DaemonSet status updates the run made, as the controller does.
	dsStatusWrites int64
	// afterReady is, per node, from its last pod turning Ready (or its CSINode entry) to the
	// taint's removal.
	afterReady []time.Duration
}

// measureNodeAgents boots each of sizes nodes at once, for each strategy, with daemonSets node
// agents that tolerate every taint, and counts each agent's requests and the watch events the
// API server sends.
func measureNodeAgents(ctx context.Context, e *env, sizes []int, daemonSets int) ([]nodeAgentsResult, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentsNamespace}}
	if err := client.IgnoreAlreadyExists(e.c.Create(ctx, ns)); err != nil {
		return nil, err
	}
	var dss []*appsv1.DaemonSet
	for i := range daemonSets {
		ds := workload.Agent(agentsNamespace, fmt.Sprintf("agent-%02d", i), nil, false)
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		if err := e.c.Create(ctx, ds); err != nil {
			return nil, err
		}
		dss = append(dss, ds)
	}
	driver, err := fakecsi.Start(filepath.Join(e.work, "agents.sock"), driverName, fakecsi.Ready)
	if err != nil {
		return nil, err
	}
	defer driver.Stop()
	var out []nodeAgentsResult
	run := 0
	for _, n := range sizes {
		var own map[string]float64
		for _, s := range agentsStrategies {
			run++
			r, err := agentsRun(ctx, e, s, dss, n, run, driver.Path())
			if err != nil {
				return nil, fmt.Errorf("%s, %d nodes: %w", s.name, n, err)
			}
			if s.group == nil {
				own = r.events
				logf("  %s, %d nodes: the API server's own watchers got %.1f watch events per node", s.name, n, total(r.events))
				continue
			}
			r.events = net(r.events, own)
			logf("  %s, %d nodes: untainted in %s; %.1f requests and %.1f watch events per node", s.name, n, r.elapsed.Round(time.Millisecond),
				total(r.requests), total(r.events))
			out = append(out, r)
		}
	}
	return out, nil
}

// agentsRun boots n nodes at once: each registers with the startup taint, its agent starts, the
// DaemonSet controller's part is played here (a pod of each DaemonSet bound to the node, Ready
// after a random delay of up to 3 s, and the DaemonSet's status written as it is), and with the
// defaults the driver's CSINode entry is written once the node's pods are Ready.
func agentsRun(ctx context.Context, e *env, s agentsStrategy, dss []*appsv1.DaemonSet, n, run int, socket string) (nodeAgentsResult, error) {
	res := nodeAgentsResult{strategy: s.name, nodes: n}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("agents-%d-%03d", run, i)
		node, status := realisticNode(names[i])
		node.Spec.Taints = append(node.Spec.Taints, startupTaint)
		if err := e.createNode(ctx, node, status); err != nil {
			return res, err
		}
	}
	cnt := &counter{byVerb: map[string]int64{}}
	runCtx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }()
	mgrs := make([]ctrl.Manager, 0, n)
	for _, name := range names {
		if s.group == nil {
			break
		}
		mgr, err := inProcessAgent(e, cnt, name, s.group(name, socket))
		if err != nil {
			return res, err
		}
		mgrs = append(mgrs, mgr)
	}
	before, err := watchEvents(ctx, e)
	if err != nil {
		return res, err
	}
	start := time.Now()
	var failed atomic.Int64
	startAll(runCtx, mgrs, &running, &failed)

	statusLocks := map[string]*sync.Mutex{}
	for _, ds := range dss {
		statusLocks[ds.Name] = &sync.Mutex{}
	}
	readyAt := make([]time.Time, n)
	var statusWrites atomic.Int64
	errs := make(chan error, n)
	var boots sync.WaitGroup
	for i, name := range names {
		boots.Add(1)
		go func() {
			defer boots.Done()
			at, err := bootDaemonPods(ctx, e, dss, name, s.csiNode, &statusWrites, statusLocks)
			readyAt[i] = at
			if err != nil {
				errs <- err
			}
		}()
	}
	boots.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}

	gone := map[string]time.Time{}
	for s.group != nil && len(gone) < n && time.Since(start) < 3*time.Minute {
		list := &corev1.NodeList{}
		if err := e.c.List(ctx, list); err != nil {
			return res, err
		}
		for _, node := range list.Items {
			if _, ok := gone[node.Name]; !ok && strings.HasPrefix(node.Name, fmt.Sprintf("agents-%d-", run)) &&
				len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})) == 0 {
				gone[node.Name] = time.Now()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	if s.group != nil && len(gone) < n {
		return res, fmt.Errorf("%d of %d nodes untainted after 3 minutes", len(gone), n)
	}
	for i, name := range names {
		if t, ok := gone[name]; ok {
			res.afterReady = append(res.afterReady, t.Sub(readyAt[i]))
		}
	}
	time.Sleep(2 * time.Second) // the last events and writes
	after, err := watchEvents(ctx, e)
	if err != nil {
		return res, err
	}
	cnt.mu.Lock()
	res.requests = perNode(cnt.byVerb, n)
	cnt.mu.Unlock()
	res.events = map[string]float64{}
	for resource, v := range after {
		if d := v - before[resource]; d > 0 {
			res.events[resource] = float64(d) / float64(n)
		}
	}
	res.dsStatusWrites = statusWrites.Load()
	if f := failed.Load(); f > 0 {
		return res, fmt.Errorf("%d managers failed", f)
	}
	return res, nil
}

// bootDaemonPods plays the DaemonSet controller and kubelet for node: a pod of each DaemonSet,
// Ready after up to 3 s, each readiness followed by its DaemonSet's status update; with csiNode,
// the driver's CSINode entry after the last. It returns when the last of those happened.
func bootDaemonPods(ctx context.Context, e *env, dss []*appsv1.DaemonSet, node string, csiNode bool, statusWrites *atomic.Int64,
	statusLocks map[string]*sync.Mutex) (time.Time, error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(dss))
	for _, ds := range dss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name + "-" + node, Labels: ds.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
					Controller: ptr.To(true)}}},
				Spec: *ds.Spec.Template.Spec.DeepCopy()}
			pod.Spec.NodeName = node
			if err := e.c.Create(ctx, pod); err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Second))))
			pod.Status.Phase = corev1.PodRunning
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			if err := e.c.Status().Update(ctx, pod); err != nil {
				errs <- err
				return
			}
			// The DaemonSet controller writes the status of the DaemonSet as its pods turn Ready.
			// One DaemonSet's status at a time, as the controller syncs one key at a time.
			mu := statusLocks[ds.Name]
			mu.Lock()
			defer mu.Unlock()
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &appsv1.DaemonSet{}
				if err := e.c.Get(ctx, client.ObjectKeyFromObject(ds), cur); err != nil {
					return err
				}
				cur.Status.NumberReady++
				cur.Status.CurrentNumberScheduled++
				cur.Status.DesiredNumberScheduled++
				cur.Status.NumberAvailable++
				cur.Status.UpdatedNumberScheduled++
				return e.c.Status().Update(ctx, cur)
			})
			if err != nil {
				errs <- err
				return
			}
			statusWrites.Add(1)
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return time.Time{}, err
	}
	if csiNode {
		if err := registerCSINode(ctx, e.c, node); err != nil {
			return time.Time{}, err
		}
	}
	return time.Now(), nil
}

// watchEvents reads the API server's count of the watch events it sent, by resource
// (apiserver_watch_events_total).
func watchEvents(ctx context.Context, e *env) (map[string]int64, error) {
	body, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[string]int64{}
	s := bufio.NewScanner(strings.NewReader(string(body)))
	s.Buffer(make([]byte, 1<<20), 1<<24)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "apiserver_watch_events_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "apiserver_watch_events_total{"), "} ")
		if !ok {
			continue
		}
		resource := ""
		for _, l := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(l, "="); ok && (k == "resource" || (k == "kind" && resource == "")) {
				resource = strings.Trim(v, `"`)
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		out[resource] += int64(f)
	}
	return out, s.Err()
}

// net returns the counts of m above those of own, each at least zero.
func net(m, own map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if d := v - own[k]; d > 0.05 {
			out[k] = d
		}
	}
	return out
}

func perNode(byVerb map[string]int64, n int) map[string]float64 {
	out := map[string]float64{}
	for verb, v := range byVerb {
		out[verb] = float64(v) / float64(n)
	}
	return out
}

// nodeAgentsMarkdown writes the node-agents scenario's table.
func nodeAgentsMarkdown(rs []nodeAgentsResult, daemonSets int, machine string, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Every node agent: the cost of a booting fleet\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./test/bench --scenarios=node-agents` on %s, in %s. ", machine, elapsed.Round(time.Second))
	fmt.Fprintf(&b, "%d DaemonSets that tolerate every taint; the nodes of a row boot at once: each registers with the startup "+
		"taint, its agent starts, and the bench plays the DaemonSet controller and kubelet: a pod of each DaemonSet bound to the "+
		"node, Ready after a random delay of up to 3 s, each followed by the DaemonSet's status update, as the controller writes "+
		"it; for the defaults, the driver's CSINode entry once the node's pods are Ready. Requests are the agents' own, by verb, "+
		"per node; watch events are what the API server sent to watchers (apiserver_watch_events_total), by resource, per node, "+
		"less what a run of the same boot without agents counted (the API server's own watchers).\n\n", daemonSets)
	b.WriteString("| strategy | nodes booting | requests per node | watch events per node | DaemonSet status writes | last Ready → taint gone p50 / p95 / p99 |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %s / %s / %s |\n", r.strategy, r.nodes, breakdown(r.requests), breakdown(r.events),
			r.dsStatusWrites, ms(percentile(r.afterReady, 0.5)), ms(percentile(r.afterReady, 0.95)), ms(percentile(r.afterReady, 0.99)))
	}
	return b.String()
}

// breakdown writes a per-node count and its parts, largest first.
func breakdown(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
	}
	return fmt.Sprintf("%.1f (%s)", total(m), strings.Join(parts, ", "))
}

// nodeAgents runs the node-agents scenario and writes node-agents.md.
func nodeAgents(ctx context.Context, e *env, c benchConfig) error {
	logf("every node agent: %d DaemonSets, %v nodes booting at once", c.daemonSets, c.nodeAgentsFleets)
	start := time.Now()
	rs, err := measureNodeAgents(ctx, e, c.nodeAgentsFleets, c.daemonSets)
	if err != nil {
		return fmt.Errorf("every node agent: %w", err)
	}
	md := nodeAgentsMarkdown(rs, c.daemonSets, machine(), time.Since(start))
	fmt.Println(md)
	return os.WriteFile(filepath.Join(c.out, "node-agents.md"), []byte(md), 0o644)
}
