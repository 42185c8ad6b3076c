// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// Before a rollout, `tolerations` lists the workloads of the node agents' namespaces that could not
// run on a node carrying config/default's startup taint, with the commands that fix them, and exits
// with status 1; once none is left, it says so and exits with 0. A Deployment in a labelled
// namespace needs nothing (the policy gives its new pods their tolerations); a DaemonSet there
// needs a restart, which runs its template through the policy.
func TestTolerationsListsTheWorkloadsTheStartupTaintKeepsAway(t *testing.T) {
	ctx := context.Background()
	env, c := testkit.StartEnvtest(t)
	cl := &cluster{t: t, env: env, c: c}
	cl.kubeconfig = cl.user("admin", "system:masters")
	cl.install(ctx)

	labels := map[string]string{"app": "x"}
	template := func(tolerations ...corev1.Toleration) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, Tolerations: tolerations}}
	}
	deployment := func(ns, name string, tolerations ...corev1.Toleration) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(tolerations...)}}
	}
	daemonSet := func(ns, name string, tolerations ...corev1.Toleration) client.Object {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(tolerations...)}}
	}
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "calico-system", Labels: map[string]string{startuptaint.TolerateLabel: "true"}}},
		deployment("kube-system", "coredns", corev1.Toleration{Key: "ebs.csi.aws.com/agent-not-ready", Operator: corev1.TolerationOpExists}),
		daemonSet("kube-system", "kube-proxy", corev1.Toleration{Operator: corev1.TolerationOpExists}),
		deployment("calico-system", "calico-kube-controllers"))

	status, out, errs := cl.plugin(cl.kubeconfig, "tolerations")
	if status != 0 || !strings.Contains(out, "Every workload in kube-system, startup-taint-remover-system tolerates the startup taints") {
		t.Errorf("tolerations with nothing to fix: status %d, output %q, errors %q; want 0 and both namespaces named", status, out, errs)
	}

	create(deployment("kube-system", "calico-typha",
		corev1.Toleration{Key: "ebs.csi.aws.com/agent-not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}),
		daemonSet("calico-system", "calico-node"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, deployment("tenant", "web"))
	status, out, errs = cl.plugin(cl.kubeconfig, "tolerations", "--namespaces=kube-system,calico-system")
	t.Logf("kubectl startup-taints tolerations --namespaces=kube-system,calico-system:\n%s", out)
	// The table's columns, one space apart.
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	out = strings.Join(lines, "\n")
	if status != 1 {
		t.Errorf("tolerations: status %d, errors %q, want 1", status, errs)
	}
	for _, want := range []string{
		"kube-system Deployment calico-typha ebs.csi.aws.com/agent-not-ready:NoExecute\n",
		"calico-system DaemonSet calico-node ebs.csi.aws.com/agent-not-ready:NoSchedule\n",
		"kubectl label namespace kube-system " + startuptaint.TolerateLabel + "=true\n",
		"kubectl -n kube-system rollout restart deployment/calico-typha\n",
		"kubectl -n calico-system rollout restart daemonset/calico-node\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tolerations printed\n%s\nwant %q in it", out, want)
		}
	}
	for _, never := range []string{"coredns", "kube-proxy", "calico-kube-controllers", "web", "label namespace calico-system"} {
		if strings.Contains(out, never) {
			t.Errorf("tolerations printed\n%s\nwith %q", out, never)
		}
	}

	if status, _, errs := cl.plugin(cl.kubeconfig, "tolerations", "--all"); status != exitUsage || !strings.Contains(errs, "tolerations takes neither") {
		t.Errorf("tolerations --all: status %d, errors %q, want %d", status, errs, exitUsage)
	}
}
