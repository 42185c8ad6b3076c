// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import corev1 "k8s.io/api/core/v1"

// Cause is why an agent put a startup taint back on its Node, after it had removed it.
type Cause string

// The causes, one row each in PutBacks.
const (
	// CauseGate: continuous mode (--retaint-after); a readiness gate has not passed for that long.
	CauseGate Cause = "gate"
	// CauseReboot: the Node booted again since its gates last passed, and one does not pass yet.
	CauseReboot Cause = "reboot"
	// CauseShutdown: the agent stopped while kubelet shut the Node down.
	CauseShutdown Cause = "shutdown"
	// CauseCordon: the Node is cordoned, as a drain before a reboot leaves it.
	CauseCordon Cause = "cordon"
)

// PutBack is how one cause is counted and told; the agent's rule for when it holds is beside the
// reconciler (controllers/putback.go).
type PutBack struct {
	Cause Cause
	// Why is the condition under which the cause holds, as the agent's log line and the event say it.
	Why string
	// Action is the action of the TaintAddedBack event (EventReasonTaintAddedBack), by which a
	// reader tells the causes apart.
	Action string
	// Result is the result label of startup_taint_retaints_total.
	Result string
	// EventType is the event's type: Warning where pods may have landed or a gate fails.
	EventType string
	// State is the kubectl plugin's state of a taint put back for this cause.
	State string
}

// PutBacks lists every cause.
var PutBacks = []PutBack{
	{CauseGate, "a readiness gate stopped passing", "AddTaint", "added", corev1.EventTypeWarning, "put back"},
	{CauseReboot, "the node rebooted and a readiness gate does not pass yet", "AddTaintAfterReboot", "added_after_reboot",
		corev1.EventTypeWarning, "put back: rebooted"},
	{CauseShutdown, "the node is shutting down", "AddTaintAtShutdown", "added_at_shutdown", corev1.EventTypeWarning,
		"put back: shut down"},
	{CauseCordon, "the node is cordoned", "AddTaintAtCordon", "added_at_cordon", corev1.EventTypeNormal, "put back: cordoned"},
}

// PutBackOf returns cause's row; it panics on a cause PutBacks does not list, which is a
// programming error.
func PutBackOf(cause Cause) PutBack {
	for _, p := range PutBacks {
		if p.Cause == cause {
			return p
		}
	}
	panic("startuptaint: no row for put-back cause " + string(cause))
}

// PutBackByAction returns the row whose event action is action, and whether there is one.
func PutBackByAction(action string) (PutBack, bool) {
	for _, p := range PutBacks {
		if p.Action == action {
			return p, true
		}
	}
	return PutBack{}, false
}
