// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ResourceName names the allocatable resource gate in logs, events and metrics.
const ResourceName = "resource"

// ReasonNoResource is the reason class of a Node that does not advertise enough of a resource.
const ReasonNoResource = "no_resource"

// ResourceRequirement asks for at least Min of the resource Name in the Node's
// status.allocatable: what a device plugin (GPUs, FPGAs, SR-IOV NICs) advertises through kubelet
// once it has registered.
type ResourceRequirement struct {
	Name corev1.ResourceName
	Min  resource.Quantity
}

// String returns the requirement in the NAME=MIN form --require-resource accepts.
func (q ResourceRequirement) String() string { return string(q.Name) + "=" + q.Min.String() }

// ParseResourceRequirement parses NAME[=MIN]: a resource name (a qualified name, such as
// nvidia.com/gpu) and a positive quantity, 1 when it is left out.
func ParseResourceRequirement(s string) (ResourceRequirement, error) {
	name, minimum, hasMin := strings.Cut(s, "=")
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return ResourceRequirement{}, fmt.Errorf("%q: %q is not a resource name: %s", s, name, strings.Join(errs, "; "))
	}
	q := ResourceRequirement{Name: corev1.ResourceName(name), Min: resource.MustParse("1")}
	if hasMin {
		parsed, err := resource.ParseQuantity(minimum)
		if err != nil {
			return ResourceRequirement{}, fmt.Errorf("%q: %q is not a quantity", s, minimum)
		}
		if parsed.Sign() <= 0 {
			return ResourceRequirement{}, fmt.Errorf("%q: the minimum must be positive", s)
		}
		q.Min = parsed
	}
	return q, nil
}

// ResourceGate passes while the Node advertises at least the required amount of each resource.
// It reads the Node the reconcile already holds, so it costs no request, and an update of the
// Node that changes one of those amounts causes the reconcile (NodeChanged).
type ResourceGate struct {
	required []ResourceRequirement
}

// NewResourceGate returns a gate for the required amounts.
func NewResourceGate(required ...ResourceRequirement) *ResourceGate {
	return &ResourceGate{required: required}
}

// Name implements Gate.
func (g *ResourceGate) Name() string { return ResourceName }

// Check implements Gate.
func (g *ResourceGate) Check(_ context.Context, in Input) error {
	for _, q := range g.required {
		have := in.Node.Status.Allocatable[q.Name]
		if have.Cmp(q.Min) < 0 {
			return NotReady(ReasonNoResource,
				fmt.Errorf("node %s advertises %s of %s, want at least %s", in.Node.Name, have.String(), q.Name, q.Min.String()))
		}
	}
	return nil
}

// NodeChanged implements NodeReader: whether the amount of any required resource differs.
func (g *ResourceGate) NodeChanged(oldNode, newNode *corev1.Node) bool {
	for _, q := range g.required {
		before, after := oldNode.Status.Allocatable[q.Name], newNode.Status.Allocatable[q.Name]
		if before.Cmp(after) != 0 {
			return true
		}
	}
	return false
}
