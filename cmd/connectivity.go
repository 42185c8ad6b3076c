// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// connectivity reports the loss and the return of the API server once each. Without it every
// informer retry (up to every 30 s, per informer) logs the same error for as long as an outage lasts.
type connectivity struct {
	log logr.Logger
	// ping asks the API server for something cheap; nil means it answered.
	ping func(context.Context) error
	// clock spaces the pings; the real clock when nil.
	clock clock.Clock

	mu   sync.Mutex
	down bool
}

// watchError is the cache's watch error handler.
func (c *connectivity) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		// A watch that ended or expired: the informer relists, as usual; nothing to report.
		toolscache.DefaultWatchErrorHandler(ctx, r, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return
	}
	c.down = true
	c.log.Error(err, "cannot list or watch through the API server; retrying with backoff up to 30s")
	go c.awaitRecovery(ctx)
}

// awaitRecovery asks the API server for its version until it answers, and reports its return.
func (c *connectivity) awaitRecovery(ctx context.Context) {
	if !retryUntil(ctx, c.clock, time.Second, c.ping) {
		return
	}
	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
	c.log.Info("the API server answers again")
}

// retryUntil calls try with a backoff from first, capped at 30 s, until it succeeds (true) or ctx
// ends (false); clk spaces the tries, the real clock when nil. It steps the backoff itself:
// wait.ExponentialBackoff gives up once the delay reaches Cap (its steps end there), and an outage
// of a minute would then be taken as over.
func retryUntil(ctx context.Context, clk clock.Clock, first time.Duration, try func(context.Context) error) bool {
	if clk == nil {
		clk = clock.RealClock{}
	}
	backoff := wait.Backoff{Duration: first, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	for try(ctx) != nil {
		select {
		case <-ctx.Done():
			return false
		case <-clk.After(backoff.Step()):
		}
	}
	return true
}

// versionClient is a plain REST client for /version, as a discovery client's ServerVersion uses:
// a discovery client links the OpenAPI models, which cost every node memory.
func versionClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath = &schema.GroupVersion{}, "/"
	c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("creating the REST client: %w", err)
	}
	return rc, nil
}

// versionPing asks the API server for /version through rc.
func versionPing(rc rest.Interface) func(context.Context) error {
	return func(ctx context.Context) error { _, err := readServerVersion(ctx, rc); return err }
}
