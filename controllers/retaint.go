package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Continuous mode (RetaintAfter): the startup taint goes back on when a gate stops passing for
// long enough, and comes off once every gate has passed for as long again.

// RetaintSpec is the taint continuous mode puts back for the startup taints specs: the first
// one's key with effect NoSchedule. Never NoExecute: the agent must not evict running pods, only
// keep new ones away until its node's agent works again.
func RetaintSpec(specs []TaintSpec) TaintSpec {
	return TaintSpec{Key: specs[0].Key, Effect: corev1.TaintEffectNoSchedule}
}

// retaintKey is RetaintSpec's String in continuous mode, and empty otherwise.
func (r *NodeReconciler) retaintKey() string {
	if r.RetaintAfter <= 0 {
		return ""
	}
	return RetaintSpec(r.Taints).String()
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

// retaint puts the startup taint back, in continuous mode, once a gate has not passed for
// RetaintAfter while no startup taint is on the Node. Until then it asks to be called again when
// that time is up; the prober calls it sooner if the gate passes again.
func (r *NodeReconciler) retaint(ctx context.Context, node *corev1.Node, v verdict) (ctrl.Result, error) {
	if r.RetaintAfter <= 0 || v.notReady == nil || v.notReady.reason == reasonNotProbed {
		return ctrl.Result{}, nil
	}
	if wait := r.RetaintAfter - v.failingFor; wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	spec := RetaintSpec(r.Taints)
	if r.DryRun {
		if r.state.firstWouldRetaint() {
			r.reportWouldRetaint(ctx, node, spec, v)
		}
		return ctrl.Result{}, nil
	}
	added, err := r.addTaint(ctx, node, corev1.Taint{Key: spec.Key, Effect: spec.Effect})
	if err != nil {
		r.reportRetaintFailure(spec, err)
		return ctrl.Result{}, fmt.Errorf("putting startup taint %s back on node %s: %w", spec, node.Name, err)
	}
	if !added {
		return ctrl.Result{}, nil // the Node was deleted, or has the taint already
	}
	r.state.recordRetaint(spec, v.notReady, r.Clock.Now())
	r.reportRetaint(ctx, node, spec, v)
	return ctrl.Result{}, nil
}

// addTaint adds taint to the Node unless a taint of its key and effect is there, and reports
// whether it did.
func (r *NodeReconciler) addTaint(ctx context.Context, node *corev1.Node, taint corev1.Taint) (bool, error) {
	orig, err := r.patchTaints(ctx, node, func(n *corev1.Node) {
		if len(MatchingTaints(n.Spec.Taints, []TaintSpec{{Key: taint.Key, Effect: taint.Effect}})) == 0 {
			n.Spec.Taints = append(n.Spec.Taints, taint)
		}
	}, nil)
	return orig != nil, err
}
