// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
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
