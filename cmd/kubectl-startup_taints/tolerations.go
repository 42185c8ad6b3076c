// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// `kubectl startup-taints tolerations`: before a rollout, the workloads in the node agents'
// namespaces whose pods could not run on a node that carries an install's startup taints. On a
// new node pool every node does, so a node agent that needs one of them never becomes ready there.

// workload is a Deployment, StatefulSet or DaemonSet whose pod template does not tolerate a
// startup taint.
type workload struct {
	namespace, kind, name string
	untolerated           []string
}

// checkTolerations lists the workloads of namespaces (kube-system and each install's own when
// empty) whose pod templates do not tolerate the installs' startup taints, and the commands that
// fix them, and returns how many it listed.
func checkTolerations(ctx context.Context, c kubernetes.Interface, installs []install, namespaces []string, chunk int64,
	w io.Writer) (int, error) {
	if len(namespaces) == 0 {
		namespaces = installNamespaces(ctx, c, installs, chunk)
	}
	taints := make([]corev1.Taint, 0, len(installs))
	for _, in := range installs {
		taints = append(taints, startuptaint.Taints(in.specs)...)
	}
	var found []workload
	labelled := map[string]bool{}
	for _, ns := range namespaces {
		n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err == nil:
			labelled[ns] = n.Labels[startuptaint.TolerateLabel] == "true"
		case !apierrors.IsForbidden(err):
			return 0, fmt.Errorf("reading namespace %s: %w", ns, err)
		}
		list, err := workloads(ctx, c, ns, chunk, taints)
		if err != nil {
			return 0, err
		}
		// In a labelled namespace the policy gives each new pod its tolerations; a DaemonSet's
		// controller places pods by its template, which gets them only at its next update.
		found = append(found, slices.DeleteFunc(list, func(wl workload) bool { return labelled[ns] && wl.kind != "DaemonSet" })...)
	}
	if len(found) == 0 {
		_, err := fmt.Fprintf(w, "Every workload in %s tolerates the startup taints.\n", strings.Join(namespaces, ", "))
		return 0, err
	}
	return len(found), printWorkloads(w, found, labelled)
}

// workloads lists ns's Deployments, StatefulSets and DaemonSets, a page at a time, and returns
// those whose pod template does not tolerate one of taints.
func workloads(ctx context.Context, c kubernetes.Interface, ns string, chunk int64, taints []corev1.Taint) ([]workload, error) {
	var out []workload
	add := func(kind, name string, tolerations []corev1.Toleration) {
		if un := startuptaint.Untolerated(tolerations, taints); len(un) > 0 {
			keys := make([]string, 0, len(un))
			for _, t := range un {
				keys = append(keys, t.ToString())
			}
			out = append(out, workload{namespace: ns, kind: kind, name: name, untolerated: keys})
		}
	}
	opts := metav1.ListOptions{Limit: chunk}
	for {
		list, err := c.AppsV1().Deployments(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the Deployments of %s: %w", ns, err)
		}
		for _, d := range list.Items {
			add("Deployment", d.Name, d.Spec.Template.Spec.Tolerations)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	opts = metav1.ListOptions{Limit: chunk}
	for {
		list, err := c.AppsV1().StatefulSets(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the StatefulSets of %s: %w", ns, err)
		}
		for _, s := range list.Items {
			add("StatefulSet", s.Name, s.Spec.Template.Spec.Tolerations)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	opts = metav1.ListOptions{Limit: chunk}
	for {
		list, err := c.AppsV1().DaemonSets(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the DaemonSets of %s: %w", ns, err)
		}
		for _, d := range list.Items {
			add("DaemonSet", d.Name, d.Spec.Template.Spec.Tolerations)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	return out, nil
}

// installNamespaces are kube-system and the namespace of each install's agent, the service
// account its ClusterRole is bound to; kube-system alone when the bindings cannot be read.
func installNamespaces(ctx context.Context, c kubernetes.Interface, installs []install, chunk int64) []string {
	out := []string{metav1.NamespaceSystem}
	opts := metav1.ListOptions{Limit: chunk}
	for {
		list, err := c.RbacV1().ClusterRoleBindings().List(ctx, opts)
		if err != nil {
			return out
		}
		for _, b := range list.Items {
			if !slices.ContainsFunc(installs, func(in install) bool { return in.name == b.RoleRef.Name }) {
				continue
			}
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Namespace != metav1.NamespaceDefault && !slices.Contains(out, s.Namespace) {
					out = append(out, s.Namespace)
				}
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	slices.Sort(out[1:])
	return out
}

// printWorkloads writes the workloads as a table, then the commands that make them tolerate the
// startup taints: label each namespace that is not labelled, then restart each workload so its
// pods, or its template, are made again through the policy.
func printWorkloads(w io.Writer, found []workload, labelled map[string]bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAMESPACE\tKIND\tNAME\tUNTOLERATED")
	var unlabelled []string
	restarts := map[string][]string{}
	var order []string
	for _, wl := range found {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", wl.namespace, wl.kind, wl.name, strings.Join(wl.untolerated, ","))
		if !labelled[wl.namespace] && !slices.Contains(unlabelled, wl.namespace) {
			unlabelled = append(unlabelled, wl.namespace)
		}
		if restarts[wl.namespace] == nil {
			order = append(order, wl.namespace)
		}
		restarts[wl.namespace] = append(restarts[wl.namespace], strings.ToLower(wl.kind)+"/"+wl.name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d workload(s) cannot run on a node that carries the startup taints: a node agent that needs one never "+
		"becomes ready on a new node pool. With the tolerate-startup-taints admission policy (Kubernetes 1.36 and later):\n", len(found))
	if len(unlabelled) > 0 {
		fmt.Fprintf(&b, "  kubectl label namespace %s %s=true\n", strings.Join(unlabelled, " "), startuptaint.TolerateLabel)
	}
	for _, ns := range order {
		fmt.Fprintf(&b, "  kubectl -n %s rollout restart %s\n", ns, strings.Join(restarts[ns], " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
