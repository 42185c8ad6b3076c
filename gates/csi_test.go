// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

func TestHTTPGate(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	gate := NewHTTPGate(srv.URL, 100*time.Millisecond)
	defer gate.CloseIdleConnections()
	ctx := context.Background()
	if err := gate.Check(ctx, Input{}); Reason(err) != ReasonHTTPStatus {
		t.Fatalf("503: err = %v, class %q", err, Reason(err))
	}
	status = http.StatusOK
	if err := gate.Check(ctx, Input{}); err != nil {
		t.Fatalf("200: %v", err)
	}
	if err := NewHTTPGate("http://127.0.0.1:1/healthz", 100*time.Millisecond).Check(ctx, Input{}); Reason(err) != ReasonUnavailable {
		t.Fatalf("refused: err = %v, class %q", err, Reason(err))
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
	if err := gate.Check(context.Background(), Input{}); Reason(err) != ReasonNotReady {
		t.Fatalf("Check() = %v, want not ready", err)
	}
	if got := gate.DriverName(); got != "example.csi.k8s.io" {
		t.Fatalf("DriverName() = %q while the driver is not ready, want its name", got)
	}
}
