// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// During a graceful node shutdown, kubelet's shutdown manager (pkg/kubelet/nodeshutdown) makes
// ShutdownStatus return "node is shutting down", which the Ready condition's setter
// (pkg/kubelet/nodestatus) joins into its message with status False, and then stops the pods in
// priority order. An agent stopped while its Node says so puts back the taint of each group whose
// boot it recorded (putsBack), so the node comes back from the reboot already tainted; any other
// stop (a rollout of its DaemonSet, a deleted or evicted pod) leaves the Node alone.

// shutdownWriteTimeout bounds the read and the patch sent as the agent stops.
const shutdownWriteTimeout = 5 * time.Second

// atShutdown is the manager runnable that puts the taints back when the agent stops during a
// graceful node shutdown.
type atShutdown struct{ r *NodeReconciler }

// Start waits until the manager stops, then puts the taints back if the Node is shutting down
// or cordoned.
func (s atShutdown) Start(ctx context.Context) error {
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWriteTimeout)
	defer cancel()
	s.r.putBackAtShutdown(stopCtx)
	return nil
}

// putBackAtShutdown reads the Node from the API server and, while kubelet says it is shutting
// down or the Node is cordoned, puts back, in one patch, the taint of each group that holds none
// and whose boot was recorded. Nothing is logged as an error: the process is stopping, and
// kubelet's Ready condition after the reboot shows the rest.
func (r *NodeReconciler) putBackAtShutdown(ctx context.Context) {
	if r.DryRun || r.ConditionsOnly || !r.Confinement.Permits() {
		return
	}
	logger := log.FromContext(ctx).WithValues("node", r.NodeName)
	node := &corev1.Node{}
	if err := r.wired.apiReader.Get(ctx, client.ObjectKey{Name: r.NodeName}, node); err != nil {
		logger.Info("could not read the Node as the agent stops; no taint put back", "error", err.Error())
		return
	}
	var plans []*plan
	for _, g := range r.running {
		// Only where the agent will know the taint as its own after the boot (putsBack). A
		// cordoned Node's taint is back already, unless the agent stops before it saw the cordon,
		// as a drain that evicts it at once makes.
		specs := g.taintSpecs(true)
		if !r.putsBack(g, node) || len(startuptaint.MatchingTaints(node.Spec.Taints, specs)) > 0 {
			continue
		}
		f := facts{g: g, observed: observed{specs: specs, putsBack: true}}
		cause, ok := r.causeAtStop(node, &f)
		if !ok {
			continue
		}
		back := startuptaint.RetaintSpec(specs)
		plans = append(plans, &plan{facts: f, decision: decision{putBack: &back, cause: cause, told: r.tell(node, cause, verdict{})}})
	}
	for i, w := range r.write(ctx, node, plans) {
		plans[i].wrote = w
	}
	for _, p := range plans {
		switch {
		case p.err != nil:
			r.reportPutBackFailure(*p.putBack, p.err)
			logger.Info("could not put a startup taint back as the node shuts down", "taint", p.putBack.String(), "error", p.err.Error())
		case p.putBackWritten():
			r.reportPutBack(ctx, node, *p.putBack, p.cause, p.told)
		}
	}
}
