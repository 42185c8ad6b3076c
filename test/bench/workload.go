package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// podsPerNode is how many pods that need the driver wait for each node.
const podsPerNode = 3

// strategy is one way of keeping pods off a node until its driver is ready.
type strategy struct {
	name string
	// agentArgs are the agent's flags beyond its connection and node; nil runs no agent, and
	// kubelet registers the Node without the startup taint.
	agentArgs []string
}

// strategies are the rows of the workload table: no startup taint, removal once the driver's
// process answers (as the EFS driver removes its taint), this project's defaults, and the
// defaults with the driver's volume limit required.
var strategies = []strategy{
	{name: "no startup taint"},
	{name: "taint removed when the driver answers (`--require-csinode=false`)", agentArgs: []string{"--require-csinode=false"}},
	{name: "default: Probe and kubelet's CSINode registration", agentArgs: []string{}},
	{name: "default with `--require-allocatable`", agentArgs: []string{"--require-allocatable"}},
}

// strategyResult is what one strategy did to the pods of its nodes.
type strategyResult struct {
	strategy
	together, nodes int
	// failed counts kubelet's failed mounts; nodesFailed the nodes with at least one.
	failed, nodesFailed int
	notRegistered       bool
	// createdToPublished runs from the Node's creation to its first pod's volume published,
	// goneToScheduled from the startup taint gone to the node's first pod scheduled.
	createdToPublished, goneToScheduled []time.Duration
	// requests are the agent's API requests per node, over its start.
	requests []int
	// stalls say why a node waited more than stallAfter for its last volume.
	stalls []string
}

// stallAfter is how long after its creation a node's last volume must be published before the
// report names the node and says which component held it. The scheduler retries a pod it missed
// an event for after at most 5 minutes, so a node's run waits for longer than that.
const (
	stallAfter  = time.Minute
	nodeTimeout = 6 * time.Minute
)

// workloadNode is one node of a round: kubelet, its driver, the agent, and what the watches saw.
type workloadNode struct {
	name, user string
	kubelet    *hollowkubelet.Kubelet
	driver     *fakecsi.Driver
	agentConf  string
	agent      *exec.Cmd
	registrar  *fakecsi.Registrar
	failures   *workload.MountFailures
	created    time.Time
	taintGone  time.Time
	// scheduled is when each of its pods was seen bound to it.
	scheduled map[string]time.Time
}

