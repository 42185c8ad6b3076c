// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// The reboot scenario's strategies beside the scheduler's check: the defaults and continuous mode
// as they were before the agent recorded boots (the Node reports no boot ID, so the agent cannot
// tell a reboot), and the defaults with the boot record. Each names its taint, as every install
// renders it: after a reboot the agent must know it before the driver tells its name.
var (
	taintArg        = "--taint=" + startupTaint.Key + ":" + string(startupTaint.Effect)
	blind           = strategy{name: "default, before the boot record (no boot ID)", agentArgs: []string{taintArg}, noBootID: true}
	continuousBlind = strategy{name: "continuous mode (`--retaint-after=" + retaintAfter.String() + "`), before the boot record (no boot ID)",
		agentArgs: []string{taintArg, "--retaint-after=" + retaintAfter.String()}, noBootID: true}
	bootRecord  = strategy{name: "default, with the boot record (kubelet reports its boot ID)", agentArgs: []string{taintArg}}
	crashPolicy = strategy{name: "default, with the boot record and the crash policy (1.36 on)", agentArgs: []string{taintArg}, crashPolicy: true}
)

// rebootCases are the reboot table's rows: the scheduler's check on PVC-backed volumes (the only
// kind it covers), each agent strategy across a reboot without kubelet's graceful shutdown, and the
// boot record across one with it, on both kinds of volume.
var rebootCases = []workloadCase{
	{strategy: upstream, claims: true, fault: reboots},
	{strategy: blind, fault: reboots}, {strategy: continuousBlind, fault: reboots}, {strategy: bootRecord, fault: reboots},
	{strategy: crashPolicy, fault: reboots}, {strategy: crashPolicy, fault: rebootsShort},
	{strategy: bootRecord, fault: shutsDown}, {strategy: bootRecord, claims: true, fault: shutsDown},
}

// Boot IDs before and after the reboot, stamped as kubelet's status setter writes the host's.
const bootBefore, bootAfter = "boot-1", "boot-2"

// Once the node is known to be down, pods arrive every arrivalEvery, for downFor before kubelet's
// return and until arrivalsAfter after the driver's.
const (
	arrivalEvery  = time.Second
	downFor       = 3 * time.Second
	arrivalsAfter = 5 * time.Second
	// shortDownFor is how long a short reboot keeps kubelet away: well within the node lifecycle
	// controller's grace period (--node-monitor-grace-period, 50 s by default).
	shortDownFor = 10 * time.Second
)

