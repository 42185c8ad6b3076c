// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	clocktesting "k8s.io/utils/clock/testing"
)

// An outage longer than the backoff's cap is not reported as over until the API server answers.
func TestAnOutageLongerThanTheBackoffCapEndsOnlyWhenTheAPIServerAnswers(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var up atomic.Bool
	var pings atomic.Int64
	var recovered atomic.Bool
	c := &connectivity{clock: clk, down: true,
		log: funcr.New(func(_, args string) {
			if args != "" {
				recovered.Store(true)
			}
		}, funcr.Options{}),
		ping: func(context.Context) error {
			pings.Add(1)
			if up.Load() {
				return nil
			}
			return errors.New("connection refused")
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { c.awaitRecovery(ctx); close(done) }()

	// Ten minutes of outage, a step at a time: every wait the backoff asks for passes.
	for range 10 * 60 {
		clk.Step(time.Second)
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("recovery reported after %d failed pings, with the API server still down", pings.Load())
	default:
	}
	if n := pings.Load(); n < 20 {
		t.Errorf("%d pings in ten minutes, want one at least every 33 s", n)
	}
	up.Store(true)
	for ; ; time.Sleep(time.Millisecond) {
		clk.Step(time.Second)
		select {
		case <-done:
			c.mu.Lock()
			down := c.down
			c.mu.Unlock()
			if down || !recovered.Load() {
				t.Fatalf("down %v, recovery logged %v: want it over and said once", down, recovered.Load())
			}
			return
		default:
		}
	}
}
