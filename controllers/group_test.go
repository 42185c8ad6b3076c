// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

func TestEachGroupsFirstRemovalIsCountedOnceWhateverTheOthersDid(t *testing.T) {
	count, _ := histogram(t, metrics.Default().RemovalSeconds)
	g := newGroupsTest(t, nil)
	g.flip(false, true)
	g.reconcile()
	g.flip(true, true)
	g.reconcile()
	if c, _ := histogram(t, metrics.Default().RemovalSeconds); c-count != 2 {
		t.Fatalf("%d samples, want one first removal per group", c-count)
	}

	// A restart, and both taints back: neither removal is a first one now.
	g.events()
	g.setTaints(diskTaint, fileTaint)
	g.set(func(*NodeReconciler) {})
	g.reconcile()
	if c, _ := histogram(t, metrics.Default().RemovalSeconds); c-count != 2 {
		t.Fatalf("%d samples after the restart, want still 2", c-count)
	}
	expectEvents(t, g.events(), "Normal TaintRemovedAgain Startup taints [disk.example.com/agent-not-ready:NoExecute]",
		"Normal TaintRemovedAgain Startup taints [file.example.com/agent-not-ready:NoSchedule]")
}

func TestGroupsThatPassTogetherGoInOnePatch(t *testing.T) {
	var sent map[string]any
	g := newGroupsTest(t, func(obj client.Object, p client.Patch) error {
		data, err := p.Data(obj)
		if err == nil {
			err = json.Unmarshal(data, &sent)
		}
		return err
	})
	g.flip(true, true)
	g.reconcile()
	if g.patches != 1 {
		t.Fatalf("%d patches, want one for both groups", g.patches)
	}
	if got := g.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v, want only the foreign one", got)
	}
	if _, locked := sent["metadata"].(map[string]any)["resourceVersion"]; !locked {
		t.Fatalf("patch %v is not locked to the resourceVersion", sent)
	}
	expectEvents(t, g.events(), "Normal TaintRemoved Removed startup taints [disk.example.com/agent-not-ready:NoExecute]",
		"Normal TaintRemoved Removed startup taints [file.example.com/agent-not-ready:NoSchedule]")
}

func TestAGroupTheAdmissionPolicyRefusesHoldsBackOnlyItself(t *testing.T) {
	// As a policy that does not list the file group's taint would: any patch removing it is refused.
	refused := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("may only remove "+diskTaint.Key))
	g := newGroupsTest(t, func(obj client.Object, p client.Patch) error {
		data, err := p.Data(obj)
		if err != nil {
			return err
		}
		var sent struct {
			Spec struct{ Taints []corev1.Taint } `json:"spec"`
		}
		if err := json.Unmarshal(data, &sent); err != nil {
			return err
		}
		if len(startuptaint.MatchingTaints(sent.Spec.Taints, []startuptaint.TaintSpec{{Key: fileTaint.Key}})) == 0 {
			return refused
		}
		return nil
	})
	g.flip(true, true)
	wait := g.reconcile()
	if got := g.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, fileTaint}) {
		t.Fatalf("taints %v: the disk group's taint must go although the file group's is refused", got)
	}
	if wait != time.Second {
		t.Fatalf("requeue after %s, want the refused group's first backoff, 1s", wait)
	}
	evs := g.events()
	expectEvents(t, evs, "Normal TaintRemoved Removed startup taints [disk.example.com/agent-not-ready:NoExecute]",
		"Warning RemovalFailed Could not remove startup taints")
	if !strings.Contains(evs[1], "may only remove "+diskTaint.Key) {
		t.Fatalf("event %q does not carry the refusal", evs[1])
	}
	// Both together (refused), then each alone: disk's accepted, file's refused.
	if g.patches != 3 {
		t.Fatalf("%d patches, want 3", g.patches)
	}
}

