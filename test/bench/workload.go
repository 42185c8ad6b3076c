// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
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
	// preventScheduling sets the driver's CSIDriver preventPodSchedulingIfMissing: the
	// scheduler's own check (KEP-5030) keeps pods with PVC-backed volumes off a node until its
	// CSINode lists the driver.
	preventScheduling bool
	// noBootID leaves the Node's boot ID empty across a reboot, so the agent cannot tell one, as
	// before it recorded boots; every other case's kubelet reports one (workload.StampBootID).
	noBootID bool
	// nodeAgents runs the agent without --csi-address, and node agents' DaemonSets on the nodes
	// (nodeAgentSets): the driver's own among them, its socket in the plugin directory that
	// DaemonSet mounts.
	nodeAgents bool
	// crashPolicy installs config/components/taint-after-crash, as every install does on 1.36 and
	// later: the startup taint goes back in the node lifecycle controller's own write.
	crashPolicy bool
}

// The strategies: no startup taint, the scheduler's own check, removal once the driver's process
// answers (as the EFS driver removes its taint), this project's defaults, the defaults with the
// driver's volume limit required, the defaults beside the scheduler's check, and continuous mode
// beside it.
var (
	noTaint     = strategy{name: "no startup taint"}
	upstream    = strategy{name: "no startup taint, `preventPodSchedulingIfMissing: true` (the scheduler's check)", preventScheduling: true}
	answers     = strategy{name: "taint removed when the driver answers (`--require-csinode=false`)", agentArgs: []string{"--require-csinode=false"}}
	defaults    = strategy{name: "default: Probe and kubelet's CSINode registration", agentArgs: []string{}}
	allocatable = strategy{name: "default with `--require-allocatable`", agentArgs: []string{"--require-allocatable"}}
	both        = strategy{name: "default and `preventPodSchedulingIfMissing: true`", agentArgs: []string{}, preventScheduling: true}
	continuous  = strategy{name: "continuous mode (`--retaint-after=" + retaintAfter.String() + "`) and `preventPodSchedulingIfMissing: true`",
		agentArgs: []string{"--taint=" + startupTaint.Key, "--retaint-after=" + retaintAfter.String()}, preventScheduling: true}
	everyAgent = strategy{name: "every node agent, no configuration (`--node-agents=all`)", nodeAgents: true,
		agentArgs: []string{"--node-agents=all", "--taint=" + startupTaint.Key}}
	// podReadiness decides on the node agents' pods' readiness alone, as a central controller
	// such as vigil does: the agent without kubelet's plugins registry.
	podReadiness = strategy{name: "every node agent's pod Ready, as a central controller decides (vigil)", nodeAgents: true,
		agentArgs: []string{"--node-agents=all", "--taint=" + startupTaint.Key, "--plugins-registry="}}
)

// nodeAgentsNamespace holds the node agents' DaemonSets of the nodeAgents cases.
const nodeAgentsNamespace = "bench-node-agents"

// nodeAgentSets are the node agents of the nodeAgents cases, each tolerating the startup taint:
// a CNI-like agent, the driver's node plugin with its registrar, and a log shipper.
func nodeAgentSets() []*appsv1.DaemonSet {
	return []*appsv1.DaemonSet{workload.Agent(nodeAgentsNamespace, "cni", &startupTaint, false),
		workload.CSIAgent(nodeAgentsNamespace, "csi", driverName, &startupTaint),
		workload.Agent(nodeAgentsNamespace, "logs", &startupTaint, false, "/var/log")}
}

// fault is what a node's driver does.
type fault int

