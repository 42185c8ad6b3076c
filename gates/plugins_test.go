// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

// The plugins gate waits for kubelet to register each plugin whose registrar serves: a CSI driver
// until this node's CSINode lists it. A socket the boot before left, which serves nothing, and a
// file that is no socket register nothing.
func TestThePluginsGateWaitsUntilKubeletHasRegisteredEveryServingPlugin(t *testing.T) {
	const driver = "example.csi.k8s.io"
	registry, err := os.MkdirTemp("", "str-reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(registry) })
	if err := fakecsi.LeaveStaleRegistration(registry, "gone.csi.k8s.io"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(registry, "notes"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	csiNode := func(drivers ...string) client.Object {
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		for _, d := range drivers {
			cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: "n1"})
		}
		return cn
	}
	g := NewPluginsGate("n1", NewPluginRegistry(registry))
	check := func(objects ...client.Object) error {
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects...).Build()
		return g.Check(context.Background(), Input{Node: node, Reader: c})
	}
	if err := check(); err != nil {
		t.Fatalf("no registrar serving: %v", err)
	}
	r, err := fakecsi.Register(registry, driver, "/var/lib/kubelet/plugins/"+driver+"/csi.sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Unregister)
	for _, tc := range []struct {
		name    string
		objects []client.Object
		want    string
	}{
		{"no CSINode yet", nil, ReasonNotRegistered},
		{"CSINode without the driver", []client.Object{csiNode("other.csi.k8s.io")}, ReasonNotRegistered},
		{"CSINode with the driver", []client.Object{csiNode("other.csi.k8s.io", driver)}, ""},
	} {
		err := check(tc.objects...)
		got := ""
		if err != nil {
			got = Reason(err)
		}
		if got != tc.want {
			t.Errorf("%s: reason %q, want %q (%v)", tc.name, got, tc.want, err)
		}
	}
}
