// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command demo runs startup-taint-remover end to end on a local control plane: an envtest API
// server with the real scheduler and node lifecycle controller, a real kubelet (kubemark's hollow
// node) that registers its Node with a startup taint, a demo CSI driver on a Unix socket that
// registers with kubelet as node-driver-registrar does, the real binary, and a pod that needs the
// driver's volume. It prints each step with the time it took, and what happened to the pod: held
// while the taint was on, then scheduled, and its volume mounted without a failed attempt.
// `make demo` runs it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

const (
	nodeName     = "demo-node"
	driverName   = "ebs.csi.aws.com"
	podNamespace = "default"
	podName      = "demo-app"
)

// dedicated is the node's other taint, which the demo's pod tolerates: the agent leaves it alone.
var dedicated = corev1.Toleration{Key: "example.com/dedicated", Operator: corev1.TolerationOpEqual, Value: "storage",
	Effect: corev1.TaintEffectNoSchedule}

func main() {
	binary := flag.String("binary", "bin/startup-taint-remover", "path of the startup-taint-remover binary")
	flag.Parse()
	if err := run(*binary); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

// step prints what is about to happen and, when done is called, how long it took.
func step(format string, args ...any) (done func()) {
	start := time.Now()
	fmt.Printf("==> "+format+"\n", args...)
	return func() { fmt.Printf("    done in %s\n", time.Since(start).Round(time.Millisecond)) }
}

func run(binary string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	work, err := os.MkdirTemp("", "startup-taint-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	done := step("starting a local control plane (envtest kube-apiserver and etcd)")
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting envtest (run `make envtest`, or set KUBEBUILDER_ASSETS): %w", err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := testkit.WriteKubeconfig(env, envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, kubeconfig); err != nil {
		return err
	}
	done()

	done = step("starting kube-scheduler and kube-controller-manager (node lifecycle, taint eviction, PV binder)")
	cp, err := workload.StartControlPlane(kubeconfig, io.Discard)
	if err != nil {
		return err
	}
	defer cp.Stop()
	done()

	done = step("creating pod %s/%s, which mounts an inline volume of %s and may only run on %s", podNamespace, podName, driverName, nodeName)
	if err := c.Create(ctx, workload.CSIDriver(driverName)); err != nil {
		return err
	}
	pod := workload.Pod(podNamespace, podName, nodeName, driverName, dedicated)
	if err := c.Create(ctx, pod); err != nil {
		return err
	}
	done()

	startup := corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	failures := workload.NewMountFailures()
	done = step("starting kubelet (kubemark's hollow node), which registers node %s with its startup taint and another taint", nodeName)
	kubelet, err := startKubelet(work, kubeconfig, failures, startup)
	if err != nil {
		return err
	}
	defer kubelet.Stop()
	if err := waitFor(ctx, func() bool { return c.Get(ctx, client.ObjectKey{Name: nodeName}, &corev1.Node{}) == nil }); err != nil {
		return fmt.Errorf("kubelet did not register its Node: %w", err)
	}
	done()
	if err := printTaints(ctx, c, "as kubelet registered it"); err != nil {
		return err
	}

	metricsAddr, err := testkit.FreeAddr()
	if err != nil {
		return err
	}
	done = step("starting %s (it waits for the driver, and for kubelet to register it in CSINode); it runs as an admin, "+
		"with no admission policy, so it is not confined (--require-confinement=false)", binary)
	cmd := exec.CommandContext(ctx, binary,
		"--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+nodeName, "--csi-address="+filepath.Join(work, "csi.sock"),
		// Plain HTTP on loopback, so the demo can read the metrics without a token.
		"--metrics-bind-address="+metricsAddr, "--metrics-secure=false", "--health-probe-bind-address=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	logsDone := make(chan struct{})
	go func() { defer close(logsDone); indent(stderr) }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	done()

	done = step("starting the demo CSI driver %s on a Unix socket", driverName)
	driver, err := fakecsi.Start(filepath.Join(work, "csi.sock"), driverName, fakecsi.Ready)
	if err != nil {
		return err
	}
	defer driver.Stop()
	if err := waitFor(ctx, func() bool { return driver.Probes() > 0 }); err != nil {
		return fmt.Errorf("the binary never probed the driver: %w", err)
	}
	done()
	if err := printPending(ctx, c); err != nil {
		return err
	}
	if err := printTaints(ctx, c, "driver ready, not yet registered with kubelet"); err != nil {
		return err
	}

	done = step("registering the driver with kubelet through its plugins registry, as node-driver-registrar does")
	registering := time.Now()
	reg, err := fakecsi.Register(kubelet.PluginsRegistry(), driverName, driver.Path())
	if err != nil {
		return err
	}
	defer reg.Unregister()
	gone, err := timeRemoval(ctx, c, registering, startup)
	if err != nil {
		return err
	}
	done()
	if err := printTaints(ctx, c, "after"); err != nil {
		return err
	}

	done = step("waiting for the scheduler to place the pod, and for kubelet to mount its volume through the driver")
	if err := timePod(ctx, c, driver, failures, gone); err != nil {
		return err
	}
	done()

	if err := printMetrics(ctx, metricsAddr); err != nil {
		return err
	}

	done = step("stopping the binary with SIGTERM and cleaning up")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-logsDone
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("the binary did not exit cleanly: %w", err)
	}
	done()
	return nil
}

// startKubelet starts kubemark's hollow kubelet, logging to a file in work and to failures,
// registering its Node with the startup taint and another one.
func startKubelet(work, kubeconfig string, failures io.Writer, startup corev1.Taint) (*hollowkubelet.Kubelet, error) {
	kubeletLog, err := os.Create(filepath.Join(work, "kubelet.log"))
	if err != nil {
		return nil, err
	}
	kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: nodeName,
		Log:                io.MultiWriter(kubeletLog, failures),
		RegisterWithTaints: []corev1.Taint{startup, {Key: dedicated.Key, Value: dedicated.Value, Effect: dedicated.Effect}}})
	if err != nil {
		_ = kubeletLog.Close()
		return nil, err
	}
	return kubelet, nil
}

