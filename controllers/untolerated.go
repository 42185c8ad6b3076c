// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The deadlock at a cold start: on a new node pool every node carries the startup taint, so a
// pod that a node agent needs (a CNI's Typha, a CSI controller) and that does not tolerate the
// taint has nowhere to run, the agent never becomes ready, and the taint never goes. The agent
// cannot tell which pods its node agents need; it names the ones that could be it, and releases
// nothing: pods in the cluster admin's namespaces (NodeAgentNamespaces) that the scheduler found
// unschedulable, that would fit this node but for a startup taint of the group, which they do not
// tolerate. A tenant's pod elsewhere is never named, nor read.

// lookAfter is how long a group's gates must have held its taints before the agent looks, and how
// often it looks again while they do: a booting node's agents get their minute first, and a held
// node costs at most one list per namespace a minute.
const lookAfter = time.Minute

// sayAgainAfter is how long the same pods go unreported: the event is sent again then, so that it
// outlives the API server's one-hour expiry of events while the node stays held.
const sayAgainAfter = 30 * time.Minute

// maxUntolerated is how many pods a report names; it says how many more there are.
const maxUntolerated = 5

// untoleratedPod is a pod the group's startup taint keeps away.
type untoleratedPod struct {
	// pod is NAMESPACE/NAME, owner its controller as KIND NAMESPACE/NAME ("" without one), and
	// taint the key of the first held taint it does not tolerate.
	pod, owner, taint string
}

func (u untoleratedPod) String() string {
	if u.owner == "" {
		return u.pod
	}
	return fmt.Sprintf("%s (%s)", u.pod, u.owner)
}

// untolerated is what the look found: the pods, sorted and at most maxUntolerated, and how many
// there were. next is how long until the next look, zero when the group is not looked for.
type untolerated struct {
	pods  []untoleratedPod
	total int
	// changed is set when the pods differ from the last look's, or have gone unsaid for
	// sayAgainAfter, so the event is sent once per change, not once a minute.
	changed bool
	next    time.Duration
	// lookErr is why this reconcile's look failed; refused is set for the first refusal of this
	// process (the install grants no list of pods there), which is reported once.
	lookErr error
	refused bool
}

// lookUntolerated looks, when a group's gates have held its taints for lookAfter and it has not
// looked for as long, for the pods its startup taints keep away, and returns the last look's
// findings. A look that fails keeps the last findings, and says why.
func (r *NodeReconciler) lookUntolerated(ctx context.Context, node *corev1.Node, f *facts) untolerated {
	s := &f.g.state
	notReady := f.v.notReady
	if len(f.obs.held) == 0 || notReady == nil || notReady.reason == gates.ReasonNotProbed || len(r.NodeAgentNamespaces) == 0 {
		s.forgetUntolerated()
		return untolerated{}
	}
	due, next := s.lookDue(f.now)
	if !due {
		found := s.untoleratedFound()
		found.next = next
		return found
	}
	pods, total, err := r.findUntolerated(ctx, node, f.obs.held)
	if err != nil {
		s.recordLookFailed(f.now)
		found := s.untoleratedFound()
		found.next, found.lookErr = lookAfter, err
		found.refused = apierrors.IsForbidden(err) && s.firstLookRefused()
		return found
	}
	found := s.recordUntolerated(pods, total, f.now)
	found.next = lookAfter
	return found
}

// findUntolerated lists the pods no node runs in each of NodeAgentNamespaces, from the API
// server's watch cache, and returns those the scheduler found unschedulable that would fit node
// but for one of held, which they do not tolerate: at most maxUntolerated, sorted, and how many.
func (r *NodeReconciler) findUntolerated(ctx context.Context, node *corev1.Node, held []corev1.Taint) ([]untoleratedPod, int, error) {
	var found []untoleratedPod
	for _, ns := range r.NodeAgentNamespaces {
		list := &corev1.PodList{}
		err := r.wired.apiReader.List(ctx, list, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": ""},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		if err != nil {
			return nil, 0, fmt.Errorf("listing the pods not yet placed in namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			if u, ok := untoleratedBy(&list.Items[i], node, held); ok {
				found = append(found, u)
			}
		}
	}
	slices.SortFunc(found, func(a, b untoleratedPod) int { return strings.Compare(a.pod, b.pod) })
	return found[:min(len(found), maxUntolerated)], len(found), nil
}

// untoleratedBy reports whether one of held keeps pod away from node: the scheduler found it
// unschedulable, its required node affinity and node selector match node, and it does not
// tolerate that taint. The scheduler's message is not read: it counts every pod on every node.
func untoleratedBy(pod *corev1.Pod, node *corev1.Node, held []corev1.Taint) (untoleratedPod, bool) {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || !unschedulable(pod) {
		return untoleratedPod{}, false
	}
	// A term that does not parse matches nothing, as the scheduler reads it.
	if fits, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !fits {
		return untoleratedPod{}, false
	}
	un := startuptaint.Untolerated(pod.Spec.Tolerations, held)
	if len(un) == 0 {
		return untoleratedPod{}, false
	}
	return untoleratedPod{pod: pod.Namespace + "/" + pod.Name, owner: ownerOf(pod), taint: un[0].Key}, true
}

// unschedulable reports whether the scheduler has found pod unschedulable.
func unschedulable(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	})
}

// ownerOf names pod's controller as KIND NAMESPACE/NAME: a ReplicaSet's Deployment where the
// ReplicaSet's name is the Deployment's and the pod's template hash, as the Deployment controller
// names it, so that no ReplicaSet need be read.
func ownerOf(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return ""
	}
	kind, name := ref.Kind, ref.Name
	if hash := pod.Labels["pod-template-hash"]; kind == "ReplicaSet" && hash != "" && strings.HasSuffix(name, "-"+hash) {
		kind, name = "Deployment", strings.TrimSuffix(name, "-"+hash)
	}
	return fmt.Sprintf("%s %s/%s", kind, pod.Namespace, name)
}

// note is what the event and the condition say of the pods: each, the taint, and the
// one-line fix.
func (u untolerated) note() string {
	names := make([]string, 0, len(u.pods))
	keys := map[string]bool{}
	var taints, namespaces []string
	for _, p := range u.pods {
		if ns, _, _ := strings.Cut(p.pod, "/"); !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
		names = append(names, p.String())
		if !keys[p.taint] {
			keys[p.taint] = true
			taints = append(taints, p.taint)
		}
	}
	list := strings.Join(names, ", ")
	if more := u.total - len(u.pods); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("Pending pods %s cannot run on any node that carries the startup taint %s, which they do not tolerate; "+
		"if a node agent needs them, the taint never goes. Fix, with the tolerate-startup-taints component: "+
		"kubectl label namespace %s %s=true, then delete the pending pods so that their controller makes them again",
		list, strings.Join(taints, " and "), strings.Join(namespaces, " "), startuptaint.TolerateLabel)
}