// firstScheduled and lastScheduled are when the node's first and last pod were bound to it.
func (n *workloadNode) firstScheduled() time.Time {
	var first time.Time
	for _, t := range n.scheduled {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

func (n *workloadNode) lastScheduled() time.Time {
	var last time.Time
	for _, t := range n.scheduled {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// measureWorkload runs each strategy on trials nodes, for each of fleets that many booting at
// once: each node's kubelet (the hollow kubelet) registers it while podsPerNode pods that need
// the driver wait for it, the driver starts answering its Probe with the node, and its registrar registers
// it with kubelet workload.RegistrarDelay later. The real scheduler and node lifecycle controller
// place the pods; a round ends when kubelet has published every pod's volume through the driver.
func measureWorkload(ctx context.Context, e *env, binary string, fleets []int, trials int) ([]strategyResult, error) {
	admin, err := e.kubeconfigFor("bench-workload-admin")
	if err != nil {
		return nil, err
	}
	cpLog, err := os.Create(filepath.Join(e.work, "control-plane.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cpLog.Close() }()
	cp, err := workload.StartControlPlane(admin, cpLog)
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	if err := e.c.Create(ctx, workload.CSIDriver(driverName)); err != nil {
		return nil, err
	}
	defer func() { _ = e.c.Delete(context.Background(), workload.CSIDriver(driverName)) }()

	var results []strategyResult
	for _, together := range fleets {
		for si, s := range strategies {
			res := strategyResult{strategy: s, together: together}
			for round := 0; res.nodes < trials; round++ {
				names := make([]string, min(together, trials-res.nodes))
				for i := range names {
					names[i] = fmt.Sprintf("workload-%d-%d-%d-%d", together, si, round, i)
				}
				nodes, err := workloadRound(ctx, e, binary, admin, s, names)
				if err != nil {
					return nil, fmt.Errorf("%s, %d together, round %d: %w", s.name, together, round, err)
				}
				if err := res.add(e, nodes); err != nil {
					return nil, err
				}
			}
			logf("  %d together, %s: %d failed mounts on %d of %d nodes; created to first volume published p50 %s",
				together, s.name, res.failed, res.nodesFailed, res.nodes, ms(percentile(res.createdToPublished, 0.5)))
			results = append(results, res)
		}
	}
	return results, nil
}

// add records a round's nodes.
func (r *strategyResult) add(e *env, nodes []*workloadNode) error {
	users := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.user != "" {
			users = append(users, n.user)
		}
	}
	requests, err := e.audit.byUser(users...)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		r.nodes++
		failed, examples := n.failures.Count()
		r.failed += failed
		if failed > 0 {
			r.nodesFailed++
		}
		r.notRegistered = r.notRegistered || slices.ContainsFunc(examples, func(l string) bool {
			return strings.Contains(l, workload.NotRegistered)
		})
		published := n.driver.Published()
		r.createdToPublished = append(r.createdToPublished, published[0].At.Sub(n.created))
		if !n.taintGone.IsZero() {
			r.goneToScheduled = append(r.goneToScheduled, n.firstScheduled().Sub(n.taintGone))
		}
		if last := published[len(published)-1].At; last.Sub(n.created) > stallAfter {
			stall := fmt.Sprintf("%s: last volume published %s after the node's creation; the scheduler bound its last pod %s after it",
				n.name, last.Sub(n.created).Round(time.Second), n.lastScheduled().Sub(n.created).Round(time.Second))
			logf("  %s", stall)
			r.stalls = append(r.stalls, stall)
		}
		if n.user != "" {
			r.requests = append(r.requests, total(requests[n.user]))
		}
	}
	return nil
}

// workloadRound boots one node per name at once under strategy s, and returns once kubelet has
// published every pod's volume on each, with the agents stopped.
func workloadRound(ctx context.Context, e *env, binary, kubeconfig string, s strategy, names []string) ([]*workloadNode, error) {
	nodes := make([]*workloadNode, len(names))
	var err error
	for i, name := range names {
		nodes[i] = &workloadNode{name: name, failures: workload.NewMountFailures(driverName), scheduled: map[string]time.Time{}}
		if s.agentArgs != nil {
			nodes[i].user = "agent-" + name
			// One user per agent, so the audit log tells their requests apart.
			if nodes[i].agentConf, err = e.kubeconfigFor(nodes[i].user); err != nil {
				return nil, err
			}
		}
		for p := range podsPerNode {
			if err := e.c.Create(ctx, workload.Pod(metav1.NamespaceDefault, fmt.Sprintf("%s-%d", name, p), name, driverName)); err != nil {
				return nil, err
			}
		}
	}
	defer cleanUpRound(e, nodes)
	watched, err := watchRound(ctx, e, nodes)
	if err != nil {
		return nil, err
	}
	defer watched.stop()

	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errs <- bootNode(ctx, e, binary, kubeconfig, s, n) }()
	}
	var all []error
	for range nodes {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		return nil, err
	}
	stopAgents(nodes)
	watched.stop()
	return nodes, watched.check()
}

// bootNode starts a node's kubelet, driver and agent, registers the driver with kubelet
// workload.RegistrarDelay after the driver started, and waits until kubelet has published every
// pod's volume.
func bootNode(ctx context.Context, e *env, binary, kubeconfig string, s strategy, n *workloadNode) error {
	var taints []corev1.Taint
	if s.agentArgs != nil {
		taints = []corev1.Taint{startupTaint}
	}
	var err error
	if n.kubelet, err = hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: n.name,
		RegisterWithTaints: taints, Log: n.failures}); err != nil {
		return err
	}
	if n.driver, err = fakecsi.Start(filepath.Join(e.work, n.name+".sock"), driverName, fakecsi.Ready); err != nil {
		return err
	}
	n.driver.SetMaxVolumes(25)
	started := time.Now()
	if s.agentArgs != nil {
		n.agent = exec.CommandContext(ctx, binary, append([]string{"--kubeconfig=" + n.agentConf, "--node-name=" + n.name,
			"--csi-address=" + n.driver.Path(), "--metrics-bind-address=0", "--health-probe-bind-address=0"}, s.agentArgs...)...)
		n.agent.Stdout, n.agent.Stderr = io.Discard, io.Discard
		if err := n.agent.Start(); err != nil {
			return err
		}
	}
	time.Sleep(time.Until(started.Add(workload.RegistrarDelay)))
	if n.registrar, err = fakecsi.Register(n.kubelet.PluginsRegistry(), driverName, n.driver.Path()); err != nil {
		return err
	}
	deadline := time.Now().Add(nodeTimeout)
	for len(n.driver.Published()) < podsPerNode {
		select {
		case <-n.kubelet.Exited():
			return fmt.Errorf("%s: kubelet exited: %w", n.name, n.kubelet.Err())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: kubelet published %d of %d volumes in %s (%s)", n.name, len(n.driver.Published()), podsPerNode,
				nodeTimeout, podStates(ctx, e, n.name))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// podStates says where each of a node's pods is, for an error.
func podStates(ctx context.Context, e *env, node string) string {
	pods := &corev1.PodList{}
	if err := e.c.List(ctx, pods, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		return err.Error()
	}
	var states []string
	for _, pod := range pods.Items {
		if !strings.HasPrefix(pod.Name, node+"-") {
			continue
		}
		state := fmt.Sprintf("%s on %q, %s", pod.Name, pod.Spec.NodeName, pod.Status.Phase)
		for _, c := range pod.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				state += fmt.Sprintf(", %s: %s", c.Type, c.Message)
			}
		}
		states = append(states, state)
	}
	return strings.Join(states, "; ")
}

