package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gateNodeCondition names the Node condition gate in logs, events and metrics.
const gateNodeCondition = "node-condition"

// The reason classes of a required condition the Node does not have, and of one whose status is
// another.
const (
	reasonNoCondition     = "no_condition"
	reasonConditionStatus = "condition_status"
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

// nodeConditionGate passes while the Node has each required condition with its status. It reads
// the Node the reconcile already holds, so it costs no request, and only an update of the Node
// that changes a required condition's status triggers the reconcile (see nodeChanged), not
// kubelet's heartbeats.
type nodeConditionGate struct {
	required []ConditionRequirement
}

func (g *nodeConditionGate) name() string { return gateNodeCondition }

func (g *nodeConditionGate) check(_ context.Context, _ client.Reader, node *corev1.Node) *gateError {
	for _, q := range g.required {
		c := findCondition(node.Status.Conditions, q.Type)
		switch {
		case c == nil:
			return &gateError{gate: gateNodeCondition, reason: reasonNoCondition,
				err: fmt.Errorf("node %s has no condition %s yet, want %s", node.Name, q.Type, q.Status)}
		case c.Status != q.Status:
			return &gateError{gate: gateNodeCondition, reason: reasonConditionStatus,
				err: fmt.Errorf("node %s has condition %s=%s, want %s", node.Name, q.Type, c.Status, q.Status)}
		}
	}
	return nil
}

// nodeChanged reports whether a required condition appeared, went or changed its status.
func (g *nodeConditionGate) nodeChanged(oldNode, newNode *corev1.Node) bool {
	for _, q := range g.required {
		before, after := findCondition(oldNode.Status.Conditions, q.Type), findCondition(newNode.Status.Conditions, q.Type)
		if (before == nil) != (after == nil) || before != nil && before.Status != after.Status {
			return true
		}
	}
	return false
}
