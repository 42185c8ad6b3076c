// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// HTTPName names the HTTP gate in logs, events and metrics.
const HTTPName = "http"

// ReasonHTTPStatus is the reason class of a health endpoint that answered with a status not 2xx.
const ReasonHTTPStatus = "http_status"

// HTTPGate probes a local health endpoint with GET; any 2xx answer means ready. It serves agents
// that are not CSI drivers, such as a CNI agent or a device plugin.
type HTTPGate struct {
	url     string
	timeout time.Duration
	client  *http.Client
}

// NewHTTPGate returns a gate for url; the prober gives each request timeout (Probed).
func NewHTTPGate(url string, timeout time.Duration) *HTTPGate {
	return &HTTPGate{url: url, timeout: timeout, client: &http.Client{}}
}

// Name implements Gate.
func (g *HTTPGate) Name() string { return HTTPName }

// Title implements Titled.
func (g *HTTPGate) Title() string { return "HTTP" }

// Timeout implements Probed.
func (g *HTTPGate) Timeout() time.Duration { return g.timeout }

// Check implements Gate.
func (g *HTTPGate) Check(ctx context.Context, _ Input) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", g.url, err)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		var netErr net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout() {
			return NotReady(ReasonTimeout, fmt.Errorf("GET %s: %w", g.url, err))
		}
		return NotReady(ReasonUnavailable, fmt.Errorf("GET %s: %w", g.url, err))
	}
	// Drain a little so the connection can be reused; a health body is never large.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return NotReady(ReasonHTTPStatus, fmt.Errorf("GET %s: %s", g.url, resp.Status))
	}
	return nil
}

// CloseIdleConnections closes the gate's idle connections to the endpoint.
func (g *HTTPGate) CloseIdleConnections() { g.client.CloseIdleConnections() }
