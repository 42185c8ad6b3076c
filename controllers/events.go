// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Reporting: what the reconciler's decisions found becomes metrics, events on the Node and log
// lines here. Two reporters stand apart: the confinement check's verdicts (confinement_events.go),
// and each gate's result, logged when it changes and kept in startup_taint_gate_ready
// (gatecheck.go).

// report reports what the reconcile decided for the plan's group (reportDecision), and then what
// its writes did: the condition's, and the taints' as outcome recorded it.
func (r *NodeReconciler) report(ctx context.Context, node *corev1.Node, p *plan) {
	r.reportDecision(ctx, node, p)
	if p.condition != nil {
		r.reportCondition(ctx, *p.condition, p.conditionErr)
	}
	switch {
	case p.failure != nil:
		r.reportFailure(ctx, node, startuptaint.SpecsSelecting(p.obs.held, p.specs), *p.failure)
	case p.removal != nil:
		r.reportRemoval(ctx, node, *p.removal)
	case p.putBack != nil && p.err != nil:
		r.reportPutBackFailure(*p.putBack, p.err)
	case p.putBackDone:
		r.reportPutBack(ctx, node, *p.putBack, p.cause, p.told)
	case p.recordBoot && refused(p.err):
		// An install's policy from before the boot record refuses it; the removal's own
		// confinement check reports that (RemovalRefused).
		log.FromContext(ctx).Info("the boot record was refused; a reboot will not put the taint back until it is written",
			"error", p.err.Error())
	case p.bootRecordFull:
		r.reportBootRecordFull(node, startuptaint.SpecKeys(p.specs))
	}
}

// reportBootRecordFull warns that the boot record still names another boot for keys, because
// this boot's entries would take it beyond its bounds. The agent leaves it so, holding rather than
// releasing: the crash policy puts the taint back after an outage in this boot, and the agent takes
// it off again once its gates pass, as after a reboot.
func (r *NodeReconciler) reportBootRecordFull(node *corev1.Node, keys []string) {
	r.wired.recorder.Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonBootRecordFull, "RecordBoot",
		"The boot record %s cannot take this boot's entries for %s within %d characters and %d entries, so it still "+
			"names the boot before: after an outage in this boot, the startup taint goes back until the agent's gates pass "+
			"again. Keep only the entries of installs that still run (kubectl annotate --overwrite node %s %s=KEY=BOOT,...)",
		startuptaint.BootAnnotation, strings.Join(keys, ", "), startuptaint.MaxBootRecordLength, startuptaint.MaxBootRecordEntries,
		node.Name, startuptaint.BootAnnotation)
}

// reportCSIDriver reports, once, what the group's CSIDriver means for this install (observe.go).
func (r *NodeReconciler) reportCSIDriver(ctx context.Context, read csiDriverFound) {
	logger := log.FromContext(ctx).WithValues("driver", read.name)
	if read.forbidden != nil {
		logger.Info("cannot read the driver's CSIDriver to tell whether the scheduler's own check keeps pods off this node; "+
			"the install's role lacks get on csidrivers", "error", read.forbidden.Error())
		return
	}
	r.wired.metrics.CSIDriverPreventsScheduling.WithLabelValues(read.name).Set(metrics.Bool(read.prevents))
	if read.prevents {
		logger.Info("the driver's CSIDriver sets preventPodSchedulingIfMissing: on Kubernetes 1.37 and later the scheduler keeps " +
			"pods with its PVC-backed volumes off this node until CSINode lists the driver; the startup taint still covers " +
			"CSI inline volumes, the driver's Probe health, older clusters and continuous mode")
		return
	}
	logger.Info("the driver's CSIDriver does not set preventPodSchedulingIfMissing (or there is none): the startup taint " +
		"is what keeps pods off this node until the driver is registered")
}

