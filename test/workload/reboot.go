// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/yaml"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// kubemark's fake cAdvisor reports no boot ID and the hollow kubelet has no graceful shutdown, so
// a reboot on the real path needs these two: the boot ID written as kubelet's status setter
// (pkg/kubelet/nodestatus) copies the host's at every start, and the Ready condition written as
// kubelet's shutdown manager (pkg/kubelet/nodeshutdown) makes it.

// bootIDPolicy names the MutatingAdmissionPolicy and binding that stamp node's boot ID.
func bootIDPolicy(node string) string { return "boot-id-" + node }

// StampBootID makes every registration and status write of node carry bootID in
// status.nodeInfo.bootID, with a MutatingAdmissionPolicy (created, or changed to the new ID), and
// waits until the API server applies it. UnstampBootID removes it.
func StampBootID(ctx context.Context, c client.Client, node, bootID string) error {
	name := bootIDPolicy(node)
	spec := admissionv1.MutatingAdmissionPolicySpec{
		FailurePolicy:      ptr.To(admissionv1.Fail),
		ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"}}}}}},
		MatchConditions: []admissionv1.MatchCondition{{Name: "this-node", Expression: "object.metadata.name == '" + node + "'"},
			{Name: "kubelets-writes", Expression: "request.operation == 'CREATE' || has(request.subResource) && request.subResource == 'status'"}},
		Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
			ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: "Object{status: Object.status{nodeInfo: Object.status.nodeInfo{bootID: '" + bootID + "'}}}"}}},
	}
	policy := &admissionv1.MutatingAdmissionPolicy{}
	switch err := c.Get(ctx, client.ObjectKey{Name: name}, policy); {
	case err == nil:
		policy.Spec = spec
		if err := c.Update(ctx, policy); err != nil {
			return fmt.Errorf("changing the boot ID stamp of %s: %w", node, err)
		}
	case apierrors.IsNotFound(err):
		policy = &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name}}
		for _, o := range []client.Object{policy, binding} {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("stamping the boot ID of %s: %w", node, err)
			}
		}
	default:
		return fmt.Errorf("reading the boot ID stamp of %s: %w", node, err)
	}
	// A dry-run write shows the stamp once the API server applies this version.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		err := c.Create(ctx, probe, client.DryRunAll)
		if apierrors.IsAlreadyExists(err) {
			if err = c.Get(ctx, client.ObjectKey{Name: node}, probe); err == nil {
				orig := probe.DeepCopy()
				probe.Status.Phase = corev1.NodeRunning
				err = c.Status().Patch(ctx, probe, client.MergeFrom(orig), client.DryRunAll)
			}
		}
		// Any error is another poll: the API server may not have loaded the policy yet.
		return err == nil && probe.Status.NodeInfo.BootID == bootID, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the boot ID stamp %q of %s: %w", bootID, node, err)
	}
	return nil
}

// UnstampBootID deletes the policy and binding StampBootID made for node.
func UnstampBootID(ctx context.Context, c client.Client, node string) error {
	meta := metav1.ObjectMeta{Name: bootIDPolicy(node)}
	for _, o := range []client.Object{&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: meta}, &admissionv1.MutatingAdmissionPolicy{ObjectMeta: meta}} {
		if err := client.IgnoreNotFound(c.Delete(ctx, o)); err != nil {
			return fmt.Errorf("deleting the boot ID stamp of %s: %w", node, err)
		}
	}
	return nil
}

// ShutDown writes node's Ready condition as kubelet's shutdown manager does once a graceful
// shutdown starts: False, with startuptaint.NodeShuttingDownMessage.
func ShutDown(ctx context.Context, c client.Client, node string) error {
	return testkit.PatchNodeStatus(ctx, c, node, func(n *corev1.Node) {
		for i, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].Message = corev1.ConditionFalse, startuptaint.NodeShuttingDownMessage
			}
		}
	})
}

// Return is when, after a rebooted node's kubelet started again, the startup taint was first seen
// on the Node, and the node lifecycle controller's unreachable and not-ready taints first seen
// gone, which lets the scheduler place pods again: pods may land in between when the startup
// taint comes back later. A zero time was not seen.
type Return struct {
	PutBack, Lifted time.Duration
}

// String says both times, from kubelet's return.
func (r Return) String() string {
	at := func(d time.Duration) string {
		if d == 0 {
			return "never within 20s"
		}
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("startup taint on: %s; node lifecycle controller's taints gone: %s", at(r.PutBack), at(r.Lifted))
}

// WatchReturn reads node every 20 ms from since, for at most 20 s, and sends when key's taint
// was first seen and the node lifecycle controller's taints first seen gone.
func WatchReturn(ctx context.Context, c client.Reader, node, key string, since time.Time) <-chan Return {
	out := make(chan Return, 1)
	go func() {
		var r Return
		for (r.PutBack == 0 || r.Lifted == 0) && time.Since(since) < 20*time.Second && ctx.Err() == nil {
			n := &corev1.Node{}
			if c.Get(ctx, client.ObjectKey{Name: node}, n) == nil {
				back, held := false, false
				for _, t := range n.Spec.Taints {
					back = back || t.Key == key
					held = held || t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady
				}
				if r.PutBack == 0 && back {
					r.PutBack = time.Since(since)
				}
				if r.Lifted == 0 && !held {
					r.Lifted = time.Since(since)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		out <- r
	}()
	return out
}

// componentFile is a file of config/components, found from the working directory up, so that the
// tests (in their package's directory) and the benchmark (at the repository's root) read it, in
// binaries built with -trimpath too, which know no source path.
func componentFile(component, name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	rel := filepath.Join("config", "components", component, name)
	for {
		path := filepath.Join(dir, rel)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		if parent := filepath.Dir(dir); parent != dir {
			dir = parent
			continue
		}
		return "", fmt.Errorf("no %s in the working directory or above it", rel)
	}
}

// componentPolicy reads a MutatingAdmissionPolicy of config/components with its taints rendered
// as taints (the --taint string), as the install renders them.
func componentPolicy(component, name, taints string) (*admissionv1.MutatingAdmissionPolicy, error) {
	file, err := componentFile(component, name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	policy := &admissionv1.MutatingAdmissionPolicy{}
	if err := yaml.UnmarshalStrict(data, policy); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	for i := range policy.Spec.Variables {
		policy.Spec.Variables[i].Expression = strings.ReplaceAll(policy.Spec.Variables[i].Expression, `'\TAINTS'`, "'"+taints+"'")
	}
	return policy, nil
}

// InstallCrashPolicy creates config/components/taint-after-crash's MutatingAdmissionPolicy, its
// taints rendered as taints (the --taint string), and its binding, as the install does, with a
// DaemonSet standing for the agent's that selects every Node (no DaemonSet controller runs here,
// so it makes no pod), and returns what deletes them.
func InstallCrashPolicy(ctx context.Context, c client.Client, taints string) (func(context.Context) error, error) {
	policy, err := componentPolicy("taint-after-crash", "policy.yaml", taints)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"app.kubernetes.io/name": "startup-taint-remover"}
	agent := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "startup-taint-remover", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "startup-taint-remover"}}}}}}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ParamRef: &admissionv1.ParamRef{
			Name: agent.Name, Namespace: agent.Namespace, ParameterNotFoundAction: ptr.To(admissionv1.AllowAction)}}}
	for _, o := range []client.Object{agent, policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("installing the crash policy: %w", err)
		}
	}
	return func(ctx context.Context) error {
		for _, o := range []client.Object{binding, policy, agent} {
			if err := client.IgnoreNotFound(c.Delete(ctx, o)); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
