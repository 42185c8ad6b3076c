// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// outcome records in the group's state what the write did for the plan, and returns it for
// report, with when to reconcile again and the error to retry with.
func (r *NodeReconciler) outcome(node *corev1.Node, p *plan) (recorded, time.Duration, error) {
	switch {
	case p.remove:
		return removalOutcome(node, p)
	case p.putBack != nil && p.err != nil:
		return recorded{}, 0, fmt.Errorf("putting startup taint %s back on node %s: %w", *p.putBack, node.Name, p.err)
	case p.putBack != nil:
		// Not when the Node was deleted, or has the taint already.
		if !p.putBackWritten() {
			return recorded{}, p.requeue, nil
		}
		p.g.state.recordPutBack(*p.putBack, p.v.notReady, p.now)
		return recorded{putBackDone: true}, p.requeue, nil
	case p.recordBoot && p.err != nil && !refused(p.err):
		// A refused record is reported instead (report): it is tried again at the next change.
		return recorded{}, 0, fmt.Errorf("recording node %s's boot: %w", node.Name, p.err)
	}
	return recorded{}, p.requeue, nil
}

// removalOutcome records the removal of the group's taints, or its failure.
func removalOutcome(node *corev1.Node, p *plan) (recorded, time.Duration, error) {
	if p.err != nil {
		err := fmt.Errorf("removing startup taints from node %s: %w", node.Name, p.err)
		f := p.g.state.recordFailure(failureClass(err))
		f.err = err
		if f.result != metrics.ResultForbidden {
			return recorded{failure: &f}, 0, err
		}
		// A forbidden patch does not heal by itself: it is retried on a backoff of its own,
		// without the log line controller-runtime writes for every returned error.
		return recorded{failure: &f}, f.retryAfter, nil
	}
	removed := p.removed()
	if len(removed) == 0 {
		return recorded{}, 0, nil // already gone, or the Node was deleted meanwhile
	}
	rem := p.g.state.recordRemoval(node, removed, startuptaint.SpecsSelecting(removed, p.specs), p.v.readyFrom, p.written)
	if p.forced {
		rem.unready = p.v.notReady
	}
	return recorded{removal: &rem}, 0, nil
}

// removed returns the group's taints the write removed.
func (p *plan) removed() []corev1.Taint {
	if p.orig == nil {
		return nil
	}
	return startuptaint.MatchingTaints(p.orig.Spec.Taints, p.specs)
}

// putBackWritten reports whether the write put the plan's taint back.
func (p *plan) putBackWritten() bool {
	return p.orig != nil && len(startuptaint.MatchingTaints(p.orig.Spec.Taints, []startuptaint.TaintSpec{*p.putBack})) == 0
}

// removal is what a successful removal reports.
type removal struct {
	taints []string // the removed taints, as KEY[=VALUE]:EFFECT
	specs  []string // the specs that selected them
	// cameBack is set when one of them came back after an earlier removal.
	cameBack bool
	heldFor  time.Duration
	// sinceCreation is the time from the Node's creation; first is set for the first removal of
	// the group's taints from the Node, the one the fleet's removal histogram counts.
	sinceCreation time.Duration
	first         bool
	// readyFor is the time from all gates passing (or the taint appearing, if later).
	readyFor time.Duration
	// permissionsChanged is set when the patch before this one was forbidden.
	permissionsChanged bool
	// unready is the gate that still did not pass when MaxWait forced the removal; nil otherwise.
	unready *gateError
}

// failure is what a failed removal reports.
type failure struct {
	result string // a metrics.Result* class
	// changed is set when the class differs from the last failure's: only then is it reported.
	changed bool
	// retryAfter is the backoff for a forbidden patch, which a retry does not cure by itself;
	// zero for failures the workqueue retries.
	retryAfter time.Duration
	// permissionsChanged is set when the patch became forbidden.
	permissionsChanged bool
	// err is the removal's error, as returned.
	err error
}
