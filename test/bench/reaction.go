// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

const driverName = "bench.csi.example.com"

var startupTaint = corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}

// reactionResult is one scenario's latencies.
type reactionResult struct {
	name, target string
	lanes        int
	limit        time.Duration
	samples      []time.Duration
}

func (r reactionResult) percentile(p float64) time.Duration { return percentile(r.samples, p) }

// percentile is the nearest-rank percentile p (0 to 1) of samples: every number the bench
// reports is computed this one way.
func percentile(samples []time.Duration, p float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// benchResource is the device plugin's resource the allocatable scenario's agent waits for.
const benchResource = "bench.example.com/device"

// gateKind is what a lane's agent waits for.
type gateKind int

const (
	// gateCSI is a CSI driver and its CSINode registration.
	gateCSI gateKind = iota
	// gateFile is a CNI agent's configuration file (--ready-file).
	gateFile
	// gateAllocatable is a device plugin's resource in the Node's allocatable (--require-resource).
	gateAllocatable
	// gateCondition is a Node condition another agent publishes (--require-condition).
	gateCondition
	// gatePod is another DaemonSet's pod on the node turning Ready (--require-pod).
	gatePod
)

// benchPodNamespace and benchPodLabel are where the pod scenario's pods are and what they match.
const (
	benchPodNamespace = "bench-agents"
	benchPodApp       = "bench-agent"
)

// benchCondition is the Node condition the condition scenario's agent waits for.
const benchCondition = "bench.example.com/NetworkReady"

// lane is one node with its own agent, gate and watch, so trials can run side by side.
type lane struct {
	e        *env
	name     string
	driver   *fakecsi.Driver // gateCSI
	file     string          // gateFile: the file the agent waits for
	interval time.Duration
	events   <-chan watch.Event
	stop     func()
}

func newLane(ctx context.Context, e *env, name string, interval time.Duration, registered bool, kind gateKind) (*lane, error) {
	if err := e.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return nil, err
	}
	switch kind {
	case gateFile:
		return newFileLane(ctx, e, name, interval)
	case gateAllocatable:
		group := controllers.Group{Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}},
			Gates: []gates.Gate{gates.NewResourceGate(gates.ResourceRequirement{Name: benchResource, Min: resource.MustParse("1")})}}
		return startLane(ctx, e, &lane{e: e, name: name, interval: interval},
			&controllers.NodeReconciler{NodeName: name, Groups: []controllers.Group{group}, ProbeInterval: interval}, func() {})
	case gatePod:
		return newPodLane(ctx, e, name, interval)
	case gateCondition:
		group := controllers.Group{Name: "net", Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}},
			Gates: []gates.Gate{gates.NewNodeConditionGate(gates.ConditionRequirement{Type: benchCondition, Status: corev1.ConditionTrue})}}
		return startLane(ctx, e, &lane{e: e, name: name, interval: interval},
			&controllers.NodeReconciler{NodeName: name, Groups: []controllers.Group{group}, ProbeInterval: interval}, func() {})
	}
	return newCSILane(ctx, e, name, interval, registered)
}

// newPodLane runs an agent that waits for its node's pod of another DaemonSet, and creates that
// pod, not Ready.
func newPodLane(ctx context.Context, e *env, name string, interval time.Duration) (*lane, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchPodNamespace}}
	if err := e.c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchPodNamespace, Labels: map[string]string{"k8s-app": benchPodApp}},
		Spec:       corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent"}}},
	}
	if err := e.c.Create(ctx, pod); err != nil {
		return nil, err
	}
	required, err := gates.ParsePodRequirement(benchPodNamespace + "/k8s-app=" + benchPodApp)
	if err != nil {
		return nil, err
	}
	group := controllers.Group{Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{gates.NewPodGate(name, required)}}
	return startLane(ctx, e, &lane{e: e, name: name, interval: interval},
		&controllers.NodeReconciler{NodeName: name, Groups: []controllers.Group{group}, ProbeInterval: interval}, func() {})
}

