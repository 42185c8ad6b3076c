// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/utils/clock"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors here: %v", err)
	}
	return len(entries)
}

// settle gives goroutines that are ending a moment to end before they are counted.
func settle() {
	for range 20 {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCSIGateSurvivesAMisbehavingDriver drives a real gRPC driver through hangs, crashes,
// restarts on a new socket file and flaps, and checks that the prober's verdict on the gate is
// right each time (a hang is cut off by the gate's timeout) and that neither goroutines nor file
// descriptors grow.
func TestCSIGateSurvivesAMisbehavingDriver(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(t.TempDir(), "csi.sock")
	driver, err := fakecsi.Start(path, "leak.csi.example.com", fakecsi.Ready)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Stop()
	gate, err := gates.NewCSIGate(path, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Close() }()
	p := newProber([]gates.Probed{gate}, time.Hour, "n1", "", clock.RealClock{}, metrics.Default())
	ctx := context.Background()

	probe := func(want string) {
		t.Helper()
		// A restarted socket is dialled again when the old connection fails; allow a few probes.
		deadline := time.Now().Add(5 * time.Second)
		for {
			p.probeOnce(ctx)
			gerr, _ := p.notReady(false)
			got := "ready"
			if gerr != nil {
				got = gerr.reason
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gate says %q, want %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cycle := func() {
		probe("ready")
		driver.SetReadiness(fakecsi.Hung)
		probe(gates.ReasonTimeout)
		driver.SetReadiness(fakecsi.NotReady)
		probe(gates.ReasonNotReady)
		driver.SetReadiness(fakecsi.Failing)
		probe(gates.ReasonError)
		driver.SetReadiness(fakecsi.Ready)
		driver.Stop() // crash: the socket file is gone
		probe(gates.ReasonUnavailable)
		if err := driver.Restart(); err != nil { // a new socket file at the same path
			t.Fatal(err)
		}
		probe("ready")
	}

	cycle() // warm up: the first cycle opens what later ones reuse
	settle()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	for range 10 {
		cycle()
	}
	settle()
	if got := runtime.NumGoroutine(); got > goroutines+2 {
		t.Errorf("goroutines grew from %d to %d over 10 cycles", goroutines, got)
	}
	if got := openFDs(t); got > fds+2 {
		t.Errorf("file descriptors grew from %d to %d over 10 cycles", fds, got)
	}
	if gate.DriverName() != "leak.csi.example.com" {
		t.Errorf("driver name = %q", gate.DriverName())
	}
}

func TestAFileIsSeenAtOnceWithoutWaitingForAProbeTick(t *testing.T) {
	netd := filepath.Join(t.TempDir(), "net.d") // created by the CNI agent, after the gate starts
	g, err := gates.NewFileGate(filepath.Join(netd, "*.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	p := newProber([]gates.Probed{g}, time.Hour, "n1", "", clock.RealClock{}, metrics.Default())
	var done <-chan error
	// Registered first, so it runs after startRunnable has stopped the prober.
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	done = startRunnable(t, p.Start)

	ready := func() bool { gerr, _ := p.notReady(false); return gerr == nil }
	eventually(t, "the first probe", func() bool { gerr, _ := p.notReady(false); return gerr != nil && gerr.reason == gates.ReasonNoFile })
	if err := os.Mkdir(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // twice the gate's retry of a missing directory: it is watched now
	if ready() {
		t.Fatal("ready without a file")
	}
	start := time.Now()
	if err := os.WriteFile(filepath.Join(netd, "05-cilium.conflist"), []byte(`{"cniVersion":"1.0.0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the file to be seen", ready)
	t.Logf("seen after %s, with an hour between probe ticks", time.Since(start))

	// A CNI agent that reinstalls removes its directory and writes it again.
	if err := os.RemoveAll(netd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removal to be seen", func() bool { return !ready() })
	if err := os.Mkdir(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netd, "05-cilium.conflist"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new directory's file to be seen", ready)
}
