package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

func TestNewFileGateRefusesPatternsItCannotWatch(t *testing.T) {
	for _, tt := range []struct{ pattern, err string }{
		{"/etc/cni/net.d/*.conflist", ""},
		{"/etc/cni/net.d/10-aws.conflist", ""},
		{"etc/cni/net.d/*.conf", "not an absolute path"},
		{"/etc/cni/net.d/[", "not a valid pattern"},
		{"/etc/cni/*/10-calico.conflist", "not its directory"},
	} {
		_, err := NewFileGate(tt.pattern)
		if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("NewFileGate(%q) = %v, want %q", tt.pattern, err, tt.err)
		}
	}
	if _, err := NewFileGate(); err == nil {
		t.Error("a gate without patterns")
	}
}

func TestTheFileGatePassesOnceEveryPatternMatchesANonEmptyFile(t *testing.T) {
	dir := t.TempDir()
	g, err := NewFileGate(filepath.Join(dir, "*.conflist"), filepath.Join(dir, "ready"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(want string) {
		t.Helper()
		err := g.Probe(context.Background())
		got := "ready"
		if err != nil {
			got = reasonClass(err)
		}
		if got != want {
			t.Fatalf("gate says %s (%v), want %s", got, err, want)
		}
	}
	expect(reasonNoFile)
	write("10-cilium.conflist", "") // written, not yet filled in
	if err := os.Mkdir(filepath.Join(dir, "ready"), 0o700); err != nil {
		t.Fatal(err)
	}
	expect(reasonNoFile)
	write("10-cilium.conflist", `{"cniVersion":"1.0.0"}`)
	expect(reasonNoFile) // "ready" is a directory
	if err := os.Remove(filepath.Join(dir, "ready")); err != nil {
		t.Fatal(err)
	}
	write("ready", "1")
	expect("ready")
}

func TestAFileIsSeenAtOnceWithoutWaitingForAProbeTick(t *testing.T) {
	netd := filepath.Join(t.TempDir(), "net.d") // created by the CNI agent, after the gate starts
	g, err := NewFileGate(filepath.Join(netd, "*.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	p := newProber([]Gate{g}, time.Hour, "n1", "", clock.RealClock{})
	var done <-chan error
	// Registered first, so it runs after startRunnable has stopped the prober.
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	done = startRunnable(t, p.Start)

	ready := func() bool { gerr, _ := p.notReady(); return gerr == nil }
	eventually(t, "the first probe", func() bool { gerr, _ := p.notReady(); return gerr != nil && gerr.reason == reasonNoFile })
	if err := os.Mkdir(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * watchRetry) // the directory is watched now
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