// Validation names each problem's field by its path, which cmd turns into a flag's name.
func TestGroupsAreValidated(t *testing.T) {
	gate := []gates.Gate{&flipGate{}}
	disk := Group{Name: "disk", Taints: []startuptaint.TaintSpec{{Key: diskTaint.Key}}, Gates: gate}
	tests := []struct {
		name   string
		change func(*NodeReconciler)
		want   string
	}{
		{"no node", func(r *NodeReconciler) { r.NodeName = "" }, "nodeName: Required value"},
		{"a negative deadline", func(r *NodeReconciler) { r.MaxWait = -1 }, "maxWait: Invalid value"},
		{"no group", func(r *NodeReconciler) { r.Groups = nil }, "groups: Required value"},
		{"a nameless group among several", func(r *NodeReconciler) { r.Groups[1].Name = "" }, `groups[1].name: Invalid value: ""`},
		{"a name taken twice", func(r *NodeReconciler) { r.Groups[1].Name = "disk" }, `groups[1].name: Duplicate value: "disk"`},
		{"a taint key in two groups", func(r *NodeReconciler) {
			r.Groups[1].Taints = []startuptaint.TaintSpec{{Key: diskTaint.Key, Effect: corev1.TaintEffectNoSchedule}}
		}, `groups[1].taints[0]: Forbidden: disk.example.com/agent-not-ready is group disk's too`},
		{"a condition type in two groups", func(r *NodeReconciler) {
			r.Groups[0].ConditionType, r.Groups[1].ConditionType = "example.com/Ready", "example.com/Ready"
		}, `groups[1].conditionType: Invalid value: "example.com/Ready": is group disk's`},
		{"a condition type kubelet writes", func(r *NodeReconciler) { r.Groups[1].ConditionType = "Ready" },
			`groups[1].conditionType: Invalid value: "Ready": is a condition kubelet writes`},
		{"a condition written in a dry run", func(r *NodeReconciler) { r.Groups[1].ConditionType, r.DryRun = "example.com/Ready", true },
			"groups[1].conditionType: Forbidden: cannot be written with a dry run"},
		{"a group that waits for its own condition", func(r *NodeReconciler) {
			r.Groups[1].ConditionType = "example.com/Ready"
			r.Groups[1].Gates = append(gate, gates.NewNodeConditionGate(gates.ConditionRequirement{Type: "example.com/Ready", Status: "True"}))
		}, "groups[1].gates[1]: Forbidden: example.com/Ready is the condition this group writes"},
		{"a group without a gate", func(r *NodeReconciler) { r.Groups[1].Gates = nil }, "groups[1].gates: Required value: no readiness gate"},
		{"a nil gate", func(r *NodeReconciler) { r.Groups[1].Gates = []gates.Gate{nil} }, "groups[1].gates[0]: Required value"},
		{"a group without taints or a driver to name one", func(r *NodeReconciler) { r.Groups[1].Taints = nil },
			"groups[1].taints: Required value: required when no gate names a driver"},
		{"continuous mode and a group without taints", func(r *NodeReconciler) {
			r.RetaintAfter = 1
			csi, _ := gates.NewCSIGate("/csi/csi.sock", 0)
			r.Groups[1] = Group{Name: "csi", Gates: []gates.Gate{csi}}
		}, "groups[1].taints: Required value: required by continuous mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &NodeReconciler{NodeName: "n1", Groups: []Group{disk,
				{Name: "file", Taints: []startuptaint.TaintSpec{{Key: fileTaint.Key}}, Gates: gate}}}
			if errs := r.Validate(); len(errs) > 0 {
				t.Fatalf("the valid groups: %v", errs)
			}
			tt.change(r)
			if errs := r.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("errors %v, want one containing %q", errs, tt.want)
			}
		})
	}
	lone := &NodeReconciler{NodeName: "n1", Groups: []Group{{Taints: disk.Taints, Gates: gate}}}
	if errs := lone.Validate(); len(errs) > 0 {
		t.Fatalf("a lone group needs no name: %v", errs)
	}
}

func TestAGroupsRetaintGoesInTheSamePatchAsAnotherGroupsRemoval(t *testing.T) {
	g := newGroupsTest(t, nil)
	g.set(func(r *NodeReconciler) {
		r.RetaintAfter = 30 * time.Second
		r.Groups[0].Taints = []startuptaint.TaintSpec{{Key: diskTaint.Key, Effect: corev1.TaintEffectNoExecute}}
	})
	g.flip(true, false)
	g.reconcile()
	g.setTaints(foreign, fileTaint) // the disk group's taint is gone
	g.flip(false, false)
	g.reconcile()
	g.clock.Step(30 * time.Second)
	g.flip(false, true)
	before := g.patches
	g.reconcile()
	back := corev1.Taint{Key: diskTaint.Key, Effect: corev1.TaintEffectNoSchedule}
	if got := g.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, back}) {
		t.Fatalf("taints %v: want the file group's removed and the disk group's put back", got)
	}
	if got := g.patches - before; got != 1 {
		t.Fatalf("%d patches, want one for both groups' changes", got)
	}
}

// The fake client and a recorder are enough to run a reconciler with Groups built from scratch.
func TestALoneGroupsGateIsLabelledByItsName(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("uid-b", diskTaint)).Build()
	r := &NodeReconciler{Client: c, APIReader: c, NodeName: "n1", Recorder: events.NewFakeRecorder(10),
		Clock:  clocktesting.NewFakeClock(testStart),
		Groups: []Group{{Taints: []startuptaint.TaintSpec{{Key: diskTaint.Key}}, Gates: []gates.Gate{&flipGate{}}}}}
	if errs := r.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	r.build()
	metrics.Default().GateReady.WithLabelValues("flip").Set(0) // as other tests may have left it
	probe(r)
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("flip")); got != 1 {
		t.Fatalf(`a lone unnamed group's gate is labelled "flip" as before: got %v`, got)
	}
}

func TestConditionsOnlyNeedsAConditionAndRefusesTaintWrites(t *testing.T) {
	group := Group{Taints: []startuptaint.TaintSpec{{Key: "readiness.k8s.io/EBSCSIDriverReady"}}, Gates: []gates.Gate{&flipGate{}}}
	for _, tc := range []struct {
		name   string
		change func(*NodeReconciler)
		want   string
	}{
		{"a group without a condition", func(*NodeReconciler) {}, "groups[0].conditionType: Required value: required by conditions-only mode"},
		{"with --max-wait", func(r *NodeReconciler) {
			r.Groups[0].ConditionType, r.MaxWait = "readiness.k8s.io/EBSCSIDriverReady", time.Minute
		},
			"maxWait: Forbidden: removes taints, which conditions-only mode never writes"},
		{"with --retaint-after", func(r *NodeReconciler) {
			r.Groups[0].ConditionType, r.RetaintAfter = "readiness.k8s.io/EBSCSIDriverReady", time.Minute
		}, "retaintAfter: Forbidden: puts taints back"},
		{"with a condition", func(r *NodeReconciler) { r.Groups[0].ConditionType = "readiness.k8s.io/EBSCSIDriverReady" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &NodeReconciler{NodeName: "n1", ConditionsOnly: true, Groups: []Group{group}}
			tc.change(r)
			errs := r.Validate()
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("got %v, want one error containing %q", errs, tc.want)
			}
		})
	}
}