// stopAgents stops every agent, so the audit log holds all of their requests.
func stopAgents(nodes []*workloadNode) {
	for _, n := range nodes {
		if n.agent != nil && n.agent.Process != nil {
			_ = n.agent.Process.Signal(syscall.SIGTERM)
			_ = n.agent.Wait()
			n.agent = nil
		}
	}
}

// cleanUpRound stops what a round started and deletes its Nodes, CSINodes and pods, so the next
// round starts on an empty cluster.
func cleanUpRound(e *env, nodes []*workloadNode) {
	ctx := context.Background()
	stopAgents(nodes)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if n.registrar != nil {
				n.registrar.Unregister()
			}
			if n.kubelet != nil {
				n.kubelet.Stop()
			}
			if n.driver != nil {
				n.driver.Stop()
			}
		})
	}
	wg.Wait()
	_ = e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(metav1.NamespaceDefault), client.GracePeriodSeconds(0))
	for _, n := range nodes {
		_ = e.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}})
		_ = e.cs.StorageV1().CSINodes().Delete(ctx, n.name, metav1.DeleteOptions{})
	}
}

// roundWatch times, from watch events, each Node's creation, its startup taint's removal and its
// first pod's scheduling.
type roundWatch struct {
	nodes, pods interface{ Stop() }
	done        chan struct{}
	once        sync.Once
	byName      map[string]*workloadNode
}

func watchRound(ctx context.Context, e *env, nodes []*workloadNode) (*roundWatch, error) {
	w := &roundWatch{done: make(chan struct{}), byName: map[string]*workloadNode{}}
	for _, n := range nodes {
		w.byName[n.name] = n
	}
	nodeWatch, err := e.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	podWatch, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		nodeWatch.Stop()
		return nil, err
	}
	w.nodes, w.pods = nodeWatch, podWatch
	nodeEvents, podEvents := stamped(nodeWatch.ResultChan()), stamped(podWatch.ResultChan())
	go func() {
		defer close(w.done)
		for nodeEvents != nil || podEvents != nil {
			select {
			case ev, ok := <-nodeEvents:
				if !ok {
					nodeEvents = nil
					continue
				}
				if node, isNode := ev.Object.(*corev1.Node); isNode {
					w.sawNode(node, ev.at)
				}
			case ev, ok := <-podEvents:
				if !ok {
					podEvents = nil
					continue
				}
				if pod, isPod := ev.Object.(*corev1.Pod); isPod {
					if n := w.byName[pod.Spec.NodeName]; n != nil && n.scheduled[pod.Name].IsZero() {
						n.scheduled[pod.Name] = ev.at
					}
				}
			}
		}
	}()
	return w, nil
}

