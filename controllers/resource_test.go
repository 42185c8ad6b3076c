package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
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
	g := &resourceGate{required: []ResourceRequirement{gpus}}
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
		{"", reasonNoResource},
		{"1", reasonNoResource},
		{"2", ""},
		{"8", ""},
	} {
		gerr := g.check(context.Background(), nil, node(tt.gpu, "4"))
		got := ""
		if gerr != nil {
			got = gerr.reason
		}
		if got != tt.reason {
			t.Errorf("with %q GPUs: reason %q, want %q (%v)", tt.gpu, got, tt.reason, gerr)
		}
	}
	if g.nodeChanged(node("2", "4"), node("2", "8")) {
		t.Error("a change of another resource counts")
	}
	if g.nodeChanged(node("2", "4"), node("2000m", "4")) {
		t.Error("the same quantity written differently counts")
	}
	if !g.nodeChanged(node("", "4"), node("2", "4")) || !g.nodeChanged(node("2", "4"), node("1", "4")) {
		t.Error("a change of the required resource does not count")
	}
}

// The reaction time counts from when the gates started passing, whatever kind of gate held the
// taint last: here the allocatable resource appears a minute after the agent started.
func TestReadyToRemovedCountsFromTheResourceAppearing(t *testing.T) {
	gpus, err := ParseResourceRequirement("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	e := newEpisodeTest(t, testNode("uid-r1", startup))
	e.set(func(r *NodeReconciler) { r.Gates, r.RequireResources = nil, []ResourceRequirement{gpus} })
	e.reconcile()
	e.clock.Step(time.Minute)
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	if err := e.c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	count, sum := histogram(t, metrics.ReadyToRemovedSeconds)
	e.reconcile()
	afterCount, afterSum := histogram(t, metrics.ReadyToRemovedSeconds)
	if afterCount != count+1 || afterSum-sum > 1 {
		t.Errorf("ready-to-removed observed %d times, %.0fs; want once, under a second after the resource appeared", afterCount-count, afterSum-sum)
	}
}
