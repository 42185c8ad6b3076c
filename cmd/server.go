// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// serverNeed is something a setting needs of the API server that the oldest supported minor
// (startuptaint.MinKubernetesMinor) does not serve.
type serverNeed struct {
	// setting names the flag, or the setting of a group of --config.
	setting string
	// what the setting needs, in a message.
	what string
	// minor is the oldest minor of Kubernetes 1.x that serves it.
	minor int
}

// serverNeeds lists what the options need of the API server beyond the oldest supported minor.
func (o *options) serverNeeds() []serverNeed {
	var needs []serverNeed
	for i, g := range o.groups {
		setting := o.setting(-1)
		if o.configFile != "" {
			setting = o.setting(i)
		}
		if len(g.resourceSlices) > 0 {
			needs = append(needs, serverNeed{setting: o.inConfig(setting("require-resourceslice")),
				what: "ResourceSlices of resource.k8s.io/v1", minor: startuptaint.ResourceSliceMinor})
		}
	}
	return needs
}

// errServerTooOld marks a setting the API server cannot serve: bad input, found at start.
var errServerTooOld = errors.New("the API server is too old for this setting")

// checkServer refuses the first setting the API server cannot serve, naming the minor it needs.
// A version it cannot read (a distribution's own scheme) refuses nothing.
func (o *options) checkServer(info *version.Info) error {
	minor, ok := startuptaint.ActsAs(info)
	if !ok {
		return nil
	}
	for _, need := range o.serverNeeds() {
		if minor < need.minor {
			return fmt.Errorf("%w: %s: needs %s, which Kubernetes serves from 1.%d; the API server runs %s",
				errServerTooOld, need.setting, need.what, need.minor, startuptaint.DescribeServer(info))
		}
	}
	return nil
}

// readServerVersion asks the API server for /version, as a discovery client's ServerVersion does.
func readServerVersion(ctx context.Context, rc rest.Interface) (*version.Info, error) {
	body, err := rc.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	info := &version.Info{}
	if err := json.Unmarshal(body, info); err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	return info, nil
}

// serverCheck reads the API server's version once and refuses the settings it cannot serve. At
// start it waits a little for the answer, so that nothing runs on a server too old for it; an API
// server that does not answer by then is waited for as a runnable of the manager, whose health
// endpoints must serve through an outage.
type serverCheck struct {
	opts *options
	rc   rest.Interface
	log  logr.Logger
	// clock spaces the tries; the real clock when nil.
	clock clock.Clock
}

// serverWaitAtStart bounds how long the agent waits for the API server's version before it starts
// its manager anyway.
const serverWaitAtStart = 5 * time.Second

// atStart reads the version for up to timeout. It returns the version, nil when the API server did
// not answer in time, or the error of a setting it cannot serve.
func (s *serverCheck) atStart(ctx context.Context, timeout time.Duration) (*version.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info := s.await(ctx)
	return info, s.check(info)
}

// Start reads the version, however long the API server takes to answer, and returns the error of
// a setting it cannot serve, which stops the manager.
func (s *serverCheck) Start(ctx context.Context) error {
	return s.check(s.await(ctx))
}

// check refuses the settings the API server cannot serve; nil, when it did not answer.
func (s *serverCheck) check(info *version.Info) error {
	if info == nil {
		return nil
	}
	s.log.V(4).Info("the API server's version", "version", startuptaint.DescribeServer(info))
	return s.opts.checkServer(info)
}

// await asks for the version until it is answered, or ctx ends (nil).
func (s *serverCheck) await(ctx context.Context) *version.Info {
	var info *version.Info
	retryUntil(ctx, s.clock, 250*time.Millisecond, func(ctx context.Context) (err error) {
		info, err = readServerVersion(ctx, s.rc)
		return err
	})
	return info
}
