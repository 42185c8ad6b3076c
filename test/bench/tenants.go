// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// The tenants scenario: what a tenant who may create DaemonSets and pods in its own namespace
// costs an agent with --node-agents. The fourth review (issue 47) measured, before the node
// agents' namespaces, a peak of 211–270 MiB from sixty 1 MB DaemonSets or sixty 1 MB pods on the
// agent's node, and the installs' 80 MiB limit killed it three times out of three.

const (
	tenantsNamespace = "bench-tenant"
	tenantsNode      = "bench-tenants-node"
	// tenantObjects of each kind, each tenantObjectBytes in an environment value, which no
	// per-field limit bounds: only the API server's request size does.
	tenantObjects     = 60
	tenantObjectBytes = 1 << 20
	// installsLimit is the memory limit of every install's agent container.
	installsLimit = 80 << 20
)

// tenantsCase is one way to run the agent beside the tenant's objects.
type tenantsCase struct {
	name string
	args []string
	// before runs the binary from before the node agents' namespaces instead.
	before bool
}

var tenantsCases = []tenantsCase{
	{name: "the tenant's namespace not among the node agents' (the default: kube-system and the agent's own)"},
	{name: "the tenant's namespace named in --node-agent-namespaces, as every namespace counted before",
		args: []string{"--node-agent-namespaces=kube-system," + tenantsNamespace}},
}

// tenantsResult is one case's peak resident memory over its runs, and how long the taint took.
type tenantsResult struct {
	tenantsCase
	peaks   []float64 // bytes, VmHWM
	removed []time.Duration
}

// measureTenants fills a tenant's namespace with sixty 1 MB DaemonSets that tolerate every taint
// and sixty 1 MB pods bound to the agent's node, then starts the real binary runs times per case
// on a Node that joins with the startup taint, and reads its peak resident memory once the taint
// is gone (or after a minute).
func measureTenants(ctx context.Context, e *env, binary, before string, runs int) ([]tenantsResult, error) {
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantsNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		return nil, err
	}
	big := strings.Repeat("x", tenantObjectBytes-4<<10)
	container := corev1.Container{Name: "c", Image: "example.com/hold", Env: []corev1.EnvVar{{Name: "BIG", Value: big}}}
	for i := range tenantObjects {
		labels := map[string]string{"app": fmt.Sprintf("hold-%d", i)}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: tenantsNamespace, Name: fmt.Sprintf("hold-%d", i)},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, Containers: []corev1.Container{container}}}}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: tenantsNamespace, Name: fmt.Sprintf("big-%d", i)},
			Spec: corev1.PodSpec{NodeName: tenantsNode, Containers: []corev1.Container{container}}}
		for _, o := range []client.Object{ds, pod} {
			if err := e.c.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
				return nil, fmt.Errorf("creating %s: %w", o.GetName(), err)
			}
		}
	}
	cases := tenantsCases
	if before != "" {
		cases = append(cases, tenantsCase{name: "the release before them (" + before + "), which counted every namespace", before: true})
	}
	var out []tenantsResult
	for _, tc := range cases {
		r := tenantsResult{tenantsCase: tc}
		bin := binary
		if tc.before {
			bin = before
		}
		for run := range runs {
			peak, removed, err := tenantsRun(ctx, e, bin, tc, run)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", tc.name, run, err)
			}
			r.peaks, r.removed = append(r.peaks, peak), append(r.removed, removed)
		}
		out = append(out, r)
	}
	return out, nil
}

// tenantsRun starts the agent on a new tenantsNode and returns its peak resident memory once the
// startup taint is gone, and how long that took (a minute when it never went).
func tenantsRun(ctx context.Context, e *env, binary string, tc tenantsCase, run int) (float64, time.Duration, error) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tenantsNode}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startupTaint}}}
	if err := e.c.Create(ctx, node); err != nil {
		return 0, 0, err
	}
	defer func() { _ = e.c.Delete(context.Background(), node) }()
	kubeconfig, err := e.kubeconfigFor(fmt.Sprintf("tenants-%d", run))
	if err != nil {
		return 0, 0, err
	}
	args := append([]string{"--kubeconfig=" + kubeconfig, testkit.Unconfined, "--node-name=" + tenantsNode, "--node-agents=all",
		"--taint=" + startupTaint.Key + ":" + string(startupTaint.Effect), "--plugins-registry=", "--metrics-bind-address=0",
		"--health-probe-bind-address=0"}, tc.args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "POD_NAMESPACE=bench-agent-system"}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	proc := &agentProc{cmd: cmd}
	defer proc.stop()
	start := time.Now()
	for time.Since(start) < time.Minute {
		got := &corev1.Node{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: tenantsNode}, got); err != nil {
			return 0, 0, err
		}
		if len(startuptaint.MatchingTaints(got.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	removed := time.Since(start)
	// The agent keeps running a moment, as it would: the watch of the pods lands in that time too.
	time.Sleep(3 * time.Second)
	peak, err := peakRSS(cmd.Process.Pid)
	return peak, removed, err
}

// peakRSS reads VmHWM, the process's peak resident memory, in bytes, from /proc/PID/status.
func peakRSS(pid int) (float64, error) {
	f, err := procStatusFields(pid)
	if err == nil && f["VmHWM"] == 0 {
		err = fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return f["VmHWM"], err
}

func tenantsMarkdown(rs []tenantsResult, runs int, machine string, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# A tenant's objects: the agent's peak memory\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./test/bench --scenarios=tenants` on %s, in %s. A tenant who may create DaemonSets and pods "+
		"in its own namespace (`%s`) made %d DaemonSets that tolerate every taint and are never Ready, and %d pods bound to the agent's node, "+
		"each with a %d KiB environment value. The real binary, with `--node-agents=all`, starts on a Node that joins with the startup taint, "+
		"%d times per row; peak is its VmHWM once the taint is gone, min / median / max; the installs' memory limit is %d MiB. The fourth review "+
		"(issue 47) measured a peak of 211–270 MiB before the node agents' namespaces, against 33 MiB without the tenant's objects.\n\n",
		machine, elapsed.Round(time.Second), tenantsNamespace, tenantObjects, tenantObjects, (tenantObjectBytes-4<<10)>>10, runs, installsLimit>>20)
	b.WriteString("| case | peak RSS min / median / max | under the installs' limit | taint gone after (median) |\n|---|---|---|---|\n")
	for _, r := range rs {
		peaks, removed := slices.Sorted(slices.Values(r.peaks)), slices.Sorted(slices.Values(r.removed))
		under := "yes"
		if peaks[len(peaks)-1] >= installsLimit {
			under = "no"
		}
		fmt.Fprintf(&b, "| %s | %.1f / %.1f / %.1f MiB | %s | %s |\n", r.name, peaks[0]/(1<<20), peaks[len(peaks)/2]/(1<<20),
			peaks[len(peaks)-1]/(1<<20), under, removed[len(removed)/2].Round(time.Millisecond))
	}
	return b.String()
}
