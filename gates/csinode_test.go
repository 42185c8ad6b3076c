package gates

import (
	"context"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestCSINodeGateTellsAnEntryKubeletWroteAgainFromOneThatWasAlwaysThere(t *testing.T) {
	const node, driver = "n1", "example.csi.k8s.io"
	ctx := context.Background()
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: "i-1"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(csiNode).Build()
	gate := NewCSINodeGate(node, namer(driver), false)
	check := func(step string, passes, again bool) {
		t.Helper()
		if err := gate.Check(ctx, Input{Reader: c}); (err == nil) != passes {
			t.Fatalf("%s: err = %v, want passing %v", step, err, passes)
		}
		if gate.RegisteredAgain() != again {
			t.Fatalf("%s: RegisteredAgain() = %v, want %v", step, !again, again)
		}
	}
	setDrivers := func(drivers ...storagev1.CSINodeDriver) {
		t.Helper()
		csiNode.Spec.Drivers = drivers
		if err := c.Update(ctx, csiNode); err != nil {
			t.Fatal(err)
		}
	}
	check("the entry from the boot before, unchanged", true, false)
	setDrivers()
	check("kubelet takes the driver out", false, false)
	setDrivers(storagev1.CSINodeDriver{Name: driver, NodeID: "i-1"})
	check("kubelet writes it back", true, true)
}
