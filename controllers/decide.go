// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// decide decides what to change for the plan's group, and what to say, which report says: with
// none of its startup taints on the Node, whether a cause puts one back (putback.go); else whether
// they go now.
func (r *NodeReconciler) decide(ctx context.Context, node *corev1.Node, p *plan) {
	switch {
	case r.ConditionsOnly:
		// The condition is the whole job: another controller owns the taints.
	case len(p.obs.held) == 0:
		r.planPutBack(node, p)
	default:
		r.planRemoval(ctx, node, p)
	}
}

// planRemoval decides whether the startup taints the group holds go now: once its gates pass, or
// once MaxWait has passed. Until then it records the wait, for reportDecision to say, and asks to
// be called again at the deadline or when a taint that came back has been held long enough.
func (r *NodeReconciler) planRemoval(ctx context.Context, node *corev1.Node, p *plan) {
	notReady := p.v.notReady
	// Never forced before the gates have been probed once: a restarted agent would otherwise
	// remove a taint unready that its first probe would have removed ready.
	p.forced = notReady != nil && notReady.reason != gates.ReasonNotProbed && r.deadlinePassed(node, p)
	if r.holdWhileCordoned(node, p) {
		// Uncordoning is an update of the Node that nodeChanged lets through.
		log.FromContext(ctx).V(4).Info("holding the taint put back on a cordoned node until it is uncordoned")
		return
	}
	if notReady != nil && !p.forced {
		// Not an error to retry: the prober or a gate's watch triggers the next reconcile,
		// and the deadline, when there is one, the last.
		p.waiting, p.firstWait = true, p.g.state.firstWait(notReady)
		p.requeue = r.untilDeadline(node, p)
		if recheck := notReady.recheck; recheck > 0 && (p.requeue == 0 || recheck < p.requeue) {
			p.requeue = recheck
		}
		return
	}
	if hold := r.holdFor(p.obs, p.v); hold > 0 {
		log.FromContext(ctx).V(4).Info("holding a startup taint that came back until the gates have passed long enough", "for", hold.String())
		p.requeue = hold
		return
	}
	if r.DryRun {
		p.wouldRemove = p.g.state.firstWouldRemove()
		return
	}
	p.remove = true
}

// deadline is when MaxWait forces the plan's taints off, and whether it does: MaxWait after the
// Node's creation for its first startup taints, and after the boot for a taint that came back on
// a Node that rebooted (the boot record's), which kubelet does not date: from when this process
// first found it held, never earlier than the boot. A taint that continuous mode put back in the
// same boot stays until the gates pass, which is what that mode is for.
func (r *NodeReconciler) deadline(node *corev1.Node, p *plan) (time.Time, bool) {
	switch {
	case r.MaxWait <= 0:
		return time.Time{}, false
	case !p.obs.again:
		return node.CreationTimestamp.Add(r.MaxWait), true
	case r.RetaintAfter > 0 && !p.bootedAgain || p.g.state.heldSince.IsZero():
		return time.Time{}, false
	}
	return p.g.state.heldSince.Add(r.MaxWait), true
}

// deadlinePassed reports whether the plan's deadline has passed.
func (r *NodeReconciler) deadlinePassed(node *corev1.Node, p *plan) bool {
	at, ok := r.deadline(node, p)
	return ok && !p.now.Before(at)
}

// untilDeadline is how long until the plan's deadline, or zero when it has none.
func (r *NodeReconciler) untilDeadline(node *corev1.Node, p *plan) time.Duration {
	if at, ok := r.deadline(node, p); ok {
		return at.Sub(p.now)
	}
	return 0
}

// holdWhileCordoned reports whether the taints the group holds are only the one an agent puts
// back, on a cordoned Node: held until it is uncordoned, as a drained node is before its reboot.
func (r *NodeReconciler) holdWhileCordoned(node *corev1.Node, p *plan) bool {
	if !node.Spec.Unschedulable || !p.putsBack {
		return false
	}
	back := startuptaint.RetaintSpec(p.specs)
	for _, t := range p.obs.held {
		if t.Key != back.Key || t.Effect != back.Effect {
			return false
		}
	}
	return true
}

// holdFor is how much longer a taint that came back is held although every gate passes: until
// the gates have passed for RetaintAfter without interruption, so a flapping agent does not flap
// the taint. Zero outside continuous mode and for a Node's first startup taints.
func (r *NodeReconciler) holdFor(obs observation, v verdict) time.Duration {
	if r.RetaintAfter <= 0 || !obs.again || v.notReady != nil {
		return 0
	}
	return max(r.RetaintAfter-v.passingFor, 0)
}

// firstWait reports whether gerr is the first time its gate and reason class hold the taint in
// this episode, so a flapping driver cannot cause an event storm.
func (s *nodeState) firstWait(gerr *gateError) bool {
	if gerr.reason == gates.ReasonNotProbed || s.waitEvents[gerr.key()] {
		return false
	}
	s.waitEvents[gerr.key()] = true
	return true
}

// firstWouldRemove reports whether this is the episode's first removal a dry run would make.
func (s *nodeState) firstWouldRemove() bool {
	first := !s.wouldRemove
	s.wouldRemove = true
	return first
}
