// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// sentWrite is one write as the API server would receive it: its subresource, patch type, bytes
// and options.
type sentWrite struct {
	subresource string
	patchType   string
	data        string
	owner       string
	dryRun      []string
}

// recordingClient records every patch it is sent, Node and status, and admits none of them.
func recordingClient(t *testing.T, sent *[]sentWrite, objs ...client.Object) client.Client {
	t.Helper()
	record := func(sub string, obj client.Object, patch client.Patch, owner string, dryRun []string) {
		data, err := patch.Data(obj)
		if err != nil {
			t.Fatal(err)
		}
		*sent = append(*sent, sentWrite{subresource: sub, patchType: string(patch.Type()), data: string(data), owner: owner, dryRun: dryRun})
	}
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			o := (&client.PatchOptions{}).ApplyOptions(opts)
			record("", obj, patch, o.FieldManager, o.DryRun)
			return nil
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			o := (&client.SubResourcePatchOptions{}).ApplyOptions(opts)
			record(sub, obj, patch, o.FieldManager, o.DryRun)
			return nil
		},
	}).Build()
}

// The confinement check dry-runs the reconciler's own requests: the same bytes, less the dry-run
// option, for the taints' removal and for the condition.
func TestTheDryRunsSendTheReconcilersOwnRequests(t *testing.T) {
	const conditionType = "example.com/AgentReady"
	var sent []sentWrite
	c := recordingClient(t, &sent, nodeWith(startup, foreign))
	r := newTestReconciler(t, c)
	r.Groups[0].ConditionType = conditionType
	r.build()
	probe(r)
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	clock := r.Clock.(*clocktesting.FakeClock)
	check := &ConfinementCheck{Client: c, NodeName: "n1", Clock: clock, Taints: r.servedTaints}
	if _, refusal, err := check.CheckRemoval(context.Background()); err != nil || refusal != nil {
		t.Fatalf("CheckRemoval() = %v, %v", refusal, err)
	}
	check.Conditions = []string{conditionType}
	if _, refusal, err := check.CheckRemoval(context.Background()); err != nil || refusal != nil {
		t.Fatalf("CheckRemoval() of the condition = %v, %v", refusal, err)
	}

	find := func(sub string, dryRun bool) sentWrite {
		t.Helper()
		for _, w := range sent {
			if w.subresource == sub && (len(w.dryRun) > 0) == dryRun {
				return w
			}
		}
		t.Fatalf("no %q write with dry run %v among %+v", sub, dryRun, sent)
		return sentWrite{}
	}
	for _, sub := range []string{"", "status"} {
		real, dry := find(sub, false), find(sub, true)
		if !reflect.DeepEqual(dry.dryRun, []string{"All"}) {
			t.Errorf("%q: the check's options are %v, want a dry run", sub, dry.dryRun)
		}
		dry.dryRun = nil
		if !reflect.DeepEqual(dry, real) {
			t.Errorf("%q: the check sends\n%+v\nthe reconciler sends\n%+v", sub, dry, real)
		}
		if real.owner != startuptaint.FieldManager {
			t.Errorf("%q: sent as %q, want the field manager %s", sub, real.owner, startuptaint.FieldManager)
		}
	}
}
