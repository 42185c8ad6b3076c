// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Putting a startup taint back, once an agent has removed it: each cause of startuptaint.PutBacks
// has its rule here. A rule is tried only for a group none of whose startup taints is on the Node;
// the first that holds puts the group's taint back (startuptaint.RetaintSpec).

// A rebooted node keeps its Node object, and kubelet's --register-with-taints acts only when the
// Node is created, so the node comes back without its startup taints and takes pods as soon as
// kubelet reports Ready, before its agents are back. The boot record tells the agent, and the
// admission policy, that the node rebooted since the agent last found its gates passing: then
// the taint goes back on at once, until the gates pass again. That comes after kubelet's Ready,
// so pods pending for the node can land first; a node drained for a reboot is cordoned first,
// and the agent puts its taint back then, and holds it while the node is cordoned, so the node
// comes back tainted.

// when a rule is tried: at a reconcile, as the agent stops (shutdown.go), or both.
type when uint8

const (
	atReconcile when = 1 << iota
	atStop
)

// putBackRule is a cause's rule: when it is tried, whether it holds, and what the event's note
// says beyond the cause's Why.
type putBackRule struct {
	cause startuptaint.Cause
	when  when
	// holds reports whether the cause puts the group's taint back now.
	holds func(r *NodeReconciler, node *corev1.Node, f *facts) bool
	// wait, when set, is how long until the cause may hold, when it does not yet: decide asks to
	// be called again then.
	wait func(r *NodeReconciler, f *facts) time.Duration
	// changed, when set, reports whether a Node update changed what holds reads, so that the
	// update causes a reconcile (nodeChanged).
	changed func(oldNode, newNode *corev1.Node) bool
	// tell is what the event and the log line say beyond the cause's row.
	tell func(r *NodeReconciler, node *corev1.Node, v verdict) told
}

// putBackRules are tried in this order.
var putBackRules = []putBackRule{
	{cause: startuptaint.CauseShutdown, when: atStop, holds: shuttingDownRule,
		tell: staticTell("once every gate passes after the boot")},
	{cause: startuptaint.CauseCordon, when: atReconcile | atStop, holds: cordonedRule, changed: cordonChanged,
		tell: staticTell("once the node is uncordoned and every gate passes")},
	{cause: startuptaint.CauseReboot, when: atReconcile, holds: rebootedRule, changed: bootChanged, tell: rebootTell},
	// The gates' watches and the prober reconcile when a gate's verdict changes.
	{cause: startuptaint.CauseGate, when: atReconcile, holds: gateFailingRule, wait: gateFailingWait, tell: gateFailingTell},
}

// ruleOf returns cause's rule.
func ruleOf(cause startuptaint.Cause) putBackRule {
	for _, rule := range putBackRules {
		if rule.cause == cause {
			return rule
		}
	}
	panic("controllers: no rule for put-back cause " + string(cause))
}

// shuttingDownRule: kubelet says the Node is shutting down (shutdown.go).
func shuttingDownRule(_ *NodeReconciler, node *corev1.Node, _ *facts) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse &&
			strings.Contains(c.Message, startuptaint.NodeShuttingDownMessage) {
			return true
		}
	}
	return false
}

// cordonedRule: the Node is cordoned and its boot was recorded for the group, as a drain before a
// reboot leaves it; the taint is then held until it is uncordoned (holdWhileCordoned).
func cordonedRule(_ *NodeReconciler, node *corev1.Node, f *facts) bool {
	return node.Spec.Unschedulable && f.putsBack
}

// cordonChanged: a cordon, or an uncordon, which ends the hold (holdWhileCordoned).
func cordonChanged(oldNode, newNode *corev1.Node) bool {
	return oldNode.Spec.Unschedulable != newNode.Spec.Unschedulable
}

// rebootedRule: a gate does not pass, once probed, on a Node that booted again since the group's
// gates last passed (the boot record, observe.go).
func rebootedRule(_ *NodeReconciler, _ *corev1.Node, f *facts) bool {
	notReady := f.v.notReady
	return notReady != nil && notReady.reason != gates.ReasonNotProbed && f.bootedAgain
}

// bootChanged: a reboot kubelet reports after the agent started.
func bootChanged(oldNode, newNode *corev1.Node) bool {
	return oldNode.Status.NodeInfo.BootID != newNode.Status.NodeInfo.BootID
}

// Continuous mode (RetaintAfter): the startup taint goes back on when a gate stops passing for
// long enough, and comes off once every gate has passed for as long again.

// gateFailingRule: continuous mode, once a gate has not passed for RetaintAfter.
func gateFailingRule(r *NodeReconciler, _ *corev1.Node, f *facts) bool {
	return gateFailing(r, f) && gateFailingWait(r, f) == 0
}

// gateFailingWait: until a failing gate has not passed for RetaintAfter; the prober calls sooner
// if the gate passes again.
func gateFailingWait(r *NodeReconciler, f *facts) time.Duration {
	if !gateFailing(r, f) {
		return 0
	}
	return max(r.RetaintAfter-f.v.failingFor, 0)
}

