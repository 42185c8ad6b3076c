// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors here: %v", err)
	}
	return len(entries)
}

// settle gives goroutines that are ending a moment to end before they are counted.
func settle() {
	for range 20 {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCSIGateSurvivesAMisbehavingDriver drives a real gRPC driver through hangs, crashes,
// restarts on a new socket file and flaps, and checks that the prober's verdict on the gate is
// right each time (a hang is cut off by the gate's timeout) and that neither goroutines nor file
// descriptors grow.
func TestCSIGateSurvivesAMisbehavingDriver(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(t.TempDir(), "csi.sock")
	driver, err := fakecsi.Start(path, "leak.csi.example.com", fakecsi.Ready)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Stop()
	gate, err := gates.NewCSIGate(path, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Close() }()
	p := newProber([]gates.Probed{gate}, time.Hour, "n1", "", clock.RealClock{}, metrics.Default())
	ctx := context.Background()

	probe := func(want string) {
		t.Helper()
		// A restarted socket is dialled again when the old connection fails; allow a few probes.
		deadline := time.Now().Add(5 * time.Second)
		for {
			p.probeOnce(ctx)
			gerr, _ := p.notReady(false)
			got := "ready"
			if gerr != nil {
				got = gerr.reason
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gate says %q, want %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cycle := func() {
		probe("ready")
		driver.SetReadiness(fakecsi.Hung)
		probe(gates.ReasonTimeout)
		driver.SetReadiness(fakecsi.NotReady)
		probe(gates.ReasonNotReady)
		driver.SetReadiness(fakecsi.Failing)
		probe(gates.ReasonError)
		driver.SetReadiness(fakecsi.Ready)
		driver.Stop() // crash: the socket file is gone
		probe(gates.ReasonUnavailable)
		if err := driver.Restart(); err != nil { // a new socket file at the same path
			t.Fatal(err)
		}
		probe("ready")
	}

	cycle() // warm up: the first cycle opens what later ones reuse
	settle()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	for range 10 {
		cycle()
	}
	settle()
	if got := runtime.NumGoroutine(); got > goroutines+2 {
		t.Errorf("goroutines grew from %d to %d over 10 cycles", goroutines, got)
	}
	if got := openFDs(t); got > fds+2 {
		t.Errorf("file descriptors grew from %d to %d over 10 cycles", fds, got)
	}
	if gate.DriverName() != "leak.csi.example.com" {
		t.Errorf("driver name = %q", gate.DriverName())
	}
}

func TestAFileIsSeenAtOnceWithoutWaitingForAProbeTick(t *testing.T) {
	netd := filepath.Join(t.TempDir(), "net.d") // created by the CNI agent, after the gate starts
	g, err := gates.NewFileGate(filepath.Join(netd, "*.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	p := newProber([]gates.Probed{g}, time.Hour, "n1", "", clock.RealClock{}, metrics.Default())
	var done <-chan error
	// Registered first, so it runs after startRunnable has stopped the prober.
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	done = startRunnable(t, p.Start)

	ready := func() bool { gerr, _ := p.notReady(false); return gerr == nil }
	eventually(t, "the first probe", func() bool { gerr, _ := p.notReady(false); return gerr != nil && gerr.reason == gates.ReasonNoFile })
	if err := os.Mkdir(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // twice the gate's retry of a missing directory: it is watched now
	if ready() {
		t.Fatal("ready without a file")
	}
	start := time.Now()
	if err := os.WriteFile(filepath.Join(netd, "05-cilium.conflist"), []byte(`{"cniVersion":"1.0.0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the file to be seen", ready)
	t.Logf("seen after %s, with an hour between probe ticks", time.Since(start))

	// A CNI agent that reinstalls removes its directory and writes it again.
	if err := os.RemoveAll(netd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removal to be seen", func() bool { return !ready() })
	if err := os.Mkdir(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netd, "05-cilium.conflist"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new directory's file to be seen", ready)
}

// The reaction time counts from when the gates started passing, whatever kind of gate held the
// taint last: here the allocatable resource appears a minute after the agent started.
func TestReadyToRemovedCountsFromTheResourceAppearing(t *testing.T) {
	gpus, err := gates.ParseResourceRequirement("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	e := newEpisodeTest(t, testNode("uid-r1", startup))
	e.set(func(r *NodeReconciler) { r.Groups[0].Gates = []gates.Gate{gates.NewResourceGate(gpus)} })
	e.reconcile()
	e.clock.Step(time.Minute)
	node := &corev1.Node{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	if err := e.c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	count, sum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	e.reconcile()
	afterCount, afterSum := histogram(t, metrics.Default().ReadyToRemovedSeconds)
	if afterCount != count+1 || afterSum-sum > 1 {
		t.Errorf("ready-to-removed observed %d times, %.0fs; want once, under a second after the resource appeared", afterCount-count, afterSum-sum)
	}
}

// The node agents' gate holds the taint while a DaemonSet's pod is not Ready here, names it in
// startup_taint_gate_waiting_for, asks to be checked again although no watch tells it about
// DaemonSets, and lets the taint go, and the series, once the pod is Ready.
func TestTheNodeAgentsGateNamesTheDaemonSetItWaitsForAndIsCheckedAgain(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cni", UID: "uid-cni"}}
	ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	// The gate lists the pods the scheduler has not placed, by spec.nodeName, as the API server does.
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeWith(startup), ds).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	gate := gates.NewNodeAgentsGate(gates.NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{{Key: startup.Key}}})
	r := newTestReconciler(t, c, gate)
	reg := prometheus.NewRegistry()
	r.Registerer = reg
	r.build()
	probe(r)
	res, err := r.Reconcile(context.Background(), nodeRequest)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Second {
		t.Errorf("requeue after %v, want the gate checked again within 5s", res.RequeueAfter)
	}
	waiting := r.wired.metrics.WaitingFor.WithLabelValues(gates.NodeAgentsName, "kube-system/cni")
	if got := testutil.ToFloat64(waiting); got != 1 {
		t.Errorf("startup_taint_gate_waiting_for{agent=kube-system/cni} = %v, want 1", got)
	}
	if !hasStartup(t, c) {
		t.Fatal("the taint went while the DaemonSet has no pod here")
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cni-x",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cni", UID: ds.UID, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := reconcileNode(t, r); err != nil {
		t.Fatal(err)
	}
	if hasStartup(t, c) {
		t.Error("the taint stayed once the DaemonSet's pod is Ready")
	}
	if n, err := testutil.GatherAndCount(reg, "startup_taint_gate_waiting_for"); err != nil || n != 0 {
		t.Errorf("%d startup_taint_gate_waiting_for series (%v) once nothing holds the node, want none", n, err)
	}
}

func hasStartup(t *testing.T, c client.Client) bool {
	t.Helper()
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	return len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startup.Key}})) > 0
}

// staleEvidenceGate stands for the registration gate (gates.AfterReboot): what it checks can only
// be stale after a reboot.
type staleEvidenceGate struct{ flipGate }

func (g *staleEvidenceGate) Name() string { return "stale" }

func (g *staleEvidenceGate) OnlyAfterReboot() {}

func TestAGateOfWhatARebootLeavesStaleHoldsOnlyAfterAReboot(t *testing.T) {
	node := testNode("uid-b5", startup, foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	e := newEpisodeTest(t, node)
	stale := &staleEvidenceGate{flipGate{err: errNotReady}}
	e.set(func(r *NodeReconciler) {
		r.Groups[0].Taints = retaintSpecs
		r.Groups[0].Gates = append(r.Groups[0].Gates, stale)
	})

	// The first boot: the gate does not pass, and is not heeded.
	e.ready(true)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v at the first boot, want the startup taint gone whatever the gate says", got)
	}

	// After a reboot it is heeded: the taint goes back, and stays until the gate passes.
	e.updateStatus(booted("boot-2"))
	e.restart(true)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign, retaintTaint}) {
		t.Fatalf("taints %v after the reboot while the gate does not pass, want %v back", got, retaintTaint)
	}
	stale.err = nil
	probe(e.r)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v once the gate passes", got)
	}

	// A restart in the same boot: the record names it, and the gate is not heeded again.
	stale.err = errNotReady
	e.restart(true)
	e.reconcile()
	if got := e.taints(); !testkit.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after a restart in the same boot, want no re-taint", got)
	}
}
