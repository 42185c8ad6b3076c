// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// memSample is one agent process, measured once its cache has synced.
type memSample struct {
	vmRSS, rssAnon, heap float64 // bytes
	requests             map[string]int
}

// memResult is the median of the samples of one design at one cluster size.
type memResult struct {
	design string
	nodes  int
	memSample
}

// idleResult counts what agents asked the API server while nothing changed.
type idleResult struct {
	design           string
	nodes            int
	period           time.Duration
	requests         map[string]int
	rssStart, rssEnd float64
	// anonStart and anonEnd are RssAnon at the start and at the end of the idle period.
	anonStart, anonEnd float64
}

const agentNode = "bench-agent"

// The designs compared.
const (
	designOurs     = "startup-taint-remover"
	designBaseline = "baseline (caches all Nodes)"
	designFloor    = "floor (controller-runtime, one Node)"
)

// realisticNode looks like a Node a kubelet registers: labels, taints, capacity, conditions,
// addresses and a list of images, about 5 KiB of JSON.
func realisticNode(name string) (*corev1.Node, corev1.NodeStatus) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/region": "eu-west-1",
			"topology.kubernetes.io/zone": "eu-west-1a", "karpenter.sh/nodepool": "general",
			"karpenter.sh/capacity-type": "on-demand", "bench.example.com/cluster": "bench",
		}, Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///eu-west-1a/i-" + name, Taints: []corev1.Taint{
			{Key: "example.com/dedicated", Value: "general", Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/spot", Effect: corev1.TaintEffectPreferNoSchedule},
		}},
	}
	now := metav1.Now()
	status := corev1.NodeStatus{
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7910m"), corev1.ResourceMemory: resource.MustParse("31Gi"),
			corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("90Gi")},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.2"}, {Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeInternalDNS, Address: name + ".eu-west-1.compute.internal"}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", KernelVersion: "6.1.0", OSImage: "Bottlerocket OS 1.30",
			ContainerRuntimeVersion: "containerd://2.1.0", Architecture: "amd64", OperatingSystem: "linux"},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		s := corev1.ConditionFalse
		if c == corev1.NodeReady {
			s = corev1.ConditionTrue
		}
		status.Conditions = append(status.Conditions, corev1.NodeCondition{Type: c, Status: s, LastHeartbeatTime: now,
			LastTransitionTime: now, Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c)})
	}
	for i := range 20 {
		status.Images = append(status.Images, corev1.ContainerImage{SizeBytes: int64(50_000_000 + i),
			Names: []string{fmt.Sprintf("registry.example.com/team/app-%d@sha256:%064d", i, i), fmt.Sprintf("registry.example.com/team/app-%d:v1.%d", i, i)}})
	}
	return node, status
}

// createNode creates node, then gives it status, as a kubelet registering it would.
func (e *env) createNode(ctx context.Context, node *corev1.Node, status corev1.NodeStatus) error {
	if err := e.c.Create(ctx, node); err != nil {
		return err
	}
	node.Status = status
	return e.c.Status().Update(ctx, node)
}

// growCluster creates realistic Nodes until the cluster holds n of them.
func growCluster(ctx context.Context, e *env, have, n int) error {
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				node, status := realisticNode(fmt.Sprintf("bench-node-%05d", i))
				if err := e.createNode(ctx, node, status); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := have; i < n; i++ {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			return err
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// agentProc is a running agent process.
type agentProc struct {
	cmd         *exec.Cmd
	user        string
	metricsAddr string
	// token, when set, is the bearer token for a secure metrics endpoint (HTTPS, self-signed).
	token string
}

func startAgent(e *env, binary, design, user, socket string) (*agentProc, error) {
	kubeconfig, err := e.kubeconfigFor(user)
	if err != nil {
		return nil, err
	}
	addr, err := testkit.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig=" + kubeconfig, "--node-name=" + agentNode, "--metrics-bind-address=" + addr}
	token := ""
	switch design {
	case designOurs:
		// As it ships: the secure metrics endpoint on. The baseline and the floor have no
		// confinement check, nor its flag.
		args = append(args, testkit.Unconfined, "--csi-address="+socket, "--health-probe-bind-address=0")
		token = e.scrapeToken
	case designBaseline:
		args = append(args, "--csi-address="+socket)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &agentProc{cmd: cmd, user: user, metricsAddr: addr, token: token}, nil
}

func (a *agentProc) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
	}
}

// metric reads one unlabelled sample, or the sum over a metric's labelled samples, from the
// agent's metrics endpoint.
// secureScraper reads a secure metrics endpoint, whose certificate is self-signed.
var secureScraper = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed

func (a *agentProc) metric(name string) (float64, error) {
	url, scraper := "http://"+a.metricsAddr+"/metrics", http.DefaultClient
	if a.token != "" {
		url, scraper = "https://"+a.metricsAddr+"/metrics", secureScraper
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := scraper.Do(req)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	defer func() { _ = resp.Body.Close() }()
	sum, found := 0.0, false
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s yet", name)
	}
	return sum, nil
}

// waitSynced waits until the agent has reconciled its node, which it does once its cache holds it.
func (a *agentProc) waitSynced(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if v, err := a.metric(`controller_runtime_reconcile_total`); err == nil && v >= 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not reconcile its node within 2 minutes", a.user)
}

// procStatus reads VmRSS and RssAnon, in bytes, from /proc/PID/status.
func procStatus(pid int) (vmRSS, rssAnon float64, err error) {
	f, err := procStatusFields(pid)
	return f["VmRSS"], f["RssAnon"], err
}

// procStatusFields reads /proc/PID/status's fields counted in kB, in bytes.
func procStatusFields(pid int) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 3 && fields[2] == "kB" {
			if kb, err := strconv.ParseFloat(fields[1], 64); err == nil {
				out[strings.TrimSuffix(fields[0], ":")] = kb * 1024
			}
		}
	}
	return out, nil
}

