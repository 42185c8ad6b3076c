// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Continuous mode (RetaintAfter): the startup taint goes back on when a gate stops passing for
// long enough, and comes off once every gate has passed for as long again.

// holdFor is how much longer a taint that came back is held although every gate passes: until
// the gates have passed for RetaintAfter without interruption, so a flapping agent does not flap
// the taint. Zero outside continuous mode and for a Node's first startup taints.
func (r *NodeReconciler) holdFor(obs observation, v verdict) time.Duration {
	if r.RetaintAfter <= 0 || !obs.again || v.notReady != nil {
		return 0
	}
	return max(r.RetaintAfter-v.passingFor, 0)
}

// retaintOutcome records and reports the taint the write put back, or its failure.
func (r *NodeReconciler) retaintOutcome(ctx context.Context, node *corev1.Node, p *plan) error {
	spec := *p.retaint
	if p.err != nil {
		r.reportRetaintFailure(spec, p.err)
		return fmt.Errorf("putting startup taint %s back on node %s: %w", spec, node.Name, p.err)
	}
	if !p.retainted() {
		return nil // the Node was deleted, or has the taint already
	}
	p.g.state.recordRetaint(spec, p.v.notReady, p.now)
	r.reportRetaint(ctx, node, spec, p.cause, p.v)
	return nil
}
