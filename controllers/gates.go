package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/startup-taint-remover/startup-taint-remover/internal/csi"
)

// Gate is a local readiness check of the node agent, probed periodically. Probe returns nil when
// the agent is ready and otherwise an error saying why not; it must return within its own timeout.
type Gate interface {
	// Name is the gate's short name, used in logs, events and metric labels ("csi", "http").
	Name() string
	Probe(ctx context.Context) error
}

// The names of the CSI and HTTP gates.
const (
	gateCSI  = "csi"
	gateHTTP = "http"
)

// errNotReady marks a driver that answered but reported itself not ready yet.
var errNotReady = errors.New("driver reports not ready")

// errNotProbed stands for the local gates before their first probe has finished.
var errNotProbed = errors.New("not probed yet")

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

// NewCSIGate returns a gate for the CSI driver listening on the Unix socket at path. Each probe
// gives up after timeout, so a hung driver reads as not ready instead of blocking the prober. No
// connection is made until the first probe: a socket that does not exist yet is not an error.
func NewCSIGate(path string, timeout time.Duration) (*CSIGate, error) {
	if path == "" {
		return nil, errors.New("CSI client: empty socket path")
	}
	return &CSIGate{address: path, timeout: timeout, identity: csi.NewIdentityClient(path)}, nil
}

// Name implements Gate.
func (g *CSIGate) Name() string { return gateCSI }

// Probe implements Gate. The driver is ready when Probe succeeds and its ready field is true or
// unset (the CSI spec reads unset as ready). Its name is asked before that, as soon as it answers
// at all, so the taint it names is known, and reported, while the driver is still not ready.
func (g *CSIGate) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	err := g.probe(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	// A driver that answered, ready or not, keeps its name; one that did not is asked again when
	// it answers, as a restarted socket may be served by a different driver build.
	g.answered = err == nil || errors.Is(err, errNotReady)
	return err
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

// DriverName returns the name the driver last reported, or "" before it first answered.
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

// HTTPGate probes a local health endpoint with GET; any 2xx answer means ready. It serves agents
// that are not CSI drivers, such as a CNI agent or a device plugin.
type HTTPGate struct {
	url    string
	client *http.Client
}

// NewHTTPGate returns a gate for url; each request gives up after timeout.
func NewHTTPGate(url string, timeout time.Duration) *HTTPGate {
	return &HTTPGate{url: url, client: &http.Client{Timeout: timeout}}
}

// Name implements Gate.
func (g *HTTPGate) Name() string { return gateHTTP }

// Probe implements Gate.
func (g *HTTPGate) Probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", g.url, err)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", g.url, err)
	}
	// Drain a little so the connection can be reused; a health body is never large.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &httpStatusError{url: g.url, status: resp.Status}
	}
	return nil
}