// reportDecision reports what observe and decide found for the plan's group: its driver's
// CSIDriver, what it observed of the taints, the wait for a gate, and a dry run's change it did not
// make.
func (r *NodeReconciler) reportDecision(ctx context.Context, node *corev1.Node, p *plan) {
	if p.csiDriver != nil {
		r.reportCSIDriver(ctx, *p.csiDriver)
	}
	r.reportObservation(ctx, node, p.specs, p.startup, p.obs)
	r.reportUntolerated(ctx, node, p.specs, p.keptAway)
	if p.waiting {
		r.reportWaiting(ctx, node, p.v.notReady, p.firstWait)
	}
	if p.wouldRemove {
		r.reportWouldRemove(ctx, node, p.obs.held, startuptaint.SpecsSelecting(p.obs.held, p.specs), p.v.notReady)
	}
	if p.wouldPutBack {
		r.reportWouldPutBack(ctx, node, startuptaint.RetaintSpec(p.specs), p.cause, p.told)
	}
}

// reportObservation sets the presence gauges, and reports taints that came back and a Node that
// registered without the group's startup taints (startup: specs less continuous mode's).
func (r *NodeReconciler) reportObservation(ctx context.Context, node *corev1.Node, specs, startup []startuptaint.TaintSpec,
	obs observation) {
	for _, spec := range specs {
		r.wired.metrics.Present.WithLabelValues(spec.String()).Set(metrics.Bool(obs.present[spec.String()]))
	}
	if obs.registeredWithout {
		list := startuptaint.SpecStrings(startup)
		log.FromContext(ctx).Info("the node registered without its startup taints: pods could be scheduled on it "+
			"before its node agent was ready; register the node pool's nodes with them", "taints", list)
		r.wired.recorder.Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonRegisteredWithoutTaint, "CheckRegistration",
			"Node registered without the startup taints %s: pods could be scheduled before its node agent was ready, "+
				"and fail (a CSI volume: driver not found). Register the node pool's nodes with the taints", list)
		for _, key := range list {
			r.wired.metrics.MissingAtRegistration.WithLabelValues(key).Set(1)
		}
	}
	for _, key := range obs.cameBack {
		log.FromContext(ctx).Info("startup taint came back", "taint", key)
		r.wired.metrics.Readded.WithLabelValues(key).Inc()
	}
	if obs.ended {
		log.FromContext(ctx).V(4).Info("startup taints removed by another writer")
	}
}

// reportUntolerated keeps the count of pods the group's startup taints keep away, and warns,
// once each time the pods change, naming them and the fix (untolerated.go).
func (r *NodeReconciler) reportUntolerated(ctx context.Context, node *corev1.Node, specs []startuptaint.TaintSpec, keptAway untolerated) {
	for _, spec := range specs {
		r.wired.metrics.UntoleratedPods.WithLabelValues(spec.String()).Set(float64(keptAway.total))
	}
	switch {
	case keptAway.refused:
		log.FromContext(ctx).Info("cannot list the pending pods of the node agents' namespaces to name the pods the startup "+
			"taints keep away; grant the install's node-agents role there", "error", keptAway.lookErr.Error())
	case keptAway.lookErr != nil:
		log.FromContext(ctx).V(4).Info("looking for pods the startup taints keep away", "error", keptAway.lookErr.Error())
	}
	if !keptAway.changed || keptAway.total == 0 {
		return
	}
	pods := make([]string, 0, len(keptAway.pods))
	for _, p := range keptAway.pods {
		pods = append(pods, p.pod)
	}
	note := keptAway.note()
	log.FromContext(ctx).Info("pending pods do not tolerate the startup taints; if a node agent needs them, the taints never go",
		"pods", pods, "total", keptAway.total)
	r.wired.recorder.Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonUntoleratedStartupTaint, "CheckTolerations",
		"%s", elide(note, maxNote))
}

// reportWaiting reports a gate that holds the taint: an event the first time its gate and reason
// class hold it in this episode. The gates log their own changes.
func (r *NodeReconciler) reportWaiting(ctx context.Context, node *corev1.Node, gerr *gateError, first bool) {
	log.FromContext(ctx).V(4).Info("holding startup taints", "gate", gerr.gate, "reason", gerr.reason)
	if first {
		reason := startuptaint.EventReasonWaitingForAgent
		if gates.WaitsForDriver(gerr.gate) {
			reason = startuptaint.EventReasonWaitingForDriver
		}
		// An action of its own per gate and reason class: the recorder folds events of one
		// reason and action into one series, which would keep only the first one's note.
		action := "WaitFor" + strings.TrimSuffix(gerr.title, "NotReady") + gates.CamelCase(gerr.reason)
		r.wired.recorder.Eventf(node, nil, corev1.EventTypeNormal, reason, action, "Holding startup taints: %s", gerr.Error())
	}
}