const (
	// slowRegistrar: the driver answers its Probe from the start, and its registrar registers
	// it with kubelet workload.RegistrarDelay later.
	slowRegistrar fault = iota
	// notReadyAfterRegistration: as slowRegistrar, but the driver's Probe answers not ready, and
	// the driver refuses volumes (fakecsi.NotServing), for workload.NotReadyAfterRegistration
	// after the registration.
	notReadyAfterRegistration
	// diesLater: the node starts as with slowRegistrar; once every pod has its volume, the driver
	// stops for outage while its registrar keeps it registered, as when a driver container
	// crashes, and podsPerNode new pods arrive, one every arrivalGap.
	diesLater
	// reboots: the node starts as with slowRegistrar; once every pod has its volume, it goes down
	// without kubelet's graceful shutdown and comes back with a new boot ID (controllers/putback.go).
	reboots
	// shutsDown: as reboots, but through kubelet's graceful shutdown.
	shutsDown
	// rebootsShort: as reboots, but kubelet is back before the node lifecycle controller's grace
	// period, so the node is never marked unreachable and the scheduler keeps placing pods on it.
	rebootsShort
)

// The later death's timings, and continuous mode's threshold.
const (
	outage       = 15 * time.Second
	arrivalGap   = 5 * time.Second
	retaintAfter = 2 * time.Second
)

// workloadCase is one row of the workload tables: a strategy, the kind of volume its pods mount
// and what their driver does.
type workloadCase struct {
	strategy
	// claims mounts PVC-backed volumes (static CSI PersistentVolumes) instead of CSI inline ones.
	claims bool
	fault  fault
}

// workloadCases are the rows, by fault. With a slow registrar, every strategy but "both" runs on
// inline volumes, and the ones the scheduler's check is compared with run on PVC-backed volumes
// too, the only kind it covers; each fault runs the scheduler's check and the agent on both kinds.
var workloadCases = []workloadCase{
	{strategy: noTaint}, {strategy: upstream}, {strategy: answers}, {strategy: defaults}, {strategy: allocatable},
	{strategy: everyAgent}, {strategy: podReadiness},
	{strategy: noTaint, claims: true}, {strategy: upstream, claims: true}, {strategy: defaults, claims: true}, {strategy: both, claims: true},

	{strategy: upstream, fault: notReadyAfterRegistration}, {strategy: defaults, fault: notReadyAfterRegistration},
	{strategy: upstream, claims: true, fault: notReadyAfterRegistration}, {strategy: both, claims: true, fault: notReadyAfterRegistration},

	{strategy: upstream, fault: diesLater}, {strategy: continuous, fault: diesLater},
	{strategy: upstream, claims: true, fault: diesLater}, {strategy: continuous, claims: true, fault: diesLater},
}

// rebooted reports whether the case's fault is a reboot.
func (c workloadCase) rebooted() bool {
	return c.fault == reboots || c.fault == shutsDown || c.fault == rebootsShort
}

// volumes names a case's kind of volume.
func (c workloadCase) volumes() string {
	if c.claims {
		return "PVC-backed"
	}
	return "inline"
}

// caseResult is what one case did to the pods of its nodes.
type caseResult struct {
	workloadCase
	together, nodes int
	// failed counts kubelet's failed mounts after the fault's start; nodesFailed the nodes with at
	// least one; causes are their causes (workload.MountFailures.Causes).
	failed, nodesFailed int
	causes              []string
	// toFirst and toLast run from the fault's start (the Node's creation, the driver's death, or
	// kubelet's return after a reboot) to the first and the last volume published after it;
	// goneToScheduled from the startup taint gone to the node's first pod scheduled.
	toFirst, toLast, goneToScheduled []time.Duration
	// After a reboot: the pods that arrived while the node was down or coming back, those of them
	// placed before the driver answered again, the failed mounts of the others, and, from kubelet's return, when the startup taint
	// was first seen and when the node lifecycle controller's taints were gone (workload.Return),
	// and the window between them in which pods could land (zero when the taint came first).
	// failedLater counts the failed mounts of the other pods, placed once the driver answered.
	arrived, early, failedLater int
	putBack, lifted, windows    []time.Duration
	// requests are the agent's API requests per node, over its start.
	requests []int
	// stalls say why a node waited more than stallAfter for its last volume.
	stalls []string
}

