// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Reconcile removes each group's startup taints from the node when all the group's readiness
// gates pass, or puts one back when a cause of putback.go holds. It runs the loop's stages in
// order, each in its own file: for each group, observe the Node (observe.go), check the gates
// (gatecheck.go), look for the pods the held taints keep away (untolerated.go) and decide
// (decide.go, putback.go); then publish each verdict as a condition and
// send every group's change in one patch (write.go), record what the write did (outcome.go), and
// report it all (events.go). Until the confinement check permits writes, it decides and reports
// only. The clock is read once for the decisions, and once when the patch is accepted.
//
// Retries take one of three ways, by what failed:
//   - a patch that lost a race with another writer (409 Conflict) is sent again at once, read
//     afresh from the API server, on conflictBackoff (patchTaints);
//   - a refused removal (Forbidden, or Invalid from a policy that fails to evaluate) does not heal
//     by itself: it is not returned but retried after a backoff of its own, from 1 s to
//     MaxRetryInterval (nodeState.recordFailure), without a log line per attempt;
//   - a refused boot record alone is reported, and tried again at the Node's next change
//     (outcome.go);
//   - any other error, a refused put-back and a refused condition write among them, and a
//     conflict that outlasts conflictBackoff, is returned, and the workqueue retries it with its
//     per-item backoff, from 100 ms to MaxRetryInterval (SetupWithManager).
func (r *NodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.wired.client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.wired.clock.Now()
	permitted := r.Confinement.Permits()
	plans := make([]*plan, 0, len(r.running))
	for _, g := range r.running {
		gctx := g.logContext(ctx)
		found, ok := r.observe(gctx, g, node, now)
		if !ok {
			continue
		}
		f := facts{g: g, now: now, observed: found, v: r.check(gctx, node, g, found, now)}
		f.keptAway = r.lookUntolerated(gctx, node, &f)
		plans = append(plans, &plan{facts: f, decision: r.decide(gctx, node, &f)})
	}
	var res ctrl.Result
	var errs []error
	if permitted {
		for _, p := range plans {
			var err error
			p.published, err = r.publishCondition(p.g.logContext(ctx), node, &p.facts)
			errs = append(errs, err)
		}
		changing := slices.DeleteFunc(slices.Clone(plans), func(p *plan) bool { return !p.changes() })
		for i, w := range r.write(ctx, node, changing) {
			changing[i].wrote = w
		}
		for _, p := range plans {
			var requeue time.Duration
			var err error
			p.recorded, requeue, err = r.outcome(node, p)
			errs = append(errs, err)
			if requeue > 0 && (res.RequeueAfter == 0 || requeue < res.RequeueAfter) {
				res.RequeueAfter = requeue
			}
		}
	} else {
		// The confinement check's verdict, once it permits writes, reconciles again.
		log.FromContext(ctx).V(4).Info("writing nothing until an admission policy is seen to confine this agent")
	}
	for _, p := range plans {
		r.report(p.g.logContext(ctx), node, p)
	}
	return res, errors.Join(errs...)
}

// plan carries one group through one reconcile: one value per stage, in the loop's order, each
// returned by its stage and handed on by Reconcile; report says it all at the end.
type plan struct {
	facts     // observe's, check's and lookUntolerated's
	decision  // decide's
	published // publishCondition's
	wrote     // write's
	recorded  // outcome's
}

// facts is what observe, check and lookUntolerated found for one group at one reconcile: what
// decide decides from, and what the condition says.
type facts struct {
	g *group
	// now is when the reconcile began: the one time its observations and decisions are made at.
	now time.Time
	observed
	// v is check's: the gates' verdict over time; its notReady is the gate that holds the group's
	// taints, nil when every gate passes, which is also what the Node condition says.
	v verdict
	// keptAway is lookUntolerated's: the pods the group's startup taints keep away while its
	// gates hold them.
	keptAway untolerated
}

// observed is what observe found: the group's taints (specs: its startup taints as configured, and
// the one an agent puts back where it is the agent's to remove), what the Node carries of them
// (obs), whether that taint is the agent's (putsBack), whether the Node booted again since the
// group's gates last passed (bootedAgain), and the group's CSIDriver when this reconcile read it.
type observed struct {
	specs       []startuptaint.TaintSpec
	startup     []startuptaint.TaintSpec
	obs         observation
	putsBack    bool
	bootedAgain bool
	csiDriver   *csiDriverFound
}

// decision is what decide chose: remove is set when the group's startup taints go now; forced,
// when MaxWait forces them. putBack is the taint put back now, cause why and told what to say
// (putback.go). recordBoot is set when the boot record alone is brought up to this boot
// (putback.go); bootRecordFull, when it is behind and this boot's entries would take it beyond its
// bounds. requeue is when to reconcile again for this group, when nothing is written.
type decision struct {
	remove         bool
	forced         bool
	putBack        *startuptaint.TaintSpec
	cause          startuptaint.Cause
	told           told
	recordBoot     bool
	bootRecordFull bool
	requeue        time.Duration
	// What decide found to say: the wait for notReady (firstWait: the first in this episode for its
	// gate and reason class), and a dry run's removal or put-back that it did not make.
	waiting, firstWait        bool
	wouldRemove, wouldPutBack bool
}

// published is what publishCondition wrote: the Node condition, and the API server's error, nil
// when nothing was written.
type published struct {
	condition    *corev1.NodeCondition
	conditionErr error
}

// wrote is what write did: orig is the Node before the patch that carried this plan's change, nil
// when that patch changed nothing or the Node is gone; err is the patch's error, and written when
// the API server accepted it: the end of the reaction time.
type wrote struct {
	orig    *corev1.Node
	err     error
	written time.Time
}

// recorded is what outcome recorded: the removal, or its failure and the error it returns; whether
// the write put the taint back.
type recorded struct {
	removal     *removal
	failure     *failure
	putBackDone bool
}

// changes reports whether the plan writes to the Node.
func (p *plan) changes() bool { return p.remove || p.putBack != nil || p.recordBoot }

// logContext adds the group's name to the logger in ctx, when it has one.
func (g *group) logContext(ctx context.Context) context.Context {
	if g.Name == "" {
		return ctx
	}
	return log.IntoContext(ctx, log.FromContext(ctx).WithValues("group", g.Name))
}
