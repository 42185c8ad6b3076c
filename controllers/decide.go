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

// decide decides what to change for the group, and what to say, which report says: with none of
// its startup taints on the Node, whether a cause puts one back (putback.go); else whether they go
// now.
func (r *NodeReconciler) decide(ctx context.Context, node *corev1.Node, f *facts) decision {
	switch {
	case r.ConditionsOnly:
		// The condition is the whole job: another controller owns the taints. It names the pods
		// they keep away too, looked for again when due.
		return decision{requeue: f.keptAway.next}
	case len(f.obs.held) == 0:
		return r.decidePutBack(node, f)
	default:
		return r.decideRemoval(ctx, node, f)
	}
}

// decideRemoval decides whether the startup taints the group holds go now: once its gates pass, or
// once MaxWait has passed. Until then it records the wait, for reportDecision to say, and asks to
// be called again at the deadline or when a taint that came back has been held long enough.
func (r *NodeReconciler) decideRemoval(ctx context.Context, node *corev1.Node, f *facts) decision {
	notReady := f.v.notReady
	// Never forced before the gates have been probed once: a restarted agent would otherwise
	// remove a taint unready that its first probe would have removed ready.
	d := decision{forced: notReady != nil && notReady.reason != gates.ReasonNotProbed && r.deadlinePassed(node, f)}
	if r.holdWhileCordoned(node, f) {
		// Uncordoning is an update of the Node that nodeChanged lets through.
		log.FromContext(ctx).V(4).Info("holding the taint put back on a cordoned node until it is uncordoned")
		d.requeue = f.keptAway.next
		return d
	}
	if notReady != nil && !d.forced {
		// Not an error to retry: the prober or a gate's watch triggers the next reconcile,
		// and the deadline, when there is one, the last.
		d.waiting, d.firstWait = true, f.g.state.firstWait(notReady)
		d.requeue = sooner(sooner(r.untilDeadline(node, f), notReady.recheck), f.keptAway.next)
		return d
	}
	if hold := r.holdFor(f.obs, f.v); hold > 0 {
		log.FromContext(ctx).V(4).Info("holding a startup taint that came back until the gates have passed long enough", "for", hold.String())
		d.requeue = hold
		return d
	}
	if r.DryRun {
		d.wouldRemove = f.g.state.firstWouldRemove()
		return d
	}
	d.remove = true
	return d
}

// sooner returns the shorter of two waits, where zero is no wait at all.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}

// deadline is when MaxWait forces the group's taints off, and whether it does: MaxWait after the
// Node's creation for its first startup taints, and after the boot for a taint that came back on
// a Node that rebooted (the boot record's), which kubelet does not date: from when this process
// first found it held, never earlier than the boot. A taint that continuous mode put back in the
// same boot stays until the gates pass, which is what that mode is for.
func (r *NodeReconciler) deadline(node *corev1.Node, f *facts) (time.Time, bool) {
	switch {
	case r.MaxWait <= 0:
		return time.Time{}, false
	case !f.obs.heldCameBack:
		return node.CreationTimestamp.Add(r.MaxWait), true
	case r.RetaintAfter > 0 && !f.bootedAgain || f.g.state.heldSince.IsZero():
		return time.Time{}, false
	}
	return f.g.state.heldSince.Add(r.MaxWait), true
}

// deadlinePassed reports whether the group's deadline has passed.
func (r *NodeReconciler) deadlinePassed(node *corev1.Node, f *facts) bool {
	at, ok := r.deadline(node, f)
	return ok && !f.now.Before(at)
}

// untilDeadline is how long until the group's deadline, or zero when it has none.
func (r *NodeReconciler) untilDeadline(node *corev1.Node, f *facts) time.Duration {
	if at, ok := r.deadline(node, f); ok {
		return at.Sub(f.now)
	}
	return 0
}

// holdWhileCordoned reports whether the taints the group holds are only the one an agent puts
// back, on a cordoned Node: held until it is uncordoned, as a drained node is before its reboot.
func (r *NodeReconciler) holdWhileCordoned(node *corev1.Node, f *facts) bool {
	if !node.Spec.Unschedulable || !f.putsBack {
		return false
	}
	back := startuptaint.RetaintSpec(f.specs)
	for _, t := range f.obs.held {
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
	if r.RetaintAfter <= 0 || !obs.heldCameBack || v.notReady != nil {
		return 0
	}
	return max(r.RetaintAfter-v.passingFor, 0)
}
