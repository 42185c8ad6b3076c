// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// The reaction time counts from when the gates started passing, whatever kind of gate held the
// taint last: here the allocatable resource appears a minute after the agent started.
func TestReadyToRemovedCountsFromTheResourceAppearing(t *testing.T) {
	gpus, err := gates.ParseResourceRequirement("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	e := newEpisodeTest(t, testNode("uid-r1", startup))
	e.set(func(r *NodeReconciler) { r.Groups[0].Gates = []gates.Gate{gates.NewResourceGate(gpus)} })
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
	count, sum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	e.reconcile()
	afterCount, afterSum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	if afterCount != count+1 || afterSum-sum > 1 {
		t.Errorf("ready-to-removed observed %d times, %.0fs; want once, under a second after the resource appeared", afterCount-count, afterSum-sum)
	}
}
