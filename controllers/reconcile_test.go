// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

func TestReconcileOutcomes(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "n1")
	boom := errors.New("boom")
	tests := []struct {
		name        string
		objects     []client.Object
		patchErr    error
		wantErr     bool
		wantPatches int
	}{
		{name: "no node is not an error", wantPatches: 0},
		{name: "taint already gone is success", objects: []client.Object{nodeWith(foreign)}, wantPatches: 0},
		{name: "node deleted before the patch is not an error", objects: []client.Object{nodeWith(startup)}, patchErr: gone, wantPatches: 1},
		{name: "other patch errors are returned for a retry", objects: []client.Object{nodeWith(startup)}, patchErr: boom, wantErr: true, wantPatches: 1},
		{name: "removes the taint", objects: []client.Object{nodeWith(startup, foreign)}, wantPatches: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patches := 0
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(tt.objects...).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					patches++
					if tt.patchErr != nil {
						return tt.patchErr
					}
					return cl.Patch(ctx, obj, patch, opts...)
				},
			}).Build()
			err := reconcileNode(t, newTestReconciler(t, c))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Reconcile error = %v, want error: %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, tt.patchErr) {
				t.Fatalf("Reconcile error %v does not wrap %v", err, tt.patchErr)
			}
			if patches != tt.wantPatches {
				t.Fatalf("patches = %d, want %d", patches, tt.wantPatches)
			}
		})
	}
}

// The taint goes once the condition holds, and the reaction time counts from then.
func TestTheTaintGoesWhenTheRequiredConditionHolds(t *testing.T) {
	e := newEpisodeTest(t, testNode("uid-nc", startup))
	e.set(func(r *NodeReconciler) {
		r.Groups = []Group{{Name: "net", Taints: []startuptaint.TaintSpec{{Key: startup.Key}}, Gates: []gates.Gate{gates.NewNodeConditionGate(networkRequirement)}}}
	})
	e.reconcile()
	expectEvents(t, e.events(), "Normal WaitingForAgent Holding startup taints: node-condition gate of group net: "+
		"node n1 has no condition NetworkUnavailable yet, want False")
	e.clock.Step(time.Minute)
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{networkAvailable}
	if err := e.c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	count, sum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	e.reconcile()
	if got := e.taints(); len(startuptaint.MatchingTaints(got, []startuptaint.TaintSpec{{Key: startup.Key}})) > 0 {
		t.Fatalf("taints %v: want the startup taint gone", got)
	}
	afterCount, afterSum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	if afterCount != count+1 || afterSum-sum > 1 {
		t.Errorf("ready-to-removed observed %d times, %.0fs; want once, under a second after the condition held", afterCount-count, afterSum-sum)
	}
}
