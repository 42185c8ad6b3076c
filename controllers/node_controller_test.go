// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The manager's cache and REST mapping are collected from the gates that read API objects: each
// kind once, however many groups read it, and nothing no gate reads.
func TestTheManagerOptionsComeFromTheGates(t *testing.T) {
	gpus, err := gates.ParseResourceRequirement("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	csi := func() *gates.CSIGate { g, _ := gates.NewCSIGate("/csi/csi.sock", 0); return g }
	agent := types.NamespacedName{Namespace: "kube-system", Name: "agent-x"}
	disk, file := CSIDriverGroup("n1", csi()), CSIDriverGroup("n1", csi())
	disk.Name, disk.Gates = "disk", append(disk.Gates, gates.NewContainerGate("n1", agent, "driver"))
	file.Name, file.Gates = "file", append(file.Gates, gates.NewResourceGate(gpus))
	r := &NodeReconciler{NodeName: "n1", Groups: []Group{disk, file}}
	byObject := r.CacheOptions().ByObject
	cached := make([]string, 0, len(byObject))
	for obj := range byObject {
		cached = append(cached, fmt.Sprintf("%T", obj))
	}
	slices.Sort(cached)
	if want := []string{"*v1.CSINode", "*v1.Node", "*v1.Pod"}; !slices.Equal(cached, want) {
		t.Errorf("cached %v, want %v (the resource gate reads the Node the reconcile holds)", cached, want)
	}
	mapper, err := r.RESTMapper(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]bool{"Node": true, "CSINode": true, "Pod": true, "ResourceSlice": false} {
		gvk := corev1.SchemeGroupVersion.WithKind(kind)
		if kind == "CSINode" {
			gvk.Group, gvk.Version = "storage.k8s.io", "v1"
		}
		if kind == "ResourceSlice" {
			gvk.Group, gvk.Version = "resource.k8s.io", "v1"
		}
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); (err == nil) != want {
			t.Errorf("a mapping of %s: %v, want one: %v", kind, err, want)
		}
	}
}

// Two reconcilers in one process, each given a registry of its own, keep their series apart: the
// one whose taint is gone reports it absent, the other's still present.
func TestEachReconcilerReportsIntoItsOwnRegisterer(t *testing.T) {
	registries := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	reconcilers := make([]*NodeReconciler, 0, len(registries))
	for i, reg := range registries {
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).Build()
		r := newTestReconciler(t, c)
		r.Registerer = reg
		r.build()
		probe(r)
		if i == 0 {
			if err := reconcileNode(t, r); err != nil {
				t.Fatal(err)
			}
		}
		reconcilers = append(reconcilers, r)
	}
	if got := testutil.ToFloat64(reconcilers[0].wired.metrics.Present.WithLabelValues(startup.Key)); got != 0 {
		t.Errorf("the first reconciler's startup_taint_present = %v after its removal, want 0", got)
	}
	if n, err := testutil.GatherAndCount(registries[0], "startup_taint_removals_total"); err != nil || n != 1 {
		t.Errorf("the first registry holds %d removal series (%v), want 1", n, err)
	}
	if n, err := testutil.GatherAndCount(registries[1], "startup_taint_removals_total"); err != nil || n != 0 {
		t.Errorf("the second registry holds %d removal series (%v), want none: it removed nothing", n, err)
	}
}

// Kubelet rewrites every condition's heartbeat every few seconds on every Node: only a change of a
// required condition may cost a reconcile.
func TestOnlyARequiredConditionsChangeCausesAReconcile(t *testing.T) {
	r := &NodeReconciler{NodeName: "n1", Groups: []Group{{Name: "net", Taints: []startuptaint.TaintSpec{{Key: startup.Key}},
		Gates: []gates.Gate{gates.NewNodeConditionGate(networkRequirement)}}}}
	r.build()
	changed := r.nodeChanged()
	later := testStart.Add(10 * time.Second)
	reconciles := 0
	for _, u := range []struct{ old, new *corev1.Node }{
		{nodeWithConditions(testStart, kubeletReady), nodeWithConditions(later, kubeletReady)},                                        // a heartbeat
		{nodeWithConditions(testStart, kubeletReady), nodeWithConditions(later, kubeletNotReady)},                                     // another condition
		{nodeWithConditions(testStart, kubeletReady), nodeWithConditions(later, kubeletReady, networkUnavailable)},                    // it appears
		{nodeWithConditions(testStart, networkUnavailable), nodeWithConditions(later, networkUnavailable)},                            // its heartbeat
		{nodeWithConditions(testStart, networkUnavailable), nodeWithConditions(later, networkAvailable)},                              // it turns
		{nodeWithConditions(testStart, networkAvailable, kubeletReady), nodeWithConditions(later, networkAvailable, kubeletNotReady)}, // another
		{nodeWithConditions(testStart, kubeletReady), withNewBoot(nodeWithConditions(later, kubeletReady))},                           // a reboot
	} {
		if changed.Update(event.UpdateEvent{ObjectOld: u.old, ObjectNew: u.new}) {
			reconciles++
		}
	}
	if reconciles != 3 {
		t.Errorf("%d of 7 updates cause a reconcile, want 3: the condition appearing and turning, and a new boot ID", reconciles)
	}
}
