// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestCSINodeGateTellsAnEntryKubeletWroteFromOneThatWasThereBefore(t *testing.T) {
	const node, driver = "n1", "example.csi.k8s.io"
	ctx := context.Background()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	csiNode := func(drivers ...string) *storagev1.CSINode {
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}}
		for _, d := range drivers {
			cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: "i-1"})
		}
		return cn
	}
	for _, tc := range []struct {
		name   string
		events func(gate *CSINodeGate)
		want   bool
	}{
		{name: "the boot before's entry, in the watch's initial list", events: func(gate *CSINodeGate) {
			_, h, _ := gate.Watches(nil)
			h.Create(ctx, event.CreateEvent{Object: csiNode(driver), IsInInitialList: true}, q)
		}},
		{name: "another driver written", events: func(gate *CSINodeGate) {
			_, h, _ := gate.Watches(nil)
			h.Update(ctx, event.UpdateEvent{ObjectOld: csiNode(driver), ObjectNew: csiNode(driver, "other.csi.k8s.io")}, q)
		}},
		{name: "kubelet takes the entry out and writes it back", want: true, events: func(gate *CSINodeGate) {
			_, h, _ := gate.Watches(nil)
			h.Update(ctx, event.UpdateEvent{ObjectOld: csiNode(driver), ObjectNew: csiNode()}, q)
			h.Update(ctx, event.UpdateEvent{ObjectOld: csiNode(), ObjectNew: csiNode(driver)}, q)
		}},
		{name: "kubelet creates the CSINode with it", want: true, events: func(gate *CSINodeGate) {
			_, h, _ := gate.Watches(nil)
			h.Create(ctx, event.CreateEvent{Object: csiNode(driver)}, q)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := NewCSINodeGate(node, namer(driver), false)
			tc.events(gate)
			if got := gate.RegisteredAgain(); got != tc.want {
				t.Fatalf("RegisteredAgain() = %v, want %v", got, tc.want)
			}
		})
	}
}