func newFileLane(ctx context.Context, e *env, name string, interval time.Duration) (*lane, error) {
	dir := filepath.Join(e.work, name, "net.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	gate, err := gates.NewFileGate(filepath.Join(dir, "*.conflist"))
	if err != nil {
		return nil, err
	}
	l := &lane{e: e, name: name, interval: interval, file: filepath.Join(dir, "05-cilium.conflist")}
	group := controllers.Group{Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{gate}}
	return startLane(ctx, e, l, &controllers.NodeReconciler{NodeName: name, Groups: []controllers.Group{group}, ProbeInterval: interval}, func() {})
}

func newCSILane(ctx context.Context, e *env, name string, interval time.Duration, registered bool) (*lane, error) {
	if registered {
		if err := registerCSINode(ctx, e.c, name); err != nil {
			return nil, err
		}
	}
	driver, err := fakecsi.Start(filepath.Join(e.work, name+".sock"), driverName, fakecsi.Ready)
	if err != nil {
		return nil, err
	}
	gate, err := gates.NewCSIGate(driver.Path(), 3*time.Second)
	if err != nil {
		return nil, err
	}
	l := &lane{e: e, name: name, driver: driver, interval: interval}
	return startLane(ctx, e, l, &controllers.NodeReconciler{NodeName: name,
		Groups: []controllers.Group{controllers.CSIDriverGroup(name, gate)}, ProbeInterval: interval}, func() {
		_ = gate.Close()
		driver.Stop()
	})
}

// startLane watches the lane's Node and runs r as its agent until the lane stops; then it calls
// closeGates.
func startLane(ctx context.Context, e *env, l *lane, r *controllers.NodeReconciler, closeGates func()) (*lane, error) {
	w, err := e.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", l.name).String()})
	if err != nil {
		return nil, err
	}
	// The binary's own manager options, as an agent inside this process.
	mgr, err := ctrl.NewManager(e.cfg, testkit.InProcess(r.ManagerOptions()))
	if err != nil {
		return nil, err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	l.events = w.ResultChan()
	l.stop = func() {
		cancel()
		<-done
		w.Stop()
		closeGates()
	}
	return l, nil
}

func registerCSINode(ctx context.Context, c client.Client, name string) error {
	return c.Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: name}}},
	})
}

// setTaint adds or removes the startup taint as another writer would.
func (l *lane) setTaint(ctx context.Context, present bool) error {
	return testkit.UpdateNode(ctx, l.e.c, l.name, func(node *corev1.Node) {
		node.Spec.Taints = startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})
		if present {
			node.Spec.Taints = append(node.Spec.Taints, startupTaint)
		}
	})
}

// errNotSeen is waitTaint's answer when the taint did not reach the state it waited for in time.
var errNotSeen = errors.New("not seen in time")