// reportRemoval reports a successful removal: metrics, an event and a log line.
func (r *NodeReconciler) reportRemoval(ctx context.Context, node *corev1.Node, rem removal) {
	for _, key := range rem.specs {
		r.wired.metrics.Removals.WithLabelValues(key, metrics.ResultRemoved).Inc()
		r.wired.metrics.Present.WithLabelValues(key).Set(0)
		if rem.unready != nil {
			r.wired.metrics.ForcedRemovals.WithLabelValues(key).Inc()
		}
	}
	if rem.unready == nil {
		r.wired.metrics.ReadyToRemovedSeconds.Observe(rem.readyFor.Seconds())
	}
	if rem.first {
		r.wired.metrics.RemovalSeconds.Observe(rem.sinceCreation.Seconds())
	}
	if rem.permissionsChanged {
		r.permissionsChanged()
	}
	logger := log.FromContext(ctx)
	if rem.unready != nil {
		// The deadline counts from the Node's creation, or for taints that came back after a
		// reboot from when this process found them back.
		since, from, key := rem.sinceCreation, "the node was created", "sinceNodeCreation"
		if rem.cameBack {
			since, from, key = rem.heldFor, "they came back", "heldFor"
		}
		logger.Info("removed startup taints although a gate does not pass: the maximum wait has passed",
			"taints", rem.taints, "gate", rem.unready.gate, "reason", rem.unready.reason, key, since.Round(time.Millisecond).String())
		r.wired.recorder.Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonTaintRemovedUnready, "RemoveTaint",
			"Removed startup taints %v after the maximum wait (%s after %s) although %s",
			rem.taints, since.Round(time.Second), from, rem.unready.Error())
		return
	}
	if rem.cameBack {
		held := rem.heldFor.Round(time.Millisecond)
		logger.Info("removed startup taints again", "taints", rem.taints, "heldFor", held.String())
		r.wired.recorder.Eventf(node, nil, corev1.EventTypeNormal, startuptaint.EventReasonTaintRemovedAgain, "RemoveTaint",
			"Startup taints %v came back and were removed again after %s", rem.taints, held)
		return
	}
	logger.Info("removed startup taints", "taints", rem.taints, "sinceNodeCreation", rem.sinceCreation.Round(time.Millisecond).String())
	r.wired.recorder.Eventf(node, nil, corev1.EventTypeNormal, startuptaint.EventReasonTaintRemoved, "RemoveTaint",
		"Removed startup taints %v, %s after the node was created", rem.taints, rem.sinceCreation.Round(time.Second))
}

// reportWouldRemove reports the removal a dry run would have made: the counter, an event and a
// log line. unready is the gate that still did not pass when the removal would have been forced.
func (r *NodeReconciler) reportWouldRemove(ctx context.Context, node *corev1.Node, held []corev1.Taint, specs []startuptaint.TaintSpec,
	unready *gateError) {
	for _, spec := range specs {
		r.wired.metrics.Removals.WithLabelValues(spec.String(), metrics.ResultDryRun).Inc()
	}
	why := "every readiness gate passes"
	if unready != nil {
		why = "the maximum wait has passed, although " + unready.Error()
	}
	taints := startuptaint.TaintStrings(held)
	log.FromContext(ctx).Info("dry run: would remove startup taints", "taints", taints, "why", why)
	r.wired.recorder.Eventf(node, nil, corev1.EventTypeNormal, startuptaint.EventReasonWouldRemoveTaint, "RemoveTaint",
		"Dry run: would remove startup taints %v now: %s", taints, why)
}

