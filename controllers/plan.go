// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"time"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	corev1 "k8s.io/api/core/v1"
)

// plan is what one reconcile decided for one group, and, once written, what the write did.
type plan struct {
	g     *group
	specs []startuptaint.TaintSpec
	// now is when the reconcile began: the one time its observations and decisions are made at.
	now        time.Time
	obs        observation
	v          verdict
	readySince time.Time
	// notReady is the gate that holds the group's taints, nil when every gate passes: what its
	// Node condition says.
	notReady *gateError

	// remove is set when the group's startup taints go now; forced, when MaxWait forces them.
	remove bool
	forced bool
	// retaint is the taint put back now, and cause why (putback.go).
	retaint *startuptaint.TaintSpec
	cause   startuptaint.Cause
	// recordBoot is set when the boot record alone is brought up to this boot (reboot.go).
	recordBoot bool
	// requeue is when to reconcile again for this group, when nothing is written.
	requeue time.Duration

	// What decide found to say, which reportDecision says once it returns: the wait for notReady
	// (firstWait: the first in this episode for its gate and reason class), and a dry run's
	// removal or re-taint that it did not make.
	waiting, firstWait        bool
	wouldRemove, wouldRetaint bool

	// orig is the Node before the patch that carried this plan's change, nil when that patch
	// changed nothing or the Node is gone; err is the patch's error, and written when the API
	// server accepted it: the end of the reaction time.
	orig    *corev1.Node
	err     error
	written time.Time
}

// changes reports whether the plan writes to the Node.
func (p *plan) changes() bool { return p.remove || p.retaint != nil || p.recordBoot }

// apply makes the plan's change to n.
func (p *plan) apply(n *corev1.Node) {
	switch {
	case p.retaint != nil:
		if len(startuptaint.MatchingTaints(n.Spec.Taints, []startuptaint.TaintSpec{*p.retaint})) == 0 {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: p.retaint.Key, Effect: p.retaint.Effect})
		}
	case p.remove:
		removeTaints(n, p.specs)
	case p.recordBoot:
		recordBoot(n, specKeys(p.specs))
	}
}

// removeTaints removes the taints specs select from n, and records them in startuptaint.RemovedAnnotation and
// this boot in startuptaint.BootAnnotation: the change a removal sends, and the one the confinement check asks
// the API server about.
func removeTaints(n *corev1.Node, specs []startuptaint.TaintSpec) {
	selecting := specsSelecting(n.Spec.Taints, specs)
	if len(selecting) == 0 {
		return
	}
	// In the same patch, so a later process knows these were removed once (see startuptaint.RemovedAnnotation),
	// and in which boot (see startuptaint.BootAnnotation).
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[startuptaint.RemovedAnnotation] = withRemoved(n, selecting)
	recordBoot(n, specKeys(specs))
	n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, specs)
}

// removed returns the group's taints the write removed.
func (p *plan) removed() []corev1.Taint {
	if p.orig == nil {
		return nil
	}
	return startuptaint.MatchingTaints(p.orig.Spec.Taints, p.specs)
}

// retainted reports whether the write put the plan's taint back.
func (p *plan) retainted() bool {
	return p.orig != nil && len(startuptaint.MatchingTaints(p.orig.Spec.Taints, []startuptaint.TaintSpec{*p.retaint})) == 0
}

// write sends the plans' changes to the Node in one locked patch, and records its outcome in each
// plan. When that patch is forbidden and carries several groups' changes, each is sent alone, so a
// group the admission policy refuses (an install that does not list its taint) holds back only
// itself.
func (r *NodeReconciler) write(ctx context.Context, node *corev1.Node, plans []*plan) {
	if len(plans) == 0 {
		return
	}
	base := node.DeepCopy()
	orig, err := r.patchTaints(ctx, node, func(n *corev1.Node) {
		for _, p := range plans {
			p.apply(n)
		}
	}, func(orig *corev1.Node) { r.reportConflict(orig, plans) })
	if refused(err) && len(plans) > 1 {
		for _, p := range plans {
			r.write(ctx, base.DeepCopy(), []*plan{p})
		}
		return
	}
	written := r.wired.clock.Now()
	for _, p := range plans {
		p.orig, p.err, p.written = orig, err, written
	}
}
