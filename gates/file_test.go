// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		err := g.Check(context.Background(), Input{})
		got := "ready"
		if err != nil {
			got = Reason(err)
		}
		if got != want {
			t.Fatalf("gate says %s (%v), want %s", got, err, want)
		}
	}
	expect(ReasonNoFile)
	write("10-cilium.conflist", "") // written, not yet filled in
	if err := os.Mkdir(filepath.Join(dir, "ready"), 0o700); err != nil {
		t.Fatal(err)
	}
	expect(ReasonNoFile)
	write("10-cilium.conflist", `{"cniVersion":"1.0.0"}`)
	expect(ReasonNoFile) // "ready" is a directory
	if err := os.Remove(filepath.Join(dir, "ready")); err != nil {
		t.Fatal(err)
	}
	write("ready", "1")
	expect("ready")
}