// stallAfter is how long after its start a node's last volume must be published before the
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
	agent      *process
	registrar  *fakecsi.Registrar
	failures   *workload.MountFailures
	created    time.Time
	taintGone  time.Time
	// faultAt is when the measured part of the fault started: the driver's death with diesLater,
	// kubelet's return after a reboot; failedBefore and publishedBefore are the failed mounts and
	// the volumes published before it.
	faultAt                       time.Time
	failedBefore, publishedBefore int
	// After a reboot: the pods that arrived while the node was down or coming back, when the
	// driver answered again, and what WatchReturn saw.
	arrivals   []string
	driverBack time.Time
	returned   workload.Return
	// scheduled is when each of its pods was seen bound to it.
	scheduled map[string]time.Time
}

// start is when the node's fault started (faultAt), or else the Node's creation.
func (n *workloadNode) start() time.Time {
	if !n.faultAt.IsZero() {
		return n.faultAt
	}
	return n.created
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

// measureWorkload runs each case on trials nodes, for each of fleets that many booting at once:
// each node's kubelet (the hollow kubelet) registers it while podsPerNode pods that need the
// driver wait for it, the driver starts with the node, and its registrar registers it with kubelet
// workload.RegistrarDelay later. The real scheduler and node lifecycle controller place the pods;
// a round ends when kubelet has published every pod's volume through the driver.
func measureWorkload(ctx context.Context, e *env, binary string, cases []workloadCase, fleets []int, trials int,
	monitorPeriod time.Duration) ([]caseResult, error) {
	admin, err := e.kubeconfigFor("bench-workload-admin")
	if err != nil {
		return nil, err
	}
	cpLog, err := os.Create(filepath.Join(e.work, "control-plane.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cpLog.Close() }()
	cp, err := workload.StartControlPlaneMonitoring(admin, cpLog, monitorPeriod, "daemonset-controller")
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	defer func() { _ = e.c.Delete(context.Background(), workload.CSIDriver(driverName)) }()

	var results []caseResult
	for _, together := range fleets {
		for ci, c := range cases {
			if err := setCSIDriver(ctx, e, c.preventScheduling); err != nil {
				return nil, err
			}
			if err := setNodeAgents(ctx, e, c.nodeAgents); err != nil {
				return nil, err
			}
			uninstall := func(context.Context) error { return nil }
			if c.crashPolicy {
				if uninstall, err = workload.InstallCrashPolicy(ctx, e.c, startupTaint.Key+":"+string(startupTaint.Effect)); err != nil {
					return nil, err
				}
			}
			res := caseResult{workloadCase: c, together: together}
			for round := 0; res.nodes < trials; round++ {
				names := make([]string, min(together, trials-res.nodes))
				for i := range names {
					names[i] = fmt.Sprintf("workload-%d-%d-%d-%d", together, ci, round, i)
				}
				nodes, err := workloadRound(ctx, e, binary, admin, c, names)
				if err != nil {
					return nil, fmt.Errorf("%s, %s volumes, %d together, round %d: %w", c.name, c.volumes(), together, round, err)
				}
				if err := res.add(e, nodes); err != nil {
					return nil, err
				}
			}
			if err := uninstall(ctx); err != nil {
				return nil, err
			}
			logf("  %d together, %s, %s volumes: %d failed mounts on %d of %d nodes; first volume published p50 %s after the start",
				together, c.name, c.volumes(), res.failed, res.nodesFailed, res.nodes, ms(percentile(res.toFirst, 0.5)))
			results = append(results, res)
		}
	}
	return results, nil
}

// setCSIDriver replaces the driver's CSIDriver with one that sets preventPodSchedulingIfMissing
// or not; the scheduler sees the change through its informer before the next round's pods.
func setCSIDriver(ctx context.Context, e *env, preventScheduling bool) error {
	d := workload.CSIDriver(driverName)
	if preventScheduling {
		d = workload.SchedulerCheckedCSIDriver(driverName)
	}
	if err := client.IgnoreNotFound(e.c.Delete(ctx, workload.CSIDriver(driverName))); err != nil {
		return err
	}
	return e.c.Create(ctx, d)
}

// setNodeAgents creates the node agents' DaemonSets (nodeAgentSets), or deletes them and their
// pods.
func setNodeAgents(ctx context.Context, e *env, on bool) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodeAgentsNamespace}}
	if err := client.IgnoreAlreadyExists(e.c.Create(ctx, ns)); err != nil {
		return err
	}
	for _, ds := range nodeAgentSets() {
		if on {
			if err := client.IgnoreAlreadyExists(e.c.Create(ctx, ds)); err != nil {
				return err
			}
		} else if err := client.IgnoreNotFound(e.c.Delete(ctx, ds)); err != nil {
			return err
		}
	}
	if on {
		return nil
	}
	// No garbage collector runs: the pods go with their DaemonSets by hand.
	return e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(nodeAgentsNamespace), client.GracePeriodSeconds(0))
}

