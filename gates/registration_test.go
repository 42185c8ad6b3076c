// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

func TestRegistrationGatePassesOnceKubeletHasRegisteredTheDriverInThisBoot(t *testing.T) {
	const driver = "example.csi.k8s.io"
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	socket := func(dir string) string { return filepath.Join(dir, driver+"-reg.sock") }
	serve := func(t *testing.T, dir string, age time.Duration) {
		lis, err := net.Listen("unix", socket(dir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lis.Close() })
		if err := os.Chtimes(socket(dir), now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		driver    string
		rewritten rewritten
		setup     func(t *testing.T, dir string)
		want      string // reason class; "" passes
	}{
		{name: "the driver's name not known yet", setup: func(*testing.T, string) {}, want: ReasonNotProbed},
		{name: "no registrar's socket: the CSINode gate decides", driver: driver, setup: func(*testing.T, string) {}},
		{name: "the boot before's socket, which nothing serves", driver: driver, want: ReasonStaleRegistrar, setup: func(t *testing.T, dir string) {
			if err := fakecsi.LeaveStaleRegistration(dir, driver); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a registrar of this boot, kubelet's entry not written again yet", driver: driver, want: ReasonRegistering,
			setup: func(t *testing.T, dir string) { serve(t, dir, KubeletRegistrationBound-time.Millisecond) }},
		{name: "a registrar of this boot, and kubelet wrote the driver into CSINode again", driver: driver, rewritten: true,
			setup: func(t *testing.T, dir string) { serve(t, dir, time.Millisecond) }},
		{name: "a registrar of this boot that has served as long as kubelet can take to register it", driver: driver,
			setup: func(t *testing.T, dir string) { serve(t, dir, KubeletRegistrationBound) }},
		{name: "the boot before's socket, although CSINode was written again", driver: driver, rewritten: true, want: ReasonStaleRegistrar,
			setup: func(t *testing.T, dir string) {
				if err := fakecsi.LeaveStaleRegistration(dir, driver); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// t.TempDir's path is too long for a Unix socket's address.
			dir, err := os.MkdirTemp("", "registry")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			tc.setup(t, dir)
			gate := NewRegistrationGate(dir, namer(tc.driver), tc.rewritten, clocktesting.NewFakePassiveClock(now), time.Second)
			err = gate.Check(context.Background(), Input{})
			if tc.want == "" && err != nil || tc.want != "" && Reason(err) != tc.want {
				t.Fatalf("err = %v (class %q), want class %q", err, Reason(err), tc.want)
			}
		})
	}
}
