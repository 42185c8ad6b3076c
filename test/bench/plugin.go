// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
)

// pluginResult is the kubectl plugin's time on a fleet, beside kubectl's own list of its Nodes.
type pluginResult struct {
	nodes, held, done   int
	table, all, kubectl []time.Duration
}

// measurePlugin installs config/default's roles, grows the cluster to nodes Nodes, puts the
// startup taint on 2% of them and the removed record on half, and times runs of the plugin (as a
// table, and with --all -o json) and of `kubectl get nodes -o json`, which reads the same pages.
func measurePlugin(ctx context.Context, e *env, plugin string, nodes, runs int) (pluginResult, error) {
	r := pluginResult{nodes: nodes}
	objs, err := objects.FromKustomization("config/default")
	if err != nil {
		return r, err
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" {
			if err := client.IgnoreAlreadyExists(e.c.Create(ctx, o)); err != nil {
				return r, err
			}
		}
	}
	have := &corev1.NodeList{}
	if err := e.c.List(ctx, have); err != nil {
		return r, err
	}
	if err := growCluster(ctx, e, len(have.Items), nodes); err != nil {
		return r, err
	}
	for i := range nodes {
		name := fmt.Sprintf("bench-node-%05d", i)
		node := &corev1.Node{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return r, err
		}
		orig := node.DeepCopy()
		switch {
		case i%50 == 0:
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "ebs.csi.aws.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute})
			r.held++
		case i%2 == 0:
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, startuptaint.RemovedAnnotation, "ebs.csi.aws.com/agent-not-ready")
			r.done++
		default:
			continue
		}
		if err := e.c.Patch(ctx, node, client.MergeFrom(orig)); err != nil {
			return r, err
		}
	}
	kubeconfig, err := e.kubeconfigFor("bench-plugin")
	if err != nil {
		return r, err
	}
	timed := func(name string, args ...string) (time.Duration, []byte, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
		}
		return time.Since(start), out, nil
	}
	for range runs {
		d, _, err := timed(plugin, "--kubeconfig="+kubeconfig)
		if err != nil {
			return r, err
		}
		r.table = append(r.table, d)
		d, out, err := timed(plugin, "--kubeconfig="+kubeconfig, "--all", "-o", "json")
		if err != nil {
			return r, err
		}
		var rep struct {
			Nodes  int               `json:"nodes"`
			Taints []json.RawMessage `json:"taints"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			return r, err
		}
		if rep.Nodes < nodes || len(rep.Taints) != r.held+r.done {
			return r, fmt.Errorf("the plugin read %d Nodes and %d taints, want %d and %d", rep.Nodes, len(rep.Taints), nodes, r.held+r.done)
		}
		r.all = append(r.all, d)
		d, _, err = timed("kubectl", "--kubeconfig="+kubeconfig, "get", "nodes", "-o", "json", "--chunk-size=500")
		if err != nil {
			return r, err
		}
		r.kubectl = append(r.kubectl, d)
	}
	return r, nil
}

// pluginMarkdown is docs/bench/plugin.md.
func pluginMarkdown(r pluginResult, runs int, where string, took time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# `kubectl startup-taints` on %d Nodes", r.nodes)
	p("")
	p("Written by `make bench` (`--scenarios=plugin`) in %s on %s. An envtest API server holds %d Nodes, each with", took.Round(time.Second), where, r.nodes)
	p("a kubelet's status (conditions, 20 images, addresses); %d hold the startup taint of config/default's install and %d", r.held, r.done)
	p("carry its removed record. Each of %d runs lists them 500 at a time, from a fresh process, as a user does.", runs)
	p("The baseline is kubectl's own `get nodes -o json --chunk-size=500` of the same Nodes.")
	p("")
	p("| command | rows | p50 / p95 / p99 |")
	p("|---|---|---|")
	p("| `kubectl startup-taints` | %d held | %s |", r.held, triple(r.table))
	p("| `kubectl startup-taints --all -o json` | %d | %s |", r.held+r.done, triple(r.all))
	p("| baseline: `kubectl get nodes -o json` | %d Nodes | %s |", r.nodes, triple(r.kubectl))
	return b.String()
}

// buildPlugin builds the kubectl plugin, a module of its own, into dir.
func buildPlugin(dir string) (string, error) {
	path := filepath.Join(dir, "kubectl-startup_taints")
	cmd := exec.Command("go", "-C", "cmd/kubectl-startup_taints", "build", "-o", path, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the kubectl plugin: %w", err)
	}
	return path, nil
}