// waitTaint waits for the watch to show the node with (or without) the startup taint and
// returns when that event arrived.
func (l *lane) waitTaint(ctx context.Context, present bool, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-l.events:
			if !ok {
				return time.Time{}, errors.New("watch closed")
			}
			node, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue
			}
			has := len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})) > 0
			if has == present {
				return time.Now(), nil
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("node %s: taint present=%v: %w within %s", l.name, present, errNotSeen, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// drain discards the events already delivered.
func (l *lane) drain() {
	for {
		select {
		case <-l.events:
		default:
			return
		}
	}
}

// waitProbes waits until the driver has answered n more probes, so the agent has seen its state.
func (l *lane) waitProbes(ctx context.Context, n int64) error {
	target := l.driver.Probes() + n
	for l.driver.Probes() < target {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// trialFunc prepares one trial on a lane, then returns the moment of the trigger.
type trialFunc func(ctx context.Context, l *lane) (time.Time, error)

func probeTrial(ctx context.Context, l *lane) (time.Time, error) {
	l.driver.SetReadiness(fakecsi.NotReady)
	if err := l.waitProbes(ctx, 2); err != nil {
		return time.Time{}, err
	}
	if err := l.setTaint(ctx, true); err != nil {
		return time.Time{}, err
	}
	if _, err := l.waitTaint(ctx, true, 30*time.Second); err != nil {
		return time.Time{}, err
	}
	l.drain()
	// Flip at a random phase of the probe interval, as a real driver becomes ready whenever it does.
	time.Sleep(rand.N(l.interval))
	t0 := time.Now()
	l.driver.SetReadiness(fakecsi.Ready)
	return t0, nil
}

func csinodeTrial(ctx context.Context, l *lane) (time.Time, error) {
	if err := l.e.c.Delete(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: l.name}}); client.IgnoreNotFound(err) != nil {
		return time.Time{}, err
	}
	if err := l.holdTaint(ctx); err != nil {
		return time.Time{}, err
	}
	l.drain()
	t0 := time.Now()
	err := registerCSINode(ctx, l.e.c, l.name)
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	return t0, err
}

// holdTaint puts the taint back until it stays for 300 ms: the agent has seen that its gate no
// longer passes. Without this, a taint re-added before the agent saw the gate fail goes at once.
func (l *lane) holdTaint(ctx context.Context) error {
	for {
		if err := l.setTaint(ctx, true); err != nil {
			return err
		}
		_, err := l.waitTaint(ctx, false, 300*time.Millisecond)
		if errors.Is(err, errNotSeen) {
			return nil // held for 300 ms
		}
		if err != nil {
			return err
		}
	}
}

// fileTrial removes the CNI configuration file, and then writes it, as a CNI agent does when it
// is ready.
func fileTrial(ctx context.Context, l *lane) (time.Time, error) {
	if err := os.Remove(l.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return time.Time{}, err
	}
	if err := l.holdTaint(ctx); err != nil {
		return time.Time{}, err
	}
	l.drain()
	// At a random phase of the probe interval: the watch, not the next probe, must see it.
	time.Sleep(rand.N(l.interval))
	t0 := time.Now()
	return t0, os.WriteFile(l.file, []byte(`{"cniVersion":"1.0.0","name":"bench","plugins":[{"type":"bench"}]}`), 0o644)
}

// allocatableTrial withdraws the device plugin's resource from the Node's allocatable, and then
// publishes it with a status update, as kubelet does once the plugin has registered.
func allocatableTrial(ctx context.Context, l *lane) (time.Time, error) {
	setAllocatable := func(n string) error {
		return retry.RetryOnConflict(testkit.PatientRetry, func() error {
			node := &corev1.Node{}
			if err := l.e.c.Get(ctx, client.ObjectKey{Name: l.name}, node); err != nil {
				return err
			}
			node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), benchResource: resource.MustParse(n)}
			return l.e.c.Status().Update(ctx, node)
		})
	}
	return flipTrial(ctx, l, func(on bool) error {
		if on {
			return setAllocatable("1")
		}
		return setAllocatable("0")
	})
}

// conditionTrial turns the Node condition False, and then True with a status update, as another
// agent (Node Problem Detector, a network agent) publishes it.
func conditionTrial(ctx context.Context, l *lane) (time.Time, error) {
	setCondition := func(status corev1.ConditionStatus) error {
		return retry.RetryOnConflict(testkit.PatientRetry, func() error {
			node := &corev1.Node{}
			if err := l.e.c.Get(ctx, client.ObjectKey{Name: l.name}, node); err != nil {
				return err
			}
			now := metav1.Now()
			node.Status.Conditions = []corev1.NodeCondition{{Type: benchCondition, Status: status, Reason: "Bench",
				LastHeartbeatTime: now, LastTransitionTime: now}}
			return l.e.c.Status().Update(ctx, node)
		})
	}
	return flipTrial(ctx, l, func(on bool) error { return setCondition(conditionStatus(on)) })
}

// podTrial turns the lane's pod not Ready, and then Ready with a status update, as kubelet does
// when the other agent's readiness probe passes.
func podTrial(ctx context.Context, l *lane) (time.Time, error) {
	setReady := func(status corev1.ConditionStatus) error {
		return retry.RetryOnConflict(testkit.PatientRetry, func() error {
			pod := &corev1.Pod{}
			if err := l.e.c.Get(ctx, client.ObjectKey{Namespace: benchPodNamespace, Name: l.name}, pod); err != nil {
				return err
			}
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
			return l.e.c.Status().Update(ctx, pod)
		})
	}
	return flipTrial(ctx, l, func(on bool) error { return setReady(conditionStatus(on)) })
}

// flipTrial turns off what the lane's agent waits for, holds the taint, and turns it on again as
// its producer would: the trial's start is that write.
func flipTrial(ctx context.Context, l *lane, set func(on bool) error) (time.Time, error) {
	if err := set(false); err != nil {
		return time.Time{}, err
	}
	if err := l.holdTaint(ctx); err != nil {
		return time.Time{}, err
	}
	l.drain()
	t0 := time.Now()
	return t0, set(true)
}