// rebootNode plays a rolling OS upgrade's reboot on a node whose pods have their volumes. With
// shutsDown, kubelet's graceful shutdown comes first: its Ready condition says so, then the agent
// and the registrar stop while kubelet runs, so kubelet unregisters the driver. The node's pods
// go, as a drain evicts them, and kubelet, the driver and the agent stop until the node lifecycle
// controller marks the node unreachable. From then a pod arrives every arrivalEvery; kubelet and
// the agent start again at once with a new boot ID, the driver and its registrar
// workload.RegistrarDelay later, and the arrivals end arrivalsAfter after the driver is back. The
// node's run ends once kubelet has published every arrival's volume.
func rebootNode(ctx context.Context, e *env, binary, kubeconfig string, c workloadCase, n *workloadNode) error {
	n.failedBefore, _ = n.failures.Count()
	n.publishedBefore = len(n.driver.Published())
	if c.fault == shutsDown {
		if err := workload.ShutDown(ctx, e.c, n.name); err != nil {
			return err
		}
	}
	stopAgent(n)
	if c.fault == shutsDown {
		// The registrar removes its socket as it stops; kubelet, still running, takes the driver
		// out of CSINode (pkg/volume/csi/nodeinfomanager).
		n.registrar.Unregister()
		if err := pollUntil(ctx, n.name+": the driver out of CSINode", func(ctx context.Context) bool {
			cn, err := e.cs.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
			return err == nil && !listsDriver(cn)
		}); err != nil {
			return err
		}
	}
	if err := e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingFields{"spec.nodeName": n.name}, client.GracePeriodSeconds(0)); err != nil {
		return err
	}
	n.driver.Stop()
	n.kubelet.Stop()
	n.registrar.Unregister() // its process is gone with the boot; no kubelet saw it go
	down := downFor
	if c.fault == rebootsShort {
		// Nothing marks the node: pods arrive from the moment it goes down.
		down = shortDownFor
	} else if err := waitUnreachable(ctx, e, n.name); err != nil {
		return err
	}

	stopArrivals := arrive(n.name, func(name string) error { return createPod(ctx, e, c, n.name, name) })
	var returned <-chan workload.Return
	err := func() error {
		if !c.noBootID {
			if err := workload.StampBootID(ctx, e.c, n.name, bootAfter); err != nil {
				return err
			}
		}
		time.Sleep(down)
		n.faultAt = time.Now()
		returned = workload.WatchReturn(ctx, e.c, n.name, startupTaint.Key, n.faultAt)
		if err := startKubelet(kubeconfig, c, n); err != nil {
			return err
		}
		if c.fault != shutsDown {
			// A crash leaves the registrar's socket on disk (a graceful stop removes it); kubemark
			// makes a new root directory at every start, so it is put there.
			if err := fakecsi.LeaveStaleRegistration(n.kubelet.PluginsRegistry(), driverName); err != nil {
				return err
			}
		}
		if err := startNodeAgent(ctx, binary, c, n); err != nil {
			return err
		}
		time.Sleep(workload.RegistrarDelay)
		if err := n.driver.Restart(); err != nil {
			return err
		}
		n.driverBack = time.Now()
		var err error
		if n.registrar, err = fakecsi.Register(n.kubelet.PluginsRegistry(), driverName, n.driver.Path()); err != nil {
			return err
		}
		time.Sleep(arrivalsAfter)
		return nil
	}()
	var arrivalErr error
	n.arrivals, arrivalErr = stopArrivals()
	if err := errors.Join(err, arrivalErr); err != nil {
		return err
	}
	n.returned = <-returned
	return waitPublished(ctx, e, n, n.publishedBefore+len(n.arrivals))
}

// pollUntil polls done every 100 ms for up to 2 minutes, and names what it waited for if it never
// came.
// waitUnreachable waits until the node lifecycle controller marks node unreachable.
func waitUnreachable(ctx context.Context, e *env, node string) error {
	return pollUntil(ctx, node+": unreachable", func(ctx context.Context) bool {
		n := &corev1.Node{}
		return e.c.Get(ctx, client.ObjectKey{Name: node}, n) == nil && hasKey(n, corev1.TaintNodeUnreachable)
	})
}

// arrive creates a pod that needs the driver on node every arrivalEvery, named NODE-after-K, with
// create, until the function it returns is called; that returns the pods made and the error that
// stopped them early, if one did.
func arrive(node string, create func(name string) error) func() ([]string, error) {
	stop, done := make(chan struct{}), make(chan error, 1)
	var made []string
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(arrivalEvery):
				name := fmt.Sprintf("%s-after-%d", node, len(made))
				if err := create(name); err != nil {
					done <- err
					return
				}
				made = append(made, name)
			}
		}
	}()
	return func() ([]string, error) {
		close(stop)
		err := <-done
		return made, err
	}
}

func pollUntil(ctx context.Context, what string, done func(context.Context) bool) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return done(ctx), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// addReboot records what a reboot did to the pods that arrived while the node was down or
// coming back.
func (r *caseResult) addReboot(n *workloadNode) {
	r.arrived += len(n.arrivals)
	failed := n.failures.Pods()
	for _, name := range n.arrivals {
		if at, ok := n.scheduled[name]; ok && at.Before(n.driverBack) {
			r.early++
		} else {
			r.failedLater += failed[name]
		}
	}
	ret := n.returned
	if ret.PutBack > 0 {
		r.putBack = append(r.putBack, ret.PutBack)
	}
	if ret.Lifted > 0 {
		r.lifted = append(r.lifted, ret.Lifted)
	}
	if ret.PutBack > 0 && ret.Lifted > 0 {
		r.windows = append(r.windows, max(0, ret.PutBack-ret.Lifted))
	}
}

