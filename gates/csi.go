// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/startup-taint-remover/startup-taint-remover/internal/csi"
)

// CSIName names the CSI driver gate in logs, events and metrics.
const CSIName = "csi"

// ReasonUnimplemented is the reason class of a CSI driver that does not serve the Identity call.
const ReasonUnimplemented = "unimplemented"

// errNotReady marks a driver that answered but reported itself not ready yet.
var errNotReady = errors.New("driver reports not ready")

// CSIGate probes a CSI driver over its Unix socket with Identity/Probe and learns the driver's
// name from GetPluginInfo. It keeps one HTTP/2 connection to the socket and dials the path again
// when that connection fails, so a driver that restarts with a new socket file is found again at
// the next probe.
type CSIGate struct {
	address  string
	timeout  time.Duration
	identity *csi.IdentityClient

	mu         sync.Mutex
	driverName string
	answered   bool
}

// NewCSIGate returns a gate for the CSI driver listening on the Unix socket at path. The prober
// gives each check timeout (Probed), so a hung driver reads as not ready instead of blocking it. No
// connection is made until the first check: a socket that does not exist yet is not an error.
func NewCSIGate(path string, timeout time.Duration) (*CSIGate, error) {
	if path == "" {
		return nil, errors.New("CSI client: empty socket path")
	}
	return &CSIGate{address: path, timeout: timeout, identity: csi.NewIdentityClient(path)}, nil
}

// Name implements Gate.
func (g *CSIGate) Name() string { return CSIName }

// Title implements Titled.
func (g *CSIGate) Title() string { return "CSI" }

// Timeout implements Probed.
func (g *CSIGate) Timeout() time.Duration { return g.timeout }

// Check implements Gate. The driver is ready when Probe succeeds and its ready field is true or
// unset (the CSI spec reads unset as ready). Its name is asked before that, as soon as it answers
// at all, so the taint it names is known, and reported, while the driver is still not ready.
func (g *CSIGate) Check(ctx context.Context, _ Input) error {
	err := g.probe(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	// A driver that answered, ready or not, keeps its name; one that did not is asked again when
	// it answers, as a restarted socket may be served by a different driver build.
	g.answered = err == nil || errors.Is(err, errNotReady)
	if err != nil {
		return NotReady(csiReason(err), err)
	}
	return nil
}

// csiReason sorts an error of the driver's Identity calls into a reason class.
func csiReason(err error) string {
	var rpcErr *csi.RPCError
	var netErr net.Error
	switch {
	case errors.Is(err, errNotReady):
		return ReasonNotReady
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	case errors.As(err, &rpcErr):
		switch rpcErr.Code {
		case csi.DeadlineExceeded, csi.Canceled:
			return ReasonTimeout
		case csi.Unavailable:
			return ReasonUnavailable
		case csi.Unimplemented:
			return ReasonUnimplemented
		}
		return ReasonError
	case errors.As(err, &netErr):
		return ReasonUnavailable
	}
	return ReasonError
}

func (g *CSIGate) probe(ctx context.Context) error {
	g.mu.Lock()
	known := g.answered && g.driverName != ""
	g.mu.Unlock()
	if !known {
		name, err := g.identity.GetPluginInfo(ctx)
		if err != nil {
			return fmt.Errorf("CSI GetPluginInfo on %s: %w", g.address, err)
		}
		if name == "" {
			return fmt.Errorf("CSI GetPluginInfo on %s: driver returned an empty name", g.address)
		}
		g.mu.Lock()
		g.driverName = name
		g.mu.Unlock()
	}
	ready, err := g.identity.Probe(ctx)
	if err != nil {
		return fmt.Errorf("CSI Probe on %s: %w", g.address, err)
	}
	if ready != nil && !*ready {
		return fmt.Errorf("CSI Probe on %s: %w", g.address, errNotReady)
	}
	return nil
}

// DriverName implements DriverNamer.
func (g *CSIGate) DriverName() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.driverName
}

// Close releases the connection to the driver.
func (g *CSIGate) Close() error {
	g.identity.Close()
	return nil
}
