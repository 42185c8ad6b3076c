// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

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
