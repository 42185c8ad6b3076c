// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

// The plugins gate waits for kubelet to register each plugin whose registrar serves: a CSI driver
// until this node's CSINode lists it. A socket the boot before left, which serves nothing, and a
// file that is no socket register nothing.
func TestThePluginsGateWaitsUntilKubeletHasRegisteredEveryServingPlugin(t *testing.T) {
	const driver = "example.csi.k8s.io"
	registry := registryDir(t)
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

// Sockets that accept and never answer cost one GetInfo timeout in all, not one each: a registrar
// after ten of them still serves within a deadline of a few of those timeouts (issue 57, E5).
func TestSocketsThatNeverAnswerCostOneTimeoutInAll(t *testing.T) {
	const driver = "example.csi.k8s.io"
	registry := registryDir(t)
	for i := range 10 {
		// Named before the registrar's socket, so asked first in the registry's order.
		l, err := net.Listen("unix", filepath.Join(registry, fmt.Sprintf("a-mute-%d.sock", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
	}
	reg, err := fakecsi.Register(registry, driver, "/var/lib/kubelet/plugins/"+driver+"/csi.sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Unregister)
	ctx, cancel := context.WithTimeout(context.Background(), 4*getInfoTimeout)
	defer cancel()
	plugins, err := NewPluginRegistry(registry).Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plugins) != 1 || plugins[0].Name != driver {
		t.Fatalf("serving %v within %s; want the registrar's %s", plugins, 4*getInfoTimeout, driver)
	}
}

// A socket that accepts and never answers costs a GetInfo timeout once per backoff, not at every
// check.
func TestASocketThatNeverAnswersIsAskedAgainOnlyOnABackoff(t *testing.T) {
	registry := registryDir(t)
	l, err := net.Listen("unix", filepath.Join(registry, "mute.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	r := NewPluginRegistry(registry)
	r.clock = clk
	serving := func() []Plugin {
		t.Helper()
		plugins, err := r.Serving(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return plugins
	}
	if got := serving(); len(got) != 0 || accepted.Load() == 0 {
		t.Fatalf("first check: %v serving, %d connections; want none serving, after one was asked", got, accepted.Load())
	}
	asked := accepted.Load()
	if got := serving(); len(got) != 0 || accepted.Load() != asked {
		t.Fatalf("second check at once: %v serving, %d connections; want it not asked again", got, accepted.Load()-asked)
	}
	clk.SetTime(clk.Now().Add(firstRetry))
	if serving(); accepted.Load() == asked {
		t.Fatal("once the backoff passed, the socket was not asked again")
	}
	if k := r.known[filepath.Join(registry, "mute.sock")]; k.backoff != 2*firstRetry {
		t.Fatalf("backoff %s after a second failure, want %s", k.backoff, 2*firstRetry)
	}
}
