// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The node agents' gate's list of DaemonSets: read from the API server's watch cache while the
// gate waits, never watched, and kept only as long as relistAfter.

// relistAfter is how old the list of DaemonSets may be while the gate waits: a DaemonSet added,
// or one that stops counting, shows within it. A pod of a DaemonSet not on the list, and a verdict
// that would pass on a list older than confirmAfter, list again at once.
const (
	relistAfter  = 5 * time.Second
	confirmAfter = time.Second
)

// daemonSets returns the DaemonSets that may count, listed again when the last list is older
// than maxAge (relistAfter when zero) or some pod here belongs to a DaemonSet it lacks.
func (g *NodeAgentsGate) daemonSets(ctx context.Context, lister client.Reader, pods []corev1.Pod,
	maxAge time.Duration) ([]appsv1.DaemonSet, error) {
	if maxAge == 0 {
		maxAge = relistAfter
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	fresh := !g.listedAt.IsZero() && g.clock.Since(g.listedAt) <= maxAge
	if fresh && !slices.ContainsFunc(pods, func(p corev1.Pod) bool {
		return daemonSetRef(&p) != nil && !slices.ContainsFunc(g.listed, func(ds appsv1.DaemonSet) bool { return controlledBy(&p, &ds) })
	}) {
		return g.listed, nil
	}
	selector := labels.NewSelector()
	op, value := "!=", "false"
	if g.choose == NodeAgentsLabelled {
		op, value = "=", "true"
	}
	req, err := labels.ParseToRequirements(NodeAgentLabel + op + value)
	if err != nil {
		return nil, fmt.Errorf("selecting node agents: %w", err)
	}
	var listed []appsv1.DaemonSet
	for _, ns := range g.namespaces {
		list := &appsv1.DaemonSetList{}
		// From the API server's watch cache (resourceVersion 0): no read of etcd per booting node.
		// The cache answers such a list whole, whatever its limit, so what the namespaces hold is
		// read at once; only what placement reads of each DaemonSet is kept until the next list.
		err = lister.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: selector.Add(req...)},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		if err != nil {
			return nil, fmt.Errorf("listing DaemonSets in namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			listed = append(listed, placementOf(&list.Items[i]))
		}
	}
	g.listed, g.listedAt = listed, g.clock.Now()
	return g.listed, nil
}

// listAge is the age of the last list of DaemonSets.
func (g *NodeAgentsGate) listAge() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clock.Since(g.listedAt)
}