// timeRemoval waits for kubelet to write the driver into CSINode and for the startup taint to go,
// prints how long each took, and returns when the taint went.
func timeRemoval(ctx context.Context, c client.Client, registering time.Time, startup corev1.Taint) (time.Time, error) {
	var written time.Time
	if err := waitFor(ctx, func() bool {
		cn := &storagev1.CSINode{}
		if c.Get(ctx, client.ObjectKey{Name: nodeName}, cn) != nil {
			return false
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == driverName {
				written = time.Now()
				return true
			}
		}
		return false
	}); err != nil {
		return time.Time{}, fmt.Errorf("kubelet did not register the driver: %w", err)
	}
	fmt.Printf("    kubelet wrote the driver into CSINode %s after the registrar started\n", written.Sub(registering).Round(time.Millisecond))
	if err := waitFor(ctx, func() bool {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: nodeName}, n); err != nil {
			return false
		}
		for _, t := range n.Spec.Taints {
			if t.Key == startup.Key {
				return false
			}
		}
		return true
	}); err != nil {
		return time.Time{}, fmt.Errorf("the startup taint was not removed: %w", err)
	}
	gone := time.Now()
	fmt.Printf("    startup taint removed %s after kubelet's CSINode write\n", gone.Sub(written).Round(time.Millisecond))
	return gone, nil
}

// printPending waits until the node lifecycle controller has lifted kubelet's not-ready taint,
// so that only the startup taint keeps the pod off the node, and prints the scheduler's reason.
func printPending(ctx context.Context, c client.Client) error {
	if err := waitFor(ctx, func() bool {
		n := &corev1.Node{}
		return c.Get(ctx, client.ObjectKey{Name: nodeName}, n) == nil && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeNotReady
		})
	}); err != nil {
		return fmt.Errorf("the node lifecycle controller did not lift kubelet's not-ready taint: %w", err)
	}
	fmt.Printf("    the node lifecycle controller lifted %s: the node is Ready\n", corev1.TaintNodeNotReady)
	pod := &corev1.Pod{}
	var reason string
	if err := waitFor(ctx, func() bool {
		if c.Get(ctx, client.ObjectKey{Namespace: podNamespace, Name: podName}, pod) != nil {
			return false
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "untolerated taint") {
				reason = cond.Message
				return true
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("the scheduler did not consider the pod: %w", err)
	}
	fmt.Printf("    pod %s: %s, not scheduled: %s\n", podName, pod.Status.Phase, reason)
	return nil
}

// timePod waits until the pod is scheduled and kubelet has published its volume through the
// driver, and prints when each happened after the taint went, and how many mounts failed.
func timePod(ctx context.Context, c client.Client, driver *fakecsi.Driver, failures *workload.MountFailures, gone time.Time) error {
	var scheduled time.Time
	if err := waitFor(ctx, func() bool {
		pod := &corev1.Pod{}
		if c.Get(ctx, client.ObjectKey{Namespace: podNamespace, Name: podName}, pod) != nil || pod.Spec.NodeName == "" {
			return false
		}
		scheduled = time.Now()
		return true
	}); err != nil {
		return fmt.Errorf("the scheduler did not place the pod: %w", err)
	}
	fmt.Printf("    pod %s scheduled to %s %s after the taint went\n", podName, nodeName, scheduled.Sub(gone).Round(time.Millisecond))
	if err := waitFor(ctx, func() bool { return len(driver.Published()) > 0 }); err != nil {
		return fmt.Errorf("kubelet did not mount the pod's volume: %w", err)
	}
	published := driver.Published()[0]
	fmt.Printf("    kubelet published its volume through the driver (NodePublishVolume) %s after the taint went\n",
		published.At.Sub(gone).Round(time.Millisecond))
	failed, examples := failures.Count()
	fmt.Printf("    %d failed mounts\n", failed)
	if failed > 0 {
		return fmt.Errorf("kubelet failed %d mounts, first: %s", failed, examples[0])
	}
	return nil
}

func printTaints(ctx context.Context, c client.Client, when string) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: nodeName}, n); err != nil {
		return err
	}
	fmt.Printf("    taints of %s (%s):\n", nodeName, when)
	for _, t := range n.Spec.Taints {
		fmt.Printf("      - %s\n", t.ToString())
	}
	return nil
}

// printMetrics prints the metrics that matter from the binary's metrics endpoint: whether the
// taint is present, the removals, and how long the node waited.
func printMetrics(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	fmt.Printf("    metrics from http://%s/metrics:\n", addr)
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		for _, prefix := range []string{"startup_taint_present", "startup_taint_removals_total", "startup_taint_removal_seconds_sum",
			"startup_taint_removal_seconds_count", "startup_taint_ready_to_removed_seconds_sum", "startup_taint_ready_to_removed_seconds_count"} {
			if strings.HasPrefix(line, prefix) {
				fmt.Println("      " + line)
			}
		}
	}
	return s.Err()
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// indent copies the binary's log lines to stdout, marked as its own.
func indent(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		fmt.Println("    | " + strings.TrimSpace(s.Text()))
	}
}