// add records a round's nodes.
func (r *caseResult) add(e *env, nodes []*workloadNode) error {
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
		failed, _ := n.failures.Count()
		r.failed += failed - n.failedBefore
		if failed > n.failedBefore {
			r.nodesFailed++
		}
		for _, c := range n.failures.Causes(n.failedBefore) {
			if !slices.Contains(r.causes, c) {
				r.causes = append(r.causes, c)
			}
		}
		published := n.driver.Published()[n.publishedBefore:]
		first, last := published[0].At, published[len(published)-1].At
		r.toFirst = append(r.toFirst, first.Sub(n.start()))
		r.toLast = append(r.toLast, last.Sub(n.start()))
		if !n.taintGone.IsZero() && n.faultAt.IsZero() {
			r.goneToScheduled = append(r.goneToScheduled, n.firstScheduled().Sub(n.taintGone))
		}
		if r.rebooted() {
			r.addReboot(n)
		}
		if last.Sub(n.start()) > stallAfter {
			stall := fmt.Sprintf("%s: last volume published %s after the start; the scheduler bound its last pod %s after it",
				n.name, last.Sub(n.start()).Round(time.Second), n.lastScheduled().Sub(n.start()).Round(time.Second))
			logf("  %s", stall)
			r.stalls = append(r.stalls, stall)
		}
		if n.user != "" {
			r.requests = append(r.requests, total(requests[n.user]))
		}
	}
	return nil
}