func (w *roundWatch) sawNode(node *corev1.Node, at time.Time) {
	n := w.byName[node.Name]
	if n == nil {
		return
	}
	if n.created.IsZero() {
		n.created = at
	}
	if n.user != "" && n.taintGone.IsZero() && !hasKey(node, startupTaint.Key) {
		n.taintGone = at
	}
}

// stop ends the watches and waits until their last events are recorded.
func (w *roundWatch) stop() {
	w.once.Do(func() {
		w.nodes.Stop()
		w.pods.Stop()
	})
	<-w.done
}

// check says which times a round's watches missed.
func (w *roundWatch) check() error {
	for _, n := range w.byName {
		switch {
		case n.created.IsZero() || len(n.scheduled) == 0:
			return fmt.Errorf("%s: the watches saw no creation or no scheduled pod", n.name)
		case n.user != "" && n.taintGone.IsZero():
			return fmt.Errorf("%s: the watch saw the startup taint never go", n.name)
		}
	}
	return nil
}

// workloadMarkdown reports the strategies side by side.
func workloadMarkdown(results []strategyResult, machine string, elapsed time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# Pods that need the driver, by removal strategy")
	p("")
	p("Machine: %s. Whole run: %s (`make bench`). Each node is a hollow kubelet v1.37.2 (kubelet's real CSI volume", machine,
		elapsed.Round(time.Second))
	p("path, with a fake mounter), placed on by the real kube-scheduler and kube-controller-manager (node lifecycle and")
	p("taint eviction only), against an envtest API server on the same machine. %d pods per node, with an inline CSI", podsPerNode)
	p("volume and a `nodeSelector` for it, wait before the node joins. The driver answers its Probe from the start; its")
	p("registrar registers it with kubelet %s later, as a slow node-driver-registrar does. A node's run ends when", workload.RegistrarDelay)
	p("kubelet has published every pod's volume through the driver (`NodePublishVolume`).")
	p("")
	p("- **failed mounts**: kubelet's `MountVolume.SetUp failed` log lines for the driver's volumes (the hollow kubelet's")
	p("  events never reach the API server), and on how many nodes.")
	p("- **created → first volume published**: from the watch event of the Node's creation to the driver's first publish.")
	p("- **taint gone → first pod scheduled**: from the watch event without the startup taint to the first pod bound to the")
	p("  node; the scheduler also waits for the node lifecycle controller to lift kubelet's `not-ready` taint.")
	p("- **API requests per node**: the agent's, from its start until every node of its round has its volumes, from the audit log.")
	p("")
	p("| strategy | nodes booting together | nodes | failed mounts (nodes) | created → first volume published p50 / p95 / p99 | " +
		"taint gone → first pod scheduled p50 / p95 / p99 | API requests per node (median) |")
	p("|---|---|---|---|---|---|---|")
	for _, r := range results {
		failed := fmt.Sprintf("**%d** (%d)", r.failed, r.nodesFailed)
		if r.notRegistered {
			failed += ", \"not found in the list of registered CSI drivers\""
		}
		gone, requests := "no taint", "no agent"
		if len(r.goneToScheduled) > 0 {
			gone = triple(r.goneToScheduled)
		}
		if len(r.requests) > 0 {
			slices.Sort(r.requests)
			requests = fmt.Sprint(r.requests[len(r.requests)/2])
		}
		p("| %s | %d | %d | %s | %s | %s | %s |", r.name, r.together, r.nodes, failed, triple(r.createdToPublished), gone, requests)
	}
	var stalls []string
	for _, r := range results {
		for _, s := range r.stalls {
			stalls = append(stalls, fmt.Sprintf("- %s, %d together: %s", r.name, r.together, s))
		}
	}
	if len(stalls) > 0 {
		p("")
		p("Nodes that waited more than %s for their last volume:", stallAfter)
		p("")
		for _, s := range stalls {
			p("%s", s)
		}
	}
	return b.String()
}

// triple formats p50 / p95 / p99.
func triple(s []time.Duration) string {
	return fmt.Sprintf("%s / %s / %s", ms(percentile(s, 0.5)), ms(percentile(s, 0.95)), ms(percentile(s, 0.99)))
}
