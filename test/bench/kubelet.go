// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// kubeletResult is the start sequence measured with the real kubelet: per trial, from the driver's
// start (with its registrar) to kubelet's CSINode write, from that write to the taint's removal,
// and from the driver's start to the removal.
type kubeletResult struct {
	registration, writeToGone, startToGone []time.Duration
}

// measureKubelet runs the real start sequence trials times against one hollow kubelet: the agent
// (the real binary, default --probe-interval) is running and the Node carries the startup taint;
// then the driver starts with its registrar, kubelet registers it and writes the CSINode entry,
// and the agent removes the taint. Each trial ends by unregistering the driver and re-adding the
// taint. Times come from the watch events that show each write.
func measureKubelet(ctx context.Context, e *env, binary string, trials int) (*kubeletResult, error) {
	const name = "bench-kubelet"
	kubeconfig, err := e.kubeconfigFor("bench-kubelet")
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(e.work, "kubelet.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	startup := corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: name,
		RegisterWithTaints: []corev1.Taint{startup}, Log: log})
	if err != nil {
		return nil, err
	}
	defer kubelet.Stop()

	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	nodes, err := e.cs.CoreV1().Nodes().Watch(ctx, byName)
	if err != nil {
		return nil, err
	}
	defer nodes.Stop()
	csiNodes, err := e.cs.StorageV1().CSINodes().Watch(ctx, byName)
	if err != nil {
		return nil, err
	}
	defer csiNodes.Stop()
	nodeEvents, csiNodeEvents := stamped(nodes.ResultChan()), stamped(csiNodes.ResultChan())

	agentKubeconfig, err := e.kubeconfigFor("bench-kubelet-agent")
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(e.work, "kubelet-driver.sock")
	agent := exec.CommandContext(ctx, binary, "--kubeconfig="+agentKubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+socket,
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
	agent.Stderr = log
	if err := agent.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = agent.Process.Signal(syscall.SIGTERM); _ = agent.Wait() }()

	res := &kubeletResult{}
	for i := range trials {
		if _, err := waitFor(ctx, nodeEvents, "the taint", func(n *corev1.Node) bool { return hasKey(n, startup.Key) }); err != nil {
			return nil, fmt.Errorf("trial %d: the taint is not there: %w", i, err)
		}
		start := time.Now()
		driver, err := fakecsi.Start(socket, driverName, fakecsi.Ready)
		if err != nil {
			return nil, err
		}
		reg, err := fakecsi.Register(kubelet.PluginsRegistry(), driverName, socket)
		if err != nil {
			driver.Stop()
			return nil, err
		}
		written, err := waitFor(ctx, csiNodeEvents, "kubelet's registration", listsDriver)
		if err == nil {
			var gone time.Time
			gone, err = waitFor(ctx, nodeEvents, "the taint's removal", func(n *corev1.Node) bool { return !hasKey(n, startup.Key) })
			res.registration = append(res.registration, written.Sub(start))
			res.writeToGone = append(res.writeToGone, max(0, gone.Sub(written)))
			res.startToGone = append(res.startToGone, gone.Sub(start))
		}
		reg.Unregister()
		driver.Stop()
		if err != nil {
			return nil, fmt.Errorf("trial %d: %w", i, err)
		}
		if _, err := waitFor(ctx, csiNodeEvents, "kubelet's deregistration", func(cn *storagev1.CSINode) bool { return !listsDriver(cn) }); err != nil {
			return nil, fmt.Errorf("trial %d: kubelet did not unregister the driver: %w", i, err)
		}
		if err := testkit.UpdateNode(ctx, e.c, name, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, startup)
		}); err != nil {
			return nil, err
		}
		if (i+1)%50 == 0 {
			logf("  %d trials: kubelet registration p50 %s, its CSINode write to taint gone p50 %s",
				i+1, percentile(res.registration, 0.5), percentile(res.writeToGone, 0.5))
		}
	}
	return res, nil
}

// stampedEvent is a watch event and when it arrived.
type stampedEvent struct {
	watch.Event
	at time.Time
}

// stamped timestamps each event as it arrives, so a trial that is busy waiting for another
// watch's event does not delay this one's time.
func stamped(events <-chan watch.Event) <-chan stampedEvent {
	out := make(chan stampedEvent, 100)
	go func() {
		defer close(out)
		for ev := range events {
			out <- stampedEvent{Event: ev, at: time.Now()}
		}
	}()
	return out
}

func hasKey(n *corev1.Node, key string) bool {
	return len(startuptaint.MatchingTaints(n.Spec.Taints, []startuptaint.TaintSpec{{Key: key}})) > 0
}

// waitFor waits for an event whose object satisfies cond and returns when it arrived; the watch
// starts with the current state, so a state already reached is seen too.
func waitFor[T any](ctx context.Context, events <-chan stampedEvent, what string, cond func(T) bool) (time.Time, error) {
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return time.Time{}, fmt.Errorf("the watch ended before %s", what)
			}
			if obj, isT := ev.Object.(T); isT && cond(obj) {
				return ev.at, nil
			}
		case <-timeout:
			return time.Time{}, fmt.Errorf("timed out waiting for %s", what)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// listsDriver reports whether the CSINode lists the bench's driver.
func listsDriver(cn *storagev1.CSINode) bool { return listsDriverNamed(cn, driverName) }

// listsDriverNamed reports whether the CSINode lists the driver of that name.
func listsDriverNamed(cn *storagev1.CSINode, name string) bool {
	return slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
}

// markdown reports the start sequence with the real kubelet.
func (k *kubeletResult) markdown(machine string, elapsed time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# The start sequence with the real kubelet")
	p("")
	p("Machine: %s. kubemark's hollow kubelet v1.37.2 and the real binary (default --probe-interval=1s) against an envtest", machine)
	p("control plane on the same machine; %d trials in %s (`make bench`). Each trial starts the driver and its registrar while", len(k.registration), elapsed.Round(time.Second))
	p("the agent holds the startup taint; the times come from the watch events that show kubelet's CSINode write and the")
	p("taint's removal.")
	p("")
	p("| from | to | p50 | p95 | p99 | target | |")
	p("|---|---|---|---|---|---|---|")
	row := func(from, to string, s []time.Duration, target, verdict string) {
		p("| %s | %s | %s | %s | %s | %s | %s |", from, to, ms(percentile(s, 0.5)), ms(percentile(s, 0.95)), ms(percentile(s, 0.99)), target, verdict)
	}
	row("driver and registrar start", "kubelet's CSINode write (kubelet's own registration)", k.registration, "", "")
	row("kubelet's CSINode write", "taint gone", k.writeToGone, "p99 < 100 ms", verdict(percentile(k.writeToGone, 0.99) < 100*time.Millisecond))
	over := percentile(k.startToGone, 0.99) - percentile(k.registration, 0.99)
	row("driver and registrar start", "taint gone", k.startToGone,
		fmt.Sprintf("at most 100 ms above kubelet's registration (p99: %s above)", ms(over)), verdict(over <= 100*time.Millisecond))
	return b.String()
}
