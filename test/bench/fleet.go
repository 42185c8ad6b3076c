// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// fleetLabel marks the fleet's Nodes.
const fleetLabel = "bench.example.com/fleet"

type fleetResult struct {
	agents       int
	untainted    int
	elapsed      time.Duration
	requests     map[string]int64
	patchLatency []time.Duration
}

// counter counts the requests of every agent by verb, and times the patches.
type counter struct {
	mu      sync.Mutex
	byVerb  map[string]int64
	patches []time.Duration
	// podLists counts the lists of pods.
	podLists int64
}

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		verb := strings.ToLower(req.Method)
		switch {
		case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case req.Method == http.MethodGet && collection(req.URL.Path):
			verb = "list"
		}
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		c.byVerb[verb]++
		if verb == "list" && strings.HasSuffix(req.URL.Path, "/pods") {
			c.podLists++
		}
		if verb == "patch" {
			c.patches = append(c.patches, time.Since(start))
		}
		c.mu.Unlock()
		return resp, err
	})
}

// collection reports whether path names a collection (/api/v1/nodes, /apis/apps/v1/daemonsets,
// /api/v1/namespaces/NS/pods) rather than one object: an odd number of segments after the version.
func collection(path string) bool {
	tail, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		parts := strings.SplitN(strings.TrimPrefix(path, "/apis/"), "/", 3)
		if len(parts) < 3 {
			return false
		}
		tail = parts[2]
	}
	return len(strings.Split(strings.Trim(tail, "/"), "/"))%2 == 1
}

// inProcessAgent builds node's agent with group in this process, with the binary's own manager
// options and a client of its own, with its own connections, as a pod would; cnt counts its
// requests.
func inProcessAgent(e *env, cnt *counter, node string, group controllers.Group, configure ...func(*controllers.NodeReconciler)) (ctrl.Manager, error) {
	cfg := rest.CopyConfig(e.cfg)
	cfg.QPS, cfg.Burst = 0, 0
	cfg.WrapTransport = cnt.wrap
	r := &controllers.NodeReconciler{NodeName: node, Groups: []controllers.Group{group}}
	for _, c := range configure {
		c(r)
	}
	mgr, err := ctrl.NewManager(cfg, testkit.InProcess(r.ManagerOptions()))
	if err != nil {
		return nil, err
	}
	return mgr, r.SetupWithManager(mgr)
}

// startAll starts mgrs at once, until ctx ends; running waits for them, and failed counts those
// that failed.
func startAll(ctx context.Context, mgrs []ctrl.Manager, running *sync.WaitGroup, failed *atomic.Int64) {
	for _, mgr := range mgrs {
		running.Go(func() {
			if err := mgr.Start(ctx); err != nil {
				failed.Add(1)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func measureFleet(ctx context.Context, e *env, agents, repeats int) (fleetResult, error) {
	res := fleetResult{agents: agents}
	driver, err := fakecsi.Start(filepath.Join(e.work, "fleet.sock"), driverName, fakecsi.Ready)
	if err != nil {
		return res, err
	}
	defer driver.Stop()

	start := time.Now()
	names := make([]string, agents)
	errs := make(chan error, agents)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range agents {
		names[i] = fmt.Sprintf("fleet-%04d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			node, status := realisticNode(names[i])
			node.Labels[fleetLabel] = "true"
			node.Spec.Taints = append(node.Spec.Taints, startupTaint)
			if err := e.createNode(ctx, node, status); err != nil {
				errs <- err
				return
			}
			if err := registerCSINode(ctx, e.c, names[i]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	logf("  %d tainted Nodes and their CSINodes created in %s", agents, time.Since(start).Round(time.Second))

	var runs []fleetResult
	for run := range repeats {
		if run > 0 {
			if err := retaint(ctx, e, names); err != nil {
				return res, err
			}
		}
		r, err := fleetRun(ctx, e, names, driver.Path())
		if err != nil {
			return res, err
		}
		logf("  run %d: %d of %d untainted in %s", run+1, r.untainted, agents, r.elapsed.Round(time.Millisecond))
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b fleetResult) int { return int(a.elapsed - b.elapsed) })
	return runs[len(runs)/2], nil
}

// retaint puts the startup taint back on every fleet Node, for the next run.
func retaint(ctx context.Context, e *env, names []string) error {
	for _, name := range names {
		node := &corev1.Node{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		orig := node.DeepCopy()
		node.Spec.Taints = append(node.Spec.Taints, startupTaint)
		if err := e.c.Patch(ctx, node, client.MergeFrom(orig)); err != nil {
			return err
		}
	}
	return nil
}

// fleetRun starts one agent per Node at once and waits until every Node is untainted.
func fleetRun(ctx context.Context, e *env, names []string, socket string) (fleetResult, error) {
	res := fleetResult{agents: len(names)}
	cnt := &counter{byVerb: map[string]int64{}}
	fleetCtx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }()
	var failed atomic.Int64
	// Build every agent first, then start them all at once: in a real fleet each pod builds its
	// own manager in its own process, in parallel.
	mgrs := make([]ctrl.Manager, 0, len(names))
	for _, name := range names {
		// Each agent has a client of its own, with its own connections, as a pod would.
		gate, err := gates.NewCSIGate(socket, 3*time.Second)
		if err != nil {
			return res, err
		}
		defer func() { _ = gate.Close() }()
		mgr, err := inProcessAgent(e, cnt, name, controllers.CSIDriverGroup(name, gate))
		if err != nil {
			return res, err
		}
		mgrs = append(mgrs, mgr)
	}
	start := time.Now()
	startAll(fleetCtx, mgrs, &running, &failed)

	// Poll rather than watch: a watch on a thousand Nodes changing at once can be closed by the
	// API server, and a quarter-second's resolution is plenty against a 30-second target.
	sel := client.MatchingLabels{fleetLabel: "true"}
	for {
		list := &corev1.NodeList{}
		if err := e.c.List(ctx, list, sel); err != nil {
			return res, err
		}
		res.untainted = 0
		for _, node := range list.Items {
			if len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})) == 0 {
				res.untainted++
			}
		}
		res.elapsed = time.Since(start)
		if res.untainted == len(names) || res.elapsed > 3*time.Minute {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // let the event writes land in the count
	cnt.mu.Lock()
	res.requests = cnt.byVerb
	res.patchLatency = slices.Clone(cnt.patches)
	cnt.mu.Unlock()
	if n := failed.Load(); n > 0 {
		return res, fmt.Errorf("%d managers failed", n)
	}
	return res, nil
}
