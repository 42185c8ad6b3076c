package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gateResource names the allocatable resource gate in logs, events and metrics.
const gateResource = "resource"

// reasonNoResource is the reason class of a Node that does not advertise enough of a resource.
const reasonNoResource = "no_resource"

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

// resourceGate passes while the Node advertises at least the required amount of each resource.
// It reads the Node the reconcile already holds, so it costs no request, and an update of the
// Node that changes one of those amounts triggers the reconcile (see nodeChanged).
type resourceGate struct {
	required []ResourceRequirement
}

func (g *resourceGate) name() string { return gateResource }

func (g *resourceGate) check(_ context.Context, _ client.Reader, node *corev1.Node) *gateError {
	for _, q := range g.required {
		have := node.Status.Allocatable[q.Name]
		if have.Cmp(q.Min) < 0 {
			return &gateError{gate: gateResource, reason: reasonNoResource,
				err: fmt.Errorf("node %s advertises %s of %s, want at least %s", node.Name, have.String(), q.Name, q.Min.String())}
		}
	}
	return nil
}

// nodeChanged reports whether the amount of any required resource differs between the two Nodes.
func (g *resourceGate) nodeChanged(oldNode, newNode *corev1.Node) bool {
	for _, q := range g.required {
		before, after := oldNode.Status.Allocatable[q.Name], newNode.Status.Allocatable[q.Name]
		if before.Cmp(after) != 0 {
			return true
		}
	}
	return false
}
