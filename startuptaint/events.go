// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

// EventSource names the controller in the events it records; the admission policy lets the agent
// record events only as it.
const EventSource = "startup-taint-remover"

// Event reasons: what the reconciler says happened, in the events it records on its Node (the
// confinement check's are below). They are neither the gates' reason classes (gates.Reason*, in
// metrics, logs and notes) nor the reasons of its Node condition (controllers.ConditionReasonGatesPass,
// or the failing gate's title).
const (
	EventReasonTaintRemoved        = "TaintRemoved"
	EventReasonTaintRemovedAgain   = "TaintRemovedAgain"
	EventReasonTaintRemovedUnready = "TaintRemovedUnready"
	EventReasonRemovalFailed       = "RemovalFailed"
	EventReasonWouldRemoveTaint    = "WouldRemoveTaint"
	EventReasonTaintAddedBack      = "TaintAddedBack"
	EventReasonWouldAddTaint       = "WouldAddTaint"
	// EventReasonWaitingForDriver: a driver's gate (gates.WaitsForDriver) holds the taints;
	// EventReasonWaitingForAgent: another node agent's (an endpoint, a file, a pod, a condition).
	EventReasonWaitingForDriver = "WaitingForDriver"
	EventReasonWaitingForAgent  = "WaitingForAgent"
	// EventReasonRegisteredWithoutTaint warns, once, that a new Node registered without a group's
	// startup taints (see controllers.RegistrationWindow).
	EventReasonRegisteredWithoutTaint = "RegisteredWithoutTaint"
	// EventReasonBootRecordFull warns that the boot record (BootAnnotation) is behind and this
	// boot's entries would take it beyond its bounds, so the agent leaves it as it is.
	EventReasonBootRecordFull = "BootRecordFull"
	// EventReasonUntoleratedStartupTaint warns that pending pods in the node agents' namespaces,
	// which a node agent may need, cannot be placed on any node that carries a group's startup
	// taint, because they do not tolerate it: on a new node pool that is every node, so the agent
	// may never become ready, and the taint never go.
	EventReasonUntoleratedStartupTaint = "UntoleratedStartupTaint"
)

// Event reasons of the confinement check: EventReasonNotConfined when no admission policy judges
// the agent; EventReasonRemovalRefused when the API server refuses its dry-run removal of its
// startup taints, and EventReasonRemovalAdmitted when it admits it again.
const (
	EventReasonNotConfined     = "NotConfined"
	EventReasonRemovalRefused  = "RemovalRefused"
	EventReasonRemovalAdmitted = "RemovalAdmitted"
)