// workloadRound boots one node per name at once under case c, and returns once kubelet has
// published every pod's volume on each, with the agents stopped.
func workloadRound(ctx context.Context, e *env, binary, kubeconfig string, c workloadCase, names []string) ([]*workloadNode, error) {
	nodes := make([]*workloadNode, len(names))
	var err error
	for i, name := range names {
		nodes[i] = &workloadNode{name: name, failures: workload.NewMountFailures(), scheduled: map[string]time.Time{}}
		if c.agentArgs != nil {
			nodes[i].user = "agent-" + name
			// One user per agent, so the audit log tells their requests apart.
			if nodes[i].agentConf, err = e.kubeconfigFor(nodes[i].user); err != nil {
				return nil, err
			}
		}
		for p := range podsPerNode {
			if err := createPod(ctx, e, c, name, fmt.Sprintf("%s-%d", name, p)); err != nil {
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
		go func() { errs <- bootNode(ctx, e, binary, kubeconfig, c, n) }()
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

// createPod creates a pod of case c's kind that needs the driver and may only run on node.
func createPod(ctx context.Context, e *env, c workloadCase, node, name string) error {
	for _, o := range workload.PodObjects(metav1.NamespaceDefault, name, node, driverName, c.claims) {
		if err := e.c.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// bootNode starts a node's kubelet, driver and agent, registers the driver with kubelet
// workload.RegistrarDelay after the driver started, and waits until kubelet has published every
// pod's volume; then, with diesLater, it plays the driver's death, and with a reboot, the
// reboot (rebootNode).
func bootNode(ctx context.Context, e *env, binary, kubeconfig string, c workloadCase, n *workloadNode) error {
	if c.rebooted() && !c.noBootID {
		if err := workload.StampBootID(ctx, e.c, n.name, bootBefore); err != nil {
			return err
		}
	}
	if err := startKubelet(kubeconfig, c, n); err != nil {
		return err
	}
	var err error
	readiness := fakecsi.Ready
	if c.fault == notReadyAfterRegistration {
		readiness = fakecsi.NotReady
	}
	socket := filepath.Join(e.work, n.name+".sock")
	if c.nodeAgents {
		// Where the driver's DaemonSet mounts its plugin directory, under kubelet's root.
		socket = workload.DriverSocket(n.kubelet.RootDir, driverName)
		if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
			return err
		}
	}
	if n.driver, err = fakecsi.Start(socket, driverName, readiness); err != nil {
		return err
	}
	// An attach limit, as the EBS driver publishes: the scheduler requeues a pod its own check
	// kept off only when a CSINode update raises a driver's limit.
	n.driver.SetMaxVolumes(25)
	started := time.Now()
	if err := startNodeAgent(ctx, binary, c, n); err != nil {
		return err
	}
	time.Sleep(time.Until(started.Add(workload.RegistrarDelay)))
	if n.registrar, err = fakecsi.Register(n.kubelet.PluginsRegistry(), driverName, n.driver.Path()); err != nil {
		return err
	}
	if c.fault == notReadyAfterRegistration {
		time.Sleep(workload.NotReadyAfterRegistration)
		n.driver.SetReadiness(fakecsi.Ready)
	}
	if err := waitPublished(ctx, e, n, podsPerNode); err != nil {
		return err
	}
	if c.rebooted() {
		return rebootNode(ctx, e, binary, kubeconfig, c, n)
	}
	if c.fault != diesLater {
		return nil
	}

	n.failedBefore, _ = n.failures.Count()
	n.publishedBefore = len(n.driver.Published())
	n.faultAt = time.Now()
	n.driver.Stop()
	for p := range podsPerNode {
		time.Sleep(time.Until(n.faultAt.Add(time.Duration(p) * arrivalGap)))
		if err := createPod(ctx, e, c, n.name, fmt.Sprintf("%s-late-%d", n.name, p)); err != nil {
			return err
		}
	}
	time.Sleep(time.Until(n.faultAt.Add(outage)))
	if err := n.driver.Restart(); err != nil {
		return err
	}
	return waitPublished(ctx, e, n, 2*podsPerNode)
}

// startKubelet starts the node's kubelet, which registers the Node with the startup taint when
// case c runs an agent.
func startKubelet(kubeconfig string, c workloadCase, n *workloadNode) error {
	var taints []corev1.Taint
	if c.agentArgs != nil {
		taints = []corev1.Taint{startupTaint}
	}
	var err error
	n.kubelet, err = hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: n.name, RegisterWithTaints: taints, Log: n.failures})
	return err
}

// startNodeAgent starts the node's agent under case c, unless c runs none.
func startNodeAgent(ctx context.Context, binary string, c workloadCase, n *workloadNode) error {
	if c.agentArgs == nil {
		return nil
	}
	args := []string{"--kubeconfig=" + n.agentConf, testkit.Unconfined, "--node-name=" + n.name,
		"--plugins-registry=" + n.kubelet.PluginsRegistry(), "--metrics-bind-address=0", "--health-probe-bind-address=0"}
	if !c.nodeAgents {
		args = append(args, "--csi-address="+n.driver.Path())
	}
	var err error
	n.agent, err = startProcess(ctx, nil, nil, binary, append(args, c.agentArgs...)...)
	return err
}

// waitPublished waits until kubelet has published want volumes through the node's driver.
func waitPublished(ctx context.Context, e *env, n *workloadNode, want int) error {
	deadline := time.Now().Add(nodeTimeout)
	for len(n.driver.Published()) < want {
		select {
		case <-n.kubelet.Exited():
			return fmt.Errorf("%s: kubelet exited: %w", n.name, n.kubelet.Err())
		case <-n.agent.done():
			return fmt.Errorf("%s: the agent exited: %s", n.name, n.agent.log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: kubelet published %d of %d volumes in %s (%s)", n.name, len(n.driver.Published()), want,
				nodeTimeout, workload.PodStates(ctx, e.c, metav1.NamespaceDefault, n.name))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// process is a child process the bench runs beside the control plane (an agent, a driver's node
// plugin): the end of its output, and a channel closed once it exits.
type process struct {
	cmd    *exec.Cmd
	log    *tailBuffer
	exited chan struct{}
}

// startProcess starts path with args, and env on top of the bench's own environment; its output
// also goes to out, unless out is nil.
func startProcess(ctx context.Context, env []string, out io.Writer, path string, args ...string) (*process, error) {
	p := &process{cmd: exec.CommandContext(ctx, path, args...), log: &tailBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = io.Writer(p.log)
	if out != nil {
		p.cmd.Stdout = io.MultiWriter(p.log, out)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(path), err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

// done is closed once the process exits; for no process (nil), it is nil, which never is.
func (p *process) done() <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.exited
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.done():
		return false
	default:
		return true
	}
}

// stop ends the process with SIGTERM and waits until it exits; it does nothing for nil.
func (p *process) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
}

// tailBuffer keeps the last 4 KiB written to it: the end of an agent's log, for an error.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 4096; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// stopAgents stops every agent, so the audit log holds all of their requests.
func stopAgents(nodes []*workloadNode) {
	for _, n := range nodes {
		stopAgent(n)
	}
}

// stopAgent stops the node's agent, if it runs one, and waits until it exits.
func stopAgent(n *workloadNode) {
	n.agent.stop()
	n.agent = nil
}

// cleanUpRound stops what a round started and deletes what it left (deleteRound).
func cleanUpRound(e *env, nodes []*workloadNode) {
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
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	deleteRound(e, names)
}

// deleteRound deletes what a round on the named nodes leaves in the API server: the pods, claims
// and volumes of the default namespace, and each node's boot ID policy, Node and CSINode, so the
// next round starts on an empty cluster.
func deleteRound(e *env, nodes []string) {
	ctx := context.Background()
	_ = e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(metav1.NamespaceDefault), client.GracePeriodSeconds(0))
	// The claims and volumes go once the protection controllers see no pod using them.
	_ = e.c.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(metav1.NamespaceDefault))
	_ = e.c.DeleteAllOf(ctx, &corev1.PersistentVolume{})
	for _, name := range nodes {
		_ = workload.UnstampBootID(ctx, e.c, name)
		_ = e.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		_ = e.cs.StorageV1().CSINodes().Delete(ctx, name, metav1.DeleteOptions{})
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

// faultReports are the workload tables' headings and what each measures from, by fault.
var faultReports = []struct {
	fault                 fault
	heading, start, intro string
}{
	{slowRegistrar, "A slow registrar", "created", fmt.Sprintf("The driver answers its Probe from the start; its registrar "+
		"registers it with kubelet %s later, as a slow node-driver-registrar does.", workload.RegistrarDelay)},
	{notReadyAfterRegistration, "The driver's Probe not ready after its registration", "created", fmt.Sprintf("The registrar "+
		"registers the driver %s after it starts, but the driver answers its Probe not ready, and refuses to publish volumes, "+
		"until %s later, as a driver still initializing (reaching its cloud's API, loading a module) does.",
		workload.RegistrarDelay, workload.NotReadyAfterRegistration)},
	{diesLater, "The driver dies later", "driver died", fmt.Sprintf("The node starts as above; once every pod has its volume, "+
		"the driver stops for %s while its registrar keeps it registered with kubelet, as when the driver's container crashes, "+
		"and %d new pods arrive, one every %s from its death. Times run from its death, to the new pods' volumes.",
		outage, podsPerNode, arrivalGap)},
}

// workloadMarkdown reports the cases side by side, one table per fault.
func workloadMarkdown(results []caseResult, machine string, elapsed time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# Pods that need the driver, by removal strategy")
	p("")
	p("Machine: %s. Whole run: %s (`make bench`). Each node is a hollow kubelet v1.37.2 (kubelet's real CSI volume", machine,
		elapsed.Round(time.Second))
	p("path, with a fake mounter), placed on by the real kube-scheduler and kube-controller-manager (node lifecycle, taint")
	p("eviction, the PersistentVolume binder, and the DaemonSet controller for the node agents' DaemonSets), against an envtest API server on the same machine. %d pods per node wait", podsPerNode)
	p("before the node joins, each with a `nodeSelector` for it and a volume of the driver: a CSI inline volume, or a")
	p("PVC-backed one (a static CSI PersistentVolume bound to its claim). The driver publishes an attach limit, as the EBS")
	p("driver does. A node's run ends when kubelet has published every pod's volume through the driver (`NodePublishVolume`).")
	p("")
	p("- **failed mounts**: kubelet's log lines of a failed mount step of the driver's volumes (`MountVolume.MountDevice failed`")
	p("  for a PVC-backed volume's staging, `MountVolume.SetUp failed` for a publish; the hollow kubelet's events never reach")
	p("  the API server), on how many nodes, and their causes.")
	p("- **→ first / last volume published**: from the watch event of the Node's creation (or the driver's death) to the")
	p("  driver's first and last publish.")
	p("- **taint gone → first pod scheduled**: from the watch event without the startup taint to the first pod bound to the")
	p("  node; the scheduler also waits for the node lifecycle controller to lift kubelet's `not-ready` taint.")
	p("- **API requests per node**: the agent's, from its start until every node of its round has its volumes, from the audit log.")
	p("")
	p("The same strategies across a node's reboot, with and without kubelet's graceful shutdown: [reboot.md](reboot.md).")
	for _, f := range faultReports {
		p("")
		p("## %s", f.heading)
		p("")
		p("%s", f.intro)
		p("")
		p("| strategy | volumes | nodes together | nodes | failed mounts (nodes) | %s → first volume published p50 / p95 / p99 | "+
			"%s → last volume published p50 / p95 / p99 | taint gone → first pod scheduled p50 / p95 / p99 | API requests per node (median) |",
			f.start, f.start)
		p("|---|---|---|---|---|---|---|---|---|")
		for _, r := range results {
			if r.fault != f.fault {
				continue
			}
			failed := fmt.Sprintf("**%d** (%d)", r.failed, r.nodesFailed)
			for _, c := range r.causes {
				failed += fmt.Sprintf(", %q", c)
			}
			gone, requests := "-", "no agent"
			if len(r.goneToScheduled) > 0 {
				gone = triple(r.goneToScheduled)
			}
			if len(r.requests) > 0 {
				slices.Sort(r.requests)
				requests = fmt.Sprint(r.requests[len(r.requests)/2])
			}
			p("| %s | %s | %d | %d | %s | %s | %s | %s | %s |", r.name, r.volumes(), r.together, r.nodes, failed,
				triple(r.toFirst), triple(r.toLast), gone, requests)
		}
	}
	var stalls []string
	for _, r := range results {
		for _, s := range r.stalls {
			stalls = append(stalls, fmt.Sprintf("- %s, %s volumes, %d together: %s", r.name, r.volumes(), r.together, s))
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