// gateFailing reports whether continuous mode is on and a gate, once probed, does not pass.
func gateFailing(r *NodeReconciler, f *facts) bool {
	return r.RetaintAfter > 0 && f.v.notReady != nil && f.v.notReady.reason != gates.ReasonNotProbed
}

// told is what a taint put back is reported with beyond its cause's row: why it went back (the
// row's Why when empty), when it comes off, and the log line's details.
type told struct {
	why, until string
	details    []any
}

// staticTell tells a cause whose note is its Why, and when the taint comes off.
func staticTell(until string) func(*NodeReconciler, *corev1.Node, verdict) told {
	return func(*NodeReconciler, *corev1.Node, verdict) told { return told{until: until} }
}

func rebootTell(_ *NodeReconciler, node *corev1.Node, v verdict) told {
	boot := node.Status.NodeInfo.BootID
	return told{why: fmt.Sprintf("the node rebooted (boot %s): %s", boot, v.notReady.Error()), until: "once every gate passes",
		details: []any{"bootID", boot, "gate", v.notReady.gate, "reason", v.notReady.reason}}
}

func gateFailingTell(r *NodeReconciler, _ *corev1.Node, v verdict) told {
	failing := v.failingFor.Round(time.Millisecond)
	return told{why: fmt.Sprintf("%s for %s", v.notReady.Error(), failing.Round(time.Second)),
		until:   fmt.Sprintf("once every gate has passed for %s", r.RetaintAfter),
		details: []any{"gate", v.notReady.gate, "reason", v.notReady.reason, "failingFor", failing.String()}}
}

// tell is what a taint put back for cause is reported with, from the Node and the verdict that
// put it back.
func (r *NodeReconciler) tell(node *corev1.Node, cause startuptaint.Cause, v verdict) told {
	t := ruleOf(cause).tell(r, node, v)
	if t.why == "" {
		t.why = startuptaint.PutBackOf(cause).Why
	}
	return t
}

// decidePutBack decides, for a group none of whose startup taints is on the Node, whether a cause
// puts its taint back at once. Once the gates pass and none does, the boot record is brought up
// to this boot, so that a later restart of the agent in the same boot (a rollout) never reads as
// a reboot.
func (r *NodeReconciler) decidePutBack(node *corev1.Node, f *facts) decision {
	var d decision
	for _, rule := range putBackRules {
		if rule.when&atReconcile == 0 {
			continue
		}
		if rule.holds(r, node, f) {
			return r.putBackFor(node, f, rule.cause)
		}
		if rule.wait != nil {
			d.requeue = sooner(d.requeue, rule.wait(r, f))
		}
	}
	if f.v.notReady == nil && !r.DryRun && bootBehind(node, f.specs) {
		_, d.recordBoot = bootRecordWith(node, startuptaint.SpecKeys(f.specs))
		d.bootRecordFull = !d.recordBoot
	}
	return d
}

// bootBehind reports whether the record should be brought up to this boot for the group's specs:
// an entry of theirs is from another boot, or one is missing while the Node's removed record says
// the taint was removed once (by an agent from before the boot record, or its entry was lost);
// never for a record beyond startuptaint's bounds, nor while the Node reports no boot ID. One
// that this boot's entries would take beyond them stays behind: bootRecordWith says so.
func bootBehind(n *corev1.Node, specs []startuptaint.TaintSpec) bool {
	boot := startuptaint.BootID(n)
	if v, ok := n.Annotations[startuptaint.BootAnnotation]; boot == "" || ok && !startuptaint.BootRecordReadable(v) {
		// recordBoot would leave it as it is.
		return false
	}
	removed := startuptaint.RemovedRecord(n)
	for _, key := range startuptaint.SpecKeys(specs) {
		recorded, ok := startuptaint.RecordedBoot(n, key)
		if ok && recorded != boot || !ok && slices.ContainsFunc(removed, func(s string) bool { return strings.Split(s, ":")[0] == key }) {
			return true
		}
	}
	return false
}

// putBackChanged reports whether a Node update changed what a put-back rule reads.
func putBackChanged(oldNode, newNode *corev1.Node) bool {
	return slices.ContainsFunc(putBackRules, func(rule putBackRule) bool {
		return rule.changed != nil && rule.changed(oldNode, newNode)
	})
}

// causeAtStop returns the cause that puts the group's taint back as the agent stops, if one holds.
func (r *NodeReconciler) causeAtStop(node *corev1.Node, f *facts) (startuptaint.Cause, bool) {
	for _, rule := range putBackRules {
		if rule.when&atStop != 0 && rule.holds(r, node, f) {
			return rule.cause, true
		}
	}
	return "", false
}

// putBackFor decides the group's taint back for cause; a dry run only says it would, once per episode.
func (r *NodeReconciler) putBackFor(node *corev1.Node, f *facts, cause startuptaint.Cause) decision {
	d := decision{cause: cause, told: r.tell(node, cause, f.v)}
	if r.DryRun {
		d.wouldPutBack = f.g.state.firstWouldPutBack()
		return d
	}
	spec := startuptaint.RetaintSpec(f.specs)
	d.putBack = &spec
	return d
}