// rebootMarkdown reports the reboot cases side by side.
func rebootMarkdown(results []caseResult, machine string, elapsed time.Duration, monitorPeriod time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# Pods that need the driver after a reboot, by strategy")
	p("")
	p("Machine: %s. Whole run: %s (`make bench`). The path is [workload.md](workload.md)'s: hollow kubelets v1.37.2,", machine,
		elapsed.Round(time.Second))
	p("the real kube-scheduler and kube-controller-manager (the node lifecycle controller's `--node-monitor-period=%s`; clusters", monitorPeriod)
	p("run 5s), an envtest API server. Each reboot is a rolling OS upgrade's:")
	p("a node boots as there (%d pods, a registrar %s late) and, once its pods have their volumes, goes down:", podsPerNode, workload.RegistrarDelay)
	p("")
	p("- **without** kubelet's graceful shutdown: its pods go (as a drain evicts them), and kubelet, the driver, its registrar")
	p("  and the agent stop, leaving the driver in CSINode and the registrar's socket on disk;")
	p("- **graceful**: first as kubelet's shutdown manager does (its Ready condition False with \"node is shutting down\"),")
	p("  the agent and the registrar stop while kubelet runs, and kubelet takes the driver out of CSINode; then as above;")
	p("- **back within the grace period**: as without, but kubelet is back %s after it went, before the node lifecycle", shortDownFor)
	p("  controller marks the node unreachable: nothing writes the Node's spec, and pods arrive from the moment it goes down.")
	p("")
	p("Once the node lifecycle controller marks it unreachable, a pod that needs the driver arrives every %s. %s later,", arrivalEvery, downFor)
	p("kubelet and the agent start again at once, with a new boot ID (kubemark reports none, so an admission policy writes")
	p("it into kubelet's writes as kubelet's status setter copies the host's), and the driver and its registrar %s", workload.RegistrarDelay)
	p("later; pods keep arriving until %s after the driver is back. Only those pods count.", arrivalsAfter)
	p("")
	p("- **placed early**: pods bound to the node before the driver answered again.")
	p("- **failed mounts**: kubelet's log lines of a failed mount step of those pods' volumes, on how many reboots, and why;")
	p("  **of pods placed later**: those of pods placed once the driver answered again, which only a gate that lets the taint go")
	p("  before kubelet has registered the driver causes.")
	p("- **taint on**: from kubelet's return to the startup taint first seen on the Node (0 when it was already there).")
	p("- **node lifecycle taints gone**: from kubelet's return until neither `unreachable` nor `not-ready` is on the Node,")
	p("  when the scheduler may place pods again.")
	p("- **window**: how long the node could take pods before the startup taint was on it (0 when the taint came first).")
	p("")
	p("| strategy | volumes | shutdown | reboots | pods arrived | placed early | failed mounts (reboots) | of pods placed later | " +
		"taint on p50 / p95 / p99 | node lifecycle taints gone p50 / p95 / p99 | window p50 / p95 / p99 | " +
		"kubelet back → last volume published p50 / p95 / p99 | API requests per node (median) |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		shutdown := "without"
		switch r.fault {
		case shutsDown:
			shutdown = "graceful"
		case rebootsShort:
			shutdown = "without, back within the grace period"
		}
		failed := fmt.Sprintf("**%d** (%d)", r.failed, r.nodesFailed)
		for _, c := range r.causes {
			failed += fmt.Sprintf(", %q", c)
		}
		on, window, requests := "never", "-", "no agent"
		if len(r.putBack) > 0 {
			on = triple(r.putBack)
			if len(r.putBack) < r.nodes {
				on += fmt.Sprintf(" (%d of %d)", len(r.putBack), r.nodes)
			}
		}
		if len(r.windows) > 0 {
			window = triple(r.windows)
		}
		if len(r.requests) > 0 {
			slices.Sort(r.requests)
			requests = fmt.Sprint(r.requests[len(r.requests)/2])
		}
		p("| %s | %s | %s | %d | %d | **%d** | %s | **%d** | %s | %s | %s | %s | %s |", r.name, r.volumes(), shutdown, r.nodes, r.arrived, r.early,
			failed, r.failedLater, on, triple(r.lifted), window, triple(r.toLast), requests)
	}
	return b.String()
}