func (a *agentProc) sample(ctx context.Context, e *env) (memSample, error) {
	if err := a.waitSynced(ctx); err != nil {
		return memSample{}, err
	}
	time.Sleep(3 * time.Second) // let start-up garbage be collected and the requests land in the log
	var s memSample
	var err error
	if s.vmRSS, s.rssAnon, err = procStatus(a.cmd.Process.Pid); err != nil {
		return s, err
	}
	if s.heap, err = a.metric("go_memstats_heap_alloc_bytes"); err != nil {
		return s, err
	}
	s.requests, err = e.audit.counts(a.user)
	return s, err
}

func median(samples []memSample) memSample {
	pick := func(f func(memSample) float64) float64 {
		v := make([]float64, len(samples))
		for i, s := range samples {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	byTotal := slices.Clone(samples)
	slices.SortFunc(byTotal, func(a, b memSample) int { return total(a.requests) - total(b.requests) })
	return memSample{
		vmRSS:    pick(func(s memSample) float64 { return s.vmRSS }),
		rssAnon:  pick(func(s memSample) float64 { return s.rssAnon }),
		heap:     pick(func(s memSample) float64 { return s.heap }),
		requests: byTotal[len(byTotal)/2].requests,
	}
}

func measureMemory(ctx context.Context, e *env, c benchConfig) ([]memResult, []idleResult, error) {
	agent, _ := realisticNode(agentNode)
	agent.Spec.Taints = append(agent.Spec.Taints, startupTaint)
	if err := e.c.Create(ctx, agent); err != nil {
		return nil, nil, err
	}
	if err := registerCSINode(ctx, e.c, agentNode); err != nil {
		return nil, nil, err
	}
	driver, err := fakecsi.Start(filepath.Join(e.work, "agent.sock"), driverName, fakecsi.Ready)
	if err != nil {
		return nil, nil, err
	}
	defer driver.Stop()

	designs := []struct{ name, binary string }{{designOurs, c.binary}, {designBaseline, c.baseline}, {designFloor, c.floor}}
	var results []memResult
	have, run := 0, 0
	for _, n := range c.sizes {
		start := time.Now()
		if err := growCluster(ctx, e, have, n); err != nil {
			return nil, nil, err
		}
		have = n
		logf("  %d Nodes created in %s", n, time.Since(start).Round(time.Second))
		for _, d := range designs {
			var samples []memSample
			for range c.repeats {
				run++
				a, err := startAgent(e, d.binary, d.name, fmt.Sprintf("bench-agent-%d", run), driver.Path())
				if err != nil {
					return nil, nil, err
				}
				s, err := a.sample(ctx, e)
				a.stop()
				if err != nil {
					return nil, nil, fmt.Errorf("%s at %d Nodes: %w", d.name, n, err)
				}
				samples = append(samples, s)
			}
			m := median(samples)
			logf("  %s at %d Nodes: VmRSS %.1f MiB, RssAnon %.1f MiB, heap %.1f MiB, %d requests",
				d.name, n, m.vmRSS/mib, m.rssAnon/mib, m.heap/mib, total(m.requests))
			results = append(results, memResult{design: d.name, nodes: n, memSample: m})
		}
	}

	// The designs idle side by side at the largest size: any request they make now is periodic.
	logf("  idle for %s", c.idle)
	var idle []idleResult
	var agents []*agentProc
	for _, d := range designs {
		run++
		a, err := startAgent(e, d.binary, d.name, fmt.Sprintf("bench-agent-%d", run), driver.Path())
		if err != nil {
			return nil, nil, err
		}
		defer a.stop()
		s, err := a.sample(ctx, e)
		if err != nil {
			return nil, nil, err
		}
		agents = append(agents, a)
		idle = append(idle, idleResult{design: d.name, nodes: have, period: c.idle, requests: s.requests,
			rssStart: s.vmRSS, anonStart: s.rssAnon})
	}
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(c.idle):
	}
	for i, a := range agents {
		after, err := e.audit.counts(a.user)
		if err != nil {
			return nil, nil, err
		}
		delta := map[string]int{}
		for verb, n := range after {
			if d := n - idle[i].requests[verb]; d > 0 {
				delta[verb] = d
			}
		}
		idle[i].requests = delta
		if idle[i].rssEnd, idle[i].anonEnd, err = procStatus(a.cmd.Process.Pid); err != nil {
			return nil, nil, err
		}
	}
	return results, idle, nil
}

const mib = 1 << 20
