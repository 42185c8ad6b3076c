// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// namedGate is a passing gate whose driver has told its name.
type namedGate struct{ name string }

func (namedGate) Name() string                             { return "csi" }
func (namedGate) Check(context.Context, gates.Input) error { return nil }
func (namedGate) Timeout() time.Duration                   { return 0 }
func (g namedGate) DriverName() string                     { return g.name }

func TestTheAgentReportsOnceWhetherItsCSIDriverPreventsScheduling(t *testing.T) {
	const driver = "csi.example.com"
	object := func(prevent *bool) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: storagev1.CSIDriverSpec{PreventPodSchedulingIfMissing: prevent}}
	}
	forbidden := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*storagev1.CSIDriver); ok {
			return apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "csidrivers"}, key.Name, nil)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	for _, tc := range []struct {
		name        string
		object      *storagev1.CSIDriver
		intercept   *interceptor.Funcs
		want        float64
		wantReports bool
	}{
		{name: "set", object: object(ptr.To(true)), want: 1, wantReports: true},
		{name: "set to false", object: object(ptr.To(false)), want: 0, wantReports: true},
		{name: "unset", object: object(nil), want: 0, wantReports: true},
		{name: "no CSIDriver object", want: 0, wantReports: true},
		{name: "no permission to read it", intercept: &forbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metrics.Default().CSIDriverPreventsScheduling.Reset()
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(testNode("uid-d1", startup))
			if tc.object != nil {
				b = b.WithObjects(tc.object)
			}
			if tc.intercept != nil {
				b = b.WithInterceptorFuncs(*tc.intercept)
			}
			reads := 0
			c := interceptor.NewClient(b.Build(), interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey,
				obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*storagev1.CSIDriver); ok {
					reads++
				}
				return c.Get(ctx, key, obj, opts...)
			}})
			r := newTestReconciler(t, c, namedGate{name: driver})
			for range 3 {
				if _, err := r.Reconcile(context.Background(), nodeRequest); err != nil {
					t.Fatal(err)
				}
			}
			if reads != 1 {
				t.Fatalf("%d reads of the CSIDriver, want 1 per process", reads)
			}
			if n := testutil.CollectAndCount(metrics.Default().CSIDriverPreventsScheduling); (n == 1) != tc.wantReports {
				t.Fatalf("%d series of startup_taint_csi_driver_prevents_scheduling, want a report: %v", n, tc.wantReports)
			}
			if tc.wantReports {
				if got := testutil.ToFloat64(metrics.Default().CSIDriverPreventsScheduling.WithLabelValues(driver)); got != tc.want {
					t.Fatalf("startup_taint_csi_driver_prevents_scheduling = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
