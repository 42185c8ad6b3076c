// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// coldNamespace holds the cold start's node agent and the Typha it needs.
const coldNamespace = "bench-cold"

// coldStartResult is one cold start of nodes nodes.
type coldStartResult struct {
	nodes int
	// firstReport is, per node, from its agent's start to its first UntoleratedStartupTaint event.
	firstReport []time.Duration
	// listsPerNodeMinute are the agents' lists of pods per held node and minute, over the minute
	// after every node had reported.
	listsPerNodeMinute float64
	// released is from the namespace's label to the last node's release; releasedNodes how many
	// were released.
	released      time.Duration
	releasedNodes int
}

// measureColdStart runs a cold start for each of sizes: every node registers with the startup
// taint, and its agent (in this process, the node agents' gate over coldNamespace) waits for the
// CNI agent's pod, which turns Ready only once Typha, a Deployment's pod that does not tolerate
// the taint, runs. The scheduler's part is played here: Typha's pod is found Unschedulable while
// it does not tolerate the taint, and bound once it does. Then the namespace is labelled, with
// config/components/tolerate-startup-taints' policies installed, and Typha's pod made again, as
// its ReplicaSet would once deleted: the API server's policy gives it the toleration.
func measureColdStart(ctx context.Context, e *env, sizes []int) ([]coldStartResult, error) {
	if err := client.IgnoreAlreadyExists(e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: coldNamespace}})); err != nil {
		return nil, err
	}
	cni := workload.Agent(coldNamespace, "calico-node", nil, true)
	// As a CNI's DaemonSet does, it tolerates every taint: realisticNode's own among them.
	cni.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	if err := e.c.Create(ctx, cni); err != nil {
		return nil, err
	}
	var out []coldStartResult
	for i, n := range sizes {
		r, err := coldStartRun(ctx, e, cni, n, i)
		if err != nil {
			return nil, fmt.Errorf("%d nodes: %w", n, err)
		}
		logf("  %d nodes: first report after %s (p50), %.2f pod lists per held node and minute; the last node released %s after the label",
			n, percentile(r.firstReport, 0.5).Round(time.Millisecond), r.listsPerNodeMinute, r.released.Round(time.Millisecond))
		out = append(out, r)
	}
	return out, nil
}

// coldStart measures the cold start and writes cold-start.md.
func coldStart(ctx context.Context, e *env, c benchConfig) error {
	logf("a cold start whose node agent needs a pod that does not tolerate the taint: %v nodes", c.coldStartFleets)
	start := time.Now()
	rs, err := measureColdStart(ctx, e, c.coldStartFleets)
	if err != nil {
		return fmt.Errorf("a cold start: %w", err)
	}
	md := coldStartMarkdown(rs, machine(), time.Since(start))
	fmt.Println(md)
	return os.WriteFile(filepath.Join(c.out, "cold-start.md"), []byte(md), 0o644)
}

// coldStartRun is one cold start of n nodes; run names its objects.
func coldStartRun(ctx context.Context, e *env, cni *appsv1.DaemonSet, n, run int) (coldStartResult, error) {
	res := coldStartResult{nodes: n}
	prefix := fmt.Sprintf("cold-%d-", run)
	names, err := coldNodes(ctx, e, cni, prefix, n)
	if err != nil {
		return res, err
	}
	typha, err := pendingTypha(ctx, e, prefix+"typha-0")
	if err != nil {
		return res, err
	}
	cnt := &counter{byVerb: map[string]int64{}}
	runCtx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }()
	mgrs := make([]ctrl.Manager, 0, n)
	for _, name := range names {
		gate := gates.NewNodeAgentsGate(gates.NodeAgentsOptions{Node: name, Namespaces: []string{coldNamespace}, Startup: []corev1.Taint{{Key: startupTaint.Key}}})
		mgr, err := inProcessAgent(e, cnt, name, controllers.Group{Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{gate}},
			func(r *controllers.NodeReconciler) { r.NodeAgentNamespaces = []string{coldNamespace} })
		if err != nil {
			return res, err
		}
		mgrs = append(mgrs, mgr)
	}
	start := time.Now()
	var failed atomic.Int64
	startAll(runCtx, mgrs, &running, &failed)

	// Without the component: how soon each node names Typha, and what looking costs.
	if res.firstReport, err = firstReports(ctx, e, prefix, typha.Name, n, start); err != nil {
		return res, err
	}
	cnt.mu.Lock()
	listsBefore := cnt.podLists
	cnt.mu.Unlock()
	const window = time.Minute
	time.Sleep(window)
	cnt.mu.Lock()
	res.listsPerNodeMinute = float64(cnt.podLists-listsBefore) / float64(n) / window.Minutes()
	cnt.mu.Unlock()

	// With the component: the label, and Typha made again.
	if res.released, res.releasedNodes, err = releaseWithComponent(ctx, e, cni, typha, prefix, names); err != nil {
		return res, err
	}
	if f := failed.Load(); f > 0 {
		return res, fmt.Errorf("%d managers failed", f)
	}
	return res, nil
}