func conditionStatus(on bool) corev1.ConditionStatus {
	if on {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

func readdTrial(ctx context.Context, l *lane) (time.Time, error) {
	// Re-adds are rare events; spacing the trials keeps them independent of each other.
	time.Sleep(50*time.Millisecond + rand.N(50*time.Millisecond))
	l.drain()
	t0 := time.Now()
	if err := l.setTaint(ctx, true); err != nil {
		return time.Time{}, err
	}
	if _, err := l.waitTaint(ctx, true, 30*time.Second); err != nil {
		return time.Time{}, err
	}
	return t0, nil
}

// runScenario runs trials spread over lanes side by side and returns the latencies.
func runScenario(ctx context.Context, e *env, name string, lanes, trials int, interval time.Duration, registered bool, kind gateKind,
	trial trialFunc) ([]time.Duration, error) {
	var mu sync.Mutex
	var samples []time.Duration
	errs := make(chan error, lanes)
	var wg sync.WaitGroup
	for i := range lanes {
		l, err := newLane(ctx, e, fmt.Sprintf("react-%s-%d", name, i), interval, registered, kind)
		if err != nil {
			return nil, err
		}
		defer l.stop()
		// Let the agent start and remove nothing: the node has no taint yet.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range trials / lanes {
				t0, err := trial(ctx, l)
				if err != nil {
					errs <- err
					return
				}
				gone, err := l.waitTaint(ctx, false, 30*time.Second)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				samples = append(samples, gone.Sub(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return samples, <-errs
}

func measureReaction(ctx context.Context, e *env, trials int) ([]reactionResult, error) {
	// Trials that mostly wait run on several nodes side by side to save time; the others run on
	// one node at a time, so that they measure one agent's reaction and not a 2-core machine
	// saturated by several.
	scenarios := []struct {
		name, label, target string
		lanes               int
		interval, limit     time.Duration
		registered          bool
		kind                gateKind
		trial               trialFunc
	}{
		{"probe1s", "driver ready (Probe) to taint removed, --probe-interval=1s", "p99 < interval + 100 ms", 8,
			time.Second, 1100 * time.Millisecond, true, gateCSI, probeTrial},
		{"probe100ms", "driver ready (Probe) to taint removed, --probe-interval=100ms", "p99 < interval + 100 ms", 2,
			100 * time.Millisecond, 200 * time.Millisecond, true, gateCSI, probeTrial},
		{"csinode", "CSINode registration to taint removed", "p99 < 100 ms", 1, time.Second, 100 * time.Millisecond, false, gateCSI, csinodeTrial},
		{"readd", "taint re-added to taint removed", "p99 < 100 ms", 1, time.Second, 100 * time.Millisecond, true, gateCSI, readdTrial},
		// The file is watched: it is seen long before the next probe, which alone would take half
		// an interval (500 ms) at the median and the whole interval at worst.
		{"file", "CNI configuration file written (--ready-file, watched) to taint removed, --probe-interval=1s", "p99 < 100 ms", 1,
			time.Second, 100 * time.Millisecond, false, gateFile, fileTrial},
		{"allocatable", "device plugin's resource published in allocatable (status update) to taint removed", "p99 < 100 ms", 1,
			time.Second, 100 * time.Millisecond, false, gateAllocatable, allocatableTrial},
		{"condition", "Node condition published (--require-condition, status update) to taint removed", "p99 < 100 ms", 1,
			time.Second, 100 * time.Millisecond, false, gateCondition, conditionTrial},
		{"pod", "another DaemonSet's pod Ready (--require-pod, status update) to taint removed", "p99 < 100 ms", 1,
			time.Second, 100 * time.Millisecond, false, gatePod, podTrial},
	}
	var out []reactionResult
	for _, s := range scenarios {
		start := time.Now()
		samples, err := runScenario(ctx, e, s.name, s.lanes, trials, s.interval, s.registered, s.kind, s.trial)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		r := reactionResult{name: s.label, target: s.target, limit: s.limit, lanes: s.lanes, samples: samples}
		logf("  %s: %d trials in %s, p50 %s p99 %s", s.name, len(samples), time.Since(start).Round(time.Second),
			r.percentile(0.5), r.percentile(0.99))
		out = append(out, r)
	}
	return out, nil
}
