// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// NodeConditionName names the Node condition gate in logs, events and metrics.
const NodeConditionName = "node-condition"

// The reason classes of a required condition the Node does not have, and of one whose status is
// another.
const (
	ReasonNoCondition     = "no_condition"
	ReasonConditionStatus = "condition_status"
)

// ConditionRequirement asks for the Node condition Type with Status: what Node Problem Detector, a
// cloud controller or another agent publishes, such as NetworkUnavailable=False.
type ConditionRequirement struct {
	Type   corev1.NodeConditionType
	Status corev1.ConditionStatus
}

// String returns the requirement in the TYPE=STATUS form --require-condition accepts.
func (c ConditionRequirement) String() string { return string(c.Type) + "=" + string(c.Status) }

// ParseConditionRequirement parses TYPE[=STATUS]: a condition type (a qualified name) and True,
// False or Unknown, True when it is left out.
func ParseConditionRequirement(s string) (ConditionRequirement, error) {
	t, status, hasStatus := strings.Cut(s, "=")
	if errs := validation.IsQualifiedName(t); len(errs) > 0 {
		return ConditionRequirement{}, fmt.Errorf("%q: %q is not a condition type: %s", s, t, strings.Join(errs, "; "))
	}
	c := ConditionRequirement{Type: corev1.NodeConditionType(t), Status: corev1.ConditionTrue}
	if hasStatus {
		switch corev1.ConditionStatus(status) {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			c.Status = corev1.ConditionStatus(status)
		default:
			return ConditionRequirement{}, fmt.Errorf("%q: the status must be True, False or Unknown, not %q", s, status)
		}
	}
	return c, nil
}

// NodeConditionGate passes while the Node has each required condition with its status. It reads
// the Node the reconcile already holds, so it costs no request, and only an update of the Node
// that changes a required condition's status causes the reconcile (NodeChanged), not kubelet's
// heartbeats.
type NodeConditionGate struct {
	required []ConditionRequirement
}

// NewNodeConditionGate returns a gate for the required conditions.
func NewNodeConditionGate(required ...ConditionRequirement) *NodeConditionGate {
	return &NodeConditionGate{required: required}
}

// Name implements Gate.
func (g *NodeConditionGate) Name() string { return NodeConditionName }

// Check implements Gate.
func (g *NodeConditionGate) Check(_ context.Context, in Input) error {
	node := in.Node
	for _, q := range g.required {
		c := FindCondition(node.Status.Conditions, q.Type)
		switch {
		case c == nil:
			return NotReady(ReasonNoCondition, fmt.Errorf("node %s has no condition %s yet, want %s", node.Name, q.Type, q.Status))
		case c.Status != q.Status:
			return NotReady(ReasonConditionStatus, fmt.Errorf("node %s has condition %s=%s, want %s", node.Name, q.Type, c.Status, q.Status))
		}
	}
	return nil
}

// Requires reports whether the gate waits for a condition of type t.
func (g *NodeConditionGate) Requires(t corev1.NodeConditionType) bool {
	for _, q := range g.required {
		if q.Type == t {
			return true
		}
	}
	return false
}

// NodeChanged implements NodeReader: whether a required condition appeared, went or changed its
// status.
func (g *NodeConditionGate) NodeChanged(oldNode, newNode *corev1.Node) bool {
	for _, q := range g.required {
		before, after := FindCondition(oldNode.Status.Conditions, q.Type), FindCondition(newNode.Status.Conditions, q.Type)
		if (before == nil) != (after == nil) || before != nil && before.Status != after.Status {
			return true
		}
	}
	return false
}

// FindCondition returns the condition of type t among conditions, or nil.
func FindCondition(conditions []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}