// coldNodes creates n Nodes named after prefix, each registered with the startup taint and with
// cni's pod Running and not Ready on it, as the DaemonSet controller and kubelet leave it.
func coldNodes(ctx context.Context, e *env, cni *appsv1.DaemonSet, prefix string, n int) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%03d", prefix, i)
		node, status := realisticNode(names[i])
		node.Spec.Taints = append(node.Spec.Taints, startupTaint)
		if err := e.createNode(ctx, node, status); err != nil {
			return nil, err
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: coldNamespace, Name: cni.Name + "-" + names[i], Labels: cni.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: cni.Name, UID: cni.UID, Controller: ptr.To(true)}}},
			Spec: *cni.Spec.Template.Spec.DeepCopy()}
		pod.Spec.NodeName = names[i]
		if err := e.c.Create(ctx, pod); err != nil {
			return nil, err
		}
		pod.Status.Phase = corev1.PodRunning
		if err := e.c.Status().Update(ctx, pod); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// firstReports waits, for at most 3 minutes, until the agent of each of the n nodes named after
// prefix has named pod in an UntoleratedStartupTaint event, and returns how long after start each did.
func firstReports(ctx context.Context, e *env, prefix, pod string, n int, start time.Time) ([]time.Duration, error) {
	reported := map[string]time.Duration{}
	for len(reported) < n && time.Since(start) < 3*time.Minute {
		list := &corev1.EventList{}
		if err := e.c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return nil, err
		}
		for _, ev := range list.Items {
			node := ev.InvolvedObject.Name
			if _, ok := reported[node]; !ok && ev.Reason == startuptaint.EventReasonUntoleratedStartupTaint && strings.HasPrefix(node, prefix) &&
				strings.Contains(ev.Message, coldNamespace+"/"+pod) {
				reported[node] = time.Since(start)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(reported) < n {
		return nil, fmt.Errorf("%d of %d nodes named the pod their startup taint keeps away within 3 minutes", len(reported), n)
	}
	out := make([]time.Duration, 0, n)
	for _, d := range reported {
		out = append(out, d)
	}
	return out, nil
}

// releaseWithComponent installs config/components/tolerate-startup-taints, labels the namespace,
// makes Typha's pod again as its ReplicaSet would once it is deleted, binds it as the scheduler
// would, and turns cni's pods Ready as calico-node does once Typha answers. It returns how long
// after the label the last node was released, and how many were.
func releaseWithComponent(ctx context.Context, e *env, cni *appsv1.DaemonSet, typha *corev1.Pod, prefix string, names []string) (time.Duration, int, error) {
	remove, err := workload.InstallTolerationPolicies(ctx, e.c, startupTaint.Key)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = remove(context.Background()) }()
	labelled := time.Now()
	ns := &corev1.Namespace{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: coldNamespace}, ns); err != nil {
		return 0, 0, err
	}
	orig := ns.DeepCopy()
	ns.Labels = map[string]string{startuptaint.TolerateLabel: "true"}
	if err := e.c.Patch(ctx, ns, client.MergeFrom(orig)); err != nil {
		return 0, 0, err
	}
	// The next run starts without the label.
	defer func() { _ = e.c.Patch(context.Background(), orig, client.MergeFrom(ns)) }()
	// The API server applies a new policy a moment after it is created; the ReplicaSet makes the
	// pod again until one lands.
	for attempt := 1; ; attempt++ {
		if err := e.c.Delete(ctx, typha); err != nil {
			return 0, 0, err
		}
		if typha, err = pendingTypha(ctx, e, fmt.Sprintf("%stypha-%d", prefix, attempt)); err != nil {
			return 0, 0, err
		}
		if len(startuptaint.Untolerated(typha.Spec.Tolerations, []corev1.Taint{startupTaint})) == 0 {
			break
		}
		if time.Since(labelled) > 30*time.Second {
			return 0, 0, errors.New("the toleration policy gave Typha no toleration within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := e.cs.CoreV1().Pods(coldNamespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: typha.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: names[0]}}, metav1.CreateOptions{}); err != nil {
		return 0, 0, err
	}
	for _, name := range names {
		pod := &corev1.Pod{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: coldNamespace, Name: cni.Name + "-" + name}, pod); err != nil {
			return 0, 0, err
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: workload.AgentReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if err := e.c.Status().Update(ctx, pod); err != nil {
			return 0, 0, err
		}
	}
	released := 0
	for released < len(names) && time.Since(labelled) < 2*time.Minute {
		list := &corev1.NodeList{}
		if err := e.c.List(ctx, list); err != nil {
			return 0, 0, err
		}
		released = 0
		for _, node := range list.Items {
			if strings.HasPrefix(node.Name, prefix) && len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})) == 0 {
				released++
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if released < len(names) {
		return 0, released, fmt.Errorf("%d of %d nodes released within 2 minutes of the label", released, len(names))
	}
	return time.Since(labelled), released, nil
}

// pendingTypha creates Typha's pod as its ReplicaSet does, and, while it does not tolerate the
// startup taint, marks it Unschedulable as the scheduler would on a cluster whose nodes all carry it.
func pendingTypha(ctx context.Context, e *env, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: coldNamespace, Name: name, Labels: map[string]string{"app": "typha", "pod-template-hash": "5f7c9"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "typha-5f7c9", UID: "typha-rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "typha", Image: "example.com/typha"}}}}
	if err := e.c.Create(ctx, pod); err != nil {
		return nil, err
	}
	if len(startuptaint.Untolerated(pod.Spec.Tolerations, []corev1.Taint{startupTaint})) == 0 {
		return pod, nil
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/100 nodes are available: 100 node(s) had untolerated taint {" + startupTaint.Key + ": }.", LastTransitionTime: metav1.Now()}}
	return pod, e.c.Status().Update(ctx, pod)
}

// coldStartMarkdown is docs/bench/cold-start.md.
func coldStartMarkdown(rs []coldStartResult, machine string, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# A cold start: a node agent's dependency that does not tolerate the startup taint\n\n")
	fmt.Fprintf(&b, "Machine: %s. Control plane: envtest's kube-apiserver and etcd; the agents run in this process, one manager each, "+
		"with the node agents' gate over `%s`. Whole run: %s (`make bench`, scenario `cold-start`).\n\n", machine, coldNamespace, elapsed.Round(time.Second))
	b.WriteString("Every node registers with the startup taint. Its CNI agent's pod turns Ready only once Typha, a Deployment's pod " +
		"that does not tolerate the taint, runs; the scheduler's verdict on Typha is played here (Unschedulable), as is its binding. " +
		"Without the component no node is ever released: the rows say how soon each agent names Typha " +
		"(`UntoleratedStartupTaint`, a minute into the hold by design), and how many lists of pods that costs. Then the namespace is " +
		"labelled `" + startuptaint.TolerateLabel + "=true` with `config/components/tolerate-startup-taints` installed, Typha's pod is made " +
		"again and the API server's policy gives it the toleration: the last row is from the label to the last node released.\n\n")
	b.WriteString("| nodes | first report after the agent's start: p50 | p95 | max | pod lists per held node and minute | " +
		"the last node released after the label | nodes released |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %.2f | %s | %d of %d |\n", r.nodes, percentile(r.firstReport, 0.5).Round(time.Millisecond),
			percentile(r.firstReport, 0.95).Round(time.Millisecond), percentile(r.firstReport, 1).Round(time.Millisecond),
			r.listsPerNodeMinute, r.released.Round(time.Millisecond), r.releasedNodes, r.nodes)
	}
	b.WriteString("\nThe bound: one list of pods per node agents' namespace, per held node and minute, from the API server's watch " +
		"cache; none on a node whose gates pass. The end-to-end test (`test/e2e/nodeagents_test.go`, the cold start) runs the same " +
		"with the real scheduler, DaemonSet, Deployment and ReplicaSet controllers and hollow kubelets: every node released, no mount failed.\n")
	return b.String()
}
