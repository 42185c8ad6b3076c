// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

func TestRefusedBacksOffToFiveMinutesAndReportsOnce(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	for name, refusal := range map[string]error{
		"forbidden (RBAC, a policy's check)": apierrors.NewForbidden(nodes, "n1", errors.New("no patch for you")),
		// A policy's validation that fails to evaluate answers Invalid, as one rendered with a
		// placeholder for --retaint-after does.
		"invalid (a policy that fails to evaluate)": apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n1", nil),
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup)).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return refusal
				},
			}).Build()
			r := newTestReconciler(t, c)
			recorder := r.Recorder.(*events.FakeRecorder)
			delays := make([]time.Duration, 0, 12)
			for range 12 {
				res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})
				if err != nil {
					t.Fatalf("a refused patch must not be returned as an error (one log line per retry): %v", err)
				}
				delays = append(delays, res.RequeueAfter)
			}
			for i := 1; i < len(delays); i++ {
				if delays[i] < delays[i-1] || delays[i] > MaxRetryInterval {
					t.Fatalf("backoff %v does not grow up to %v", delays, MaxRetryInterval)
				}
			}
			if delays[0] != time.Second || delays[len(delays)-1] != MaxRetryInterval {
				t.Fatalf("backoff %v: want 1s first, %v at last", delays, MaxRetryInterval)
			}
			if len(recorder.Events) != 1 {
				t.Fatalf("%d events for the same failure, want 1", len(recorder.Events))
			}
			if e := <-recorder.Events; !strings.Contains(e, startuptaint.EventReasonRemovalFailed) {
				t.Fatalf("event %q, want %s", e, startuptaint.EventReasonRemovalFailed)
			}
		})
	}
}
