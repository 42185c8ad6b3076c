// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseResourceRequirement(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"nvidia.com/gpu", "nvidia.com/gpu=1", ""},
		{"nvidia.com/gpu=8", "nvidia.com/gpu=8", ""},
		{"hugepages-2Mi=1Gi", "hugepages-2Mi=1Gi", ""},
		{"example.com/sriov-nic=500m", "example.com/sriov-nic=500m", ""},
		{"", "", "not a resource name"},
		{"nvidia com/gpu", "", "not a resource name"},
		{"a/b/c", "", "not a resource name"},
		{"nvidia.com/gpu=", "", "not a quantity"},
		{"nvidia.com/gpu=lots", "", "not a quantity"},
		{"nvidia.com/gpu=0", "", "must be positive"},
		{"nvidia.com/gpu=-2", "", "must be positive"},
	} {
		q, err := ParseResourceRequirement(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseResourceRequirement(%q) = %v, %v; want an error with %q", tt.in, q, err, tt.err)
		case tt.err == "" && (err != nil || q.String() != tt.want):
			t.Errorf("ParseResourceRequirement(%q) = %v, %v; want %s", tt.in, q, err, tt.want)
		}
	}
}

func TestTheResourceGateReadsAllocatable(t *testing.T) {
	gpus, err := ParseResourceRequirement("nvidia.com/gpu=2")
	if err != nil {
		t.Fatal(err)
	}
	g := NewResourceGate(gpus)
	node := func(gpu, cpu string) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
		if gpu != "" {
			n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse(gpu)
		}
		n.Name = "n1"
		return n
	}
	for _, tt := range []struct {
		gpu, reason string
	}{
		{"", ReasonNoResource},
		{"1", ReasonNoResource},
		{"2", ""},
		{"8", ""},
	} {
		err := g.Check(context.Background(), Input{Node: node(tt.gpu, "4")})
		got := ""
		if err != nil {
			got = Reason(err)
		}
		if got != tt.reason {
			t.Errorf("with %q GPUs: reason %q, want %q (%v)", tt.gpu, got, tt.reason, err)
		}
	}
	if g.NodeChanged(node("2", "4"), node("2", "8")) {
		t.Error("a change of another resource counts")
	}
	if g.NodeChanged(node("2", "4"), node("2000m", "4")) {
		t.Error("the same quantity written differently counts")
	}
	if !g.NodeChanged(node("", "4"), node("2", "4")) || !g.NodeChanged(node("2", "4"), node("1", "4")) {
		t.Error("a change of the required resource does not count")
	}
}