// reportPutBack reports a startup taint put back, for cause: the counter, an event and a log line.
func (r *NodeReconciler) reportPutBack(ctx context.Context, node *corev1.Node, spec startuptaint.TaintSpec, cause startuptaint.Cause,
	t told) {
	row := startuptaint.PutBackOf(cause)
	r.wired.metrics.Retaints.WithLabelValues(spec.String(), row.Result).Inc()
	log.FromContext(ctx).Info("put a startup taint back: "+row.Why, append([]any{"taint", spec.String()}, t.details...)...)
	r.wired.recorder.Eventf(node, nil, row.EventType, startuptaint.EventReasonTaintAddedBack, row.Action,
		"Put startup taint %s back: %s; it comes off %s", spec, t.why, t.until)
}

// reportPutBackFailure counts a failed re-taint by class; the error is returned, and logged by
// controller-runtime.
func (r *NodeReconciler) reportPutBackFailure(spec startuptaint.TaintSpec, err error) {
	r.wired.metrics.Retaints.WithLabelValues(spec.String(), failureClass(err)).Inc()
}

// reportWouldPutBack reports the taint a dry run would have put back, for cause: the counter, an
// event and a log line.
func (r *NodeReconciler) reportWouldPutBack(ctx context.Context, node *corev1.Node, spec startuptaint.TaintSpec,
	cause startuptaint.Cause, t told) {
	r.wired.metrics.Retaints.WithLabelValues(spec.String(), metrics.ResultDryRun).Inc()
	log.FromContext(ctx).Info("dry run: would put a startup taint back", append([]any{"taint", spec.String()}, t.details...)...)
	r.wired.recorder.Eventf(node, nil, corev1.EventTypeNormal, startuptaint.EventReasonWouldAddTaint, startuptaint.PutBackOf(cause).Action,
		"Dry run: would put startup taint %s back now: %s", spec, t.why)
}

// reportCondition reports a write of the Node condition: the counter, and a log line when it
// was written (a failure is returned, and logged by the caller's caller).
func (r *NodeReconciler) reportCondition(ctx context.Context, c corev1.NodeCondition, err error) {
	if err != nil {
		r.wired.metrics.ConditionWrites.WithLabelValues(string(c.Status), failureClass(err)).Inc()
		return
	}
	r.wired.metrics.ConditionWrites.WithLabelValues(string(c.Status), metrics.ResultWritten).Inc()
	log.FromContext(ctx).Info("wrote the node condition", "type", c.Type, "status", c.Status, "reason", c.Reason)
}

// reportFailure reports a failed removal of the taints specs selected: the counter on every
// attempt, an event (and for a forbidden patch, the one log line) when the failure class changes.
func (r *NodeReconciler) reportFailure(ctx context.Context, node *corev1.Node, specs []startuptaint.TaintSpec, f failure) {
	if f.result != metrics.ResultConflict { // each conflict was counted as it happened
		for _, spec := range specs {
			r.wired.metrics.Removals.WithLabelValues(spec.String(), f.result).Inc()
		}
	}
	if f.permissionsChanged {
		r.permissionsChanged()
	}
	if !f.changed {
		return
	}
	const failed = "Could not remove startup taints: "
	r.wired.recorder.Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonRemovalFailed, "RemoveTaint", "%s%s",
		failed, elide(f.err.Error(), maxNote-len(failed)))
	if f.result == metrics.ResultForbidden {
		log.FromContext(ctx).Error(f.err, "not allowed to remove startup taints; retrying with backoff until the permission is granted")
	}
}

// reportConflict counts, for each plan that removes taints, a patch that lost a race with another
// writer; orig is the Node the lost patch was made from.
func (r *NodeReconciler) reportConflict(orig *corev1.Node, plans []*plan) {
	for _, p := range plans {
		if p.remove {
			for _, spec := range startuptaint.SpecsSelecting(orig.Spec.Taints, p.specs) {
				r.wired.metrics.Removals.WithLabelValues(spec.String(), metrics.ResultConflict).Inc()
			}
		}
	}
}

// permissionsChanged asks for a new confinement check: a patch that was allowed is now
// forbidden, or the other way round.
func (r *NodeReconciler) permissionsChanged() {
	if r.Confinement != nil {
		r.Confinement.CheckAgain()
	}
}
