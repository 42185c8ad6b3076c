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

// namer is a DriverNamer that has learnt name.
type namer string

func (n namer) DriverName() string { return string(n) }

func TestRegistrationGateTellsARegistrarOfThisBootThatKubeletHasHadTimeToRegister(t *testing.T) {
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
		name   string
		driver string
		setup  func(t *testing.T, dir string)
		want   string // reason class; "" passes
	}{
		{name: "the driver's name not known yet", setup: func(*testing.T, string) {}, want: ReasonNotProbed},
		{name: "no registrar's socket: the CSINode gate decides", driver: driver, setup: func(*testing.T, string) {}},
		{name: "the boot before's socket, which nothing serves", driver: driver, want: ReasonStaleRegistrar, setup: func(t *testing.T, dir string) {
			if err := fakecsi.LeaveStaleRegistration(dir, driver); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a registrar of this boot, too new for kubelet to have listed the driver", driver: driver, want: ReasonRegistering,
			setup: func(t *testing.T, dir string) { serve(t, dir, KubeletRegistrationTime-time.Millisecond) }},
		{name: "a registrar of this boot that has served as long as kubelet takes", driver: driver,
			setup: func(t *testing.T, dir string) { serve(t, dir, KubeletRegistrationTime) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// t.TempDir's path is too long for a Unix socket's address.
			dir, err := os.MkdirTemp("", "registry")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			tc.setup(t, dir)
			gate := NewRegistrationGate(dir, namer(tc.driver), clocktesting.NewFakePassiveClock(now), time.Second)
			err = gate.Check(context.Background(), Input{})
			if tc.want == "" && err != nil || tc.want != "" && Reason(err) != tc.want {
				t.Fatalf("err = %v (class %q), want class %q", err, Reason(err), tc.want)
			}
		})
	}
}
