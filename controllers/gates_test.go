package controllers

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/utils/clock"

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
// restarts on a new socket file and flaps, and checks that the gate answers right each time and
// that neither goroutines nor file descriptors grow.
func TestCSIGateSurvivesAMisbehavingDriver(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(t.TempDir(), "csi.sock")
	driver, err := fakecsi.Start(path, "leak.csi.example.com", fakecsi.Ready)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Stop()
	gate, err := NewCSIGate(path, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Close() }()
	p := newProber([]Gate{gate}, time.Hour, "n1", "", clock.RealClock{})
	ctx := context.Background()

	probe := func(want string) {
		t.Helper()
		// A restarted socket is dialled again when the old connection fails; allow a few probes.
		deadline := time.Now().Add(5 * time.Second)
		for {
			p.probeOnce(ctx)
			gerr, _ := p.notReady()
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
		probe(reasonTimeout)
		driver.SetReadiness(fakecsi.NotReady)
		probe(reasonNotReady)
		driver.SetReadiness(fakecsi.Failing)
		probe(reasonError)
		driver.SetReadiness(fakecsi.Ready)
		driver.Stop() // crash: the socket file is gone
		probe(reasonUnavailable)
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

func TestHTTPGate(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	gate := NewHTTPGate(srv.URL, 100*time.Millisecond)
	defer gate.client.CloseIdleConnections()
	ctx := context.Background()
	if err := gate.Probe(ctx); reasonClass(err) != reasonHTTPStatus {
		t.Fatalf("503: err = %v, class %q", err, reasonClass(err))
	}
	status = http.StatusOK
	if err := gate.Probe(ctx); err != nil {
		t.Fatalf("200: %v", err)
	}
	if err := NewHTTPGate("http://127.0.0.1:1/healthz", 100*time.Millisecond).Probe(ctx); reasonClass(err) != reasonUnavailable {
		t.Fatalf("refused: err = %v, class %q", err, reasonClass(err))
	}
}

func TestCSIGateLearnsTheDriverNameBeforeTheDriverIsReady(t *testing.T) {
	path := filepath.Join(t.TempDir(), "csi.sock")
	driver, err := fakecsi.Start(path, "example.csi.k8s.io", fakecsi.NotReady)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Stop()
	gate, err := NewCSIGate(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Close() }()
	if err := gate.Probe(context.Background()); !errors.Is(err, errNotReady) {
		t.Fatalf("Probe() = %v, want not ready", err)
	}
	if got := gate.DriverName(); got != "example.csi.k8s.io" {
		t.Fatalf("DriverName() = %q while the driver is not ready, want its name", got)
	}
}
