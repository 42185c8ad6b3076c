// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// csiPlugin is a CSI driver's node plugin that hack/drivers/build.sh builds from its module, with
// what it needs to run on a hollow node and the startup taint it removes itself.
type csiPlugin struct {
	// name is its tools module's directory under hack/drivers; driver the CSI driver's name.
	name, driver string
	// own is the taint the driver's own removal takes off.
	own corev1.Taint
	// labels are the Node's labels its node plugin reads in place of a cloud's metadata.
	labels map[string]string
	// central says its removal is a controller of its own that watches every Node and CSINode
	// (the node plugin's process removes nothing); otherwise the node plugin removes the taint.
	central bool
	// gaveUp is its log line when it stops trying to remove the taint; "" when it never does.
	gaveUp string
}

// csiPlugins are the drivers measured, as their v1.44.0 and v1.28.1 code stands.
var csiPlugins = []csiPlugin{
	{name: "ebs", driver: "ebs.csi.aws.com",
		// pkg/driver/node.go: AgentNotReadyNodeTaintKey; kubelet registers it, as the driver's docs ask.
		own: corev1.Taint{Key: "ebs.csi.aws.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute},
		// pkg/cloud/metadata/k8s.go reads these with AWS_EC2_METADATA_DISABLED, and the instance ID
		// from the providerID, which kubemark sets to kubemark://NODE: the node names end in one.
		labels: map[string]string{corev1.LabelInstanceTypeStable: "m5.large", corev1.LabelTopologyRegion: "us-east-1",
			corev1.LabelTopologyZone: "us-east-1a"},
		gaveUp: "Retries exhausted, giving up attempting to remove node taint(s)"},
	{name: "gcp-pd", driver: "pd.csi.storage.gke.io",
		// pkg/constants/constants.go: StartupTaintKey, its value and effect; its webhook adds it to a
		// new Node, kubelet does here.
		own:     corev1.Taint{Key: "pd.csi.storage.gke.io/not-ready", Value: "true", Effect: corev1.TaintEffectNoSchedule},
		central: true},
}

// version is the plugin's version, as its tools module pins it (hack/drivers/NAME/go.mod).
func (p csiPlugin) version() (string, error) {
	data, err := os.ReadFile(filepath.Join("hack", "drivers", p.name, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("the %s driver's version: %w", p.name, err)
	}
	m := regexp.MustCompile(`(?m)^require \S+ (v\S+)$`).FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("hack/drivers/%s/go.mod requires no single module", p.name)
	}
	return string(m[1]), nil
}

// The drivers scenario's timings.
const (
	// driverSettle is how long a node waits, after kubelet's CSINode write, for its taint to go,
	// before the report says it never went: the EBS driver's next try is at most twice as far from
	// its start as the write (it backs off exponentially), and it stops trying after about 256 s.
	driverSettle = time.Minute
	// pluginAfterKubelet is from kubelet's return after a reboot to the driver's node plugin's
	// start, as its DaemonSet's pod starts again.
	pluginAfterKubelet = 2 * time.Second
)

// driverNode is one hollow node of the drivers scenario and what the watches saw of it.
type driverNode struct {
	// name is the Node's; driver the CSI driver's.
	name, driver string
	// own: the driver's own removal takes its taint off; otherwise the agent takes off one the
	// driver does not own (startupTaint).
	own      bool
	taint    corev1.Taint
	kubelet  *hollowkubelet.Kubelet
	failures *workload.MountFailures
	plugin   *process
	agent    *process
	metadata *httptest.Server
	// registrar registers the driver registrarDelay after its node plugin started.
	registrar *fakecsi.Registrar
	// gaveUp sees the node plugin's line that it stopped trying to remove its taint.
	gaveUp *phrase
	// pluginStarted and registered are when the node plugin started and its registrar registered
	// it, for the boot and again after the reboot (returned).
	pluginStarted, registered time.Time
	returned, registeredAgain time.Time
	// failedBefore is how many mounts failed before the reboot.
	failedBefore int
	// arrivals are the pods that arrived while the node was down or coming back.
	arrivals []string

	// Set by the round's watch: when CSINode listed the driver, when the taint was on and off
	// (in order), and when each pod was bound to the node.
	listed   []time.Time
	on, off  []time.Time
	tainted  bool
	isListed bool
	bound    map[string]time.Time
}

// firstAfter returns the first of times at or after t, or zero.
func firstAfter(times []time.Time, t time.Time) time.Time {
	for _, at := range times {
		if !at.Before(t) {
			return at
		}
	}
	return time.Time{}
}

// driverRow is one row of the drivers tables: a driver, a remover, a registrar delay, and, for a
// reboot, the reboot's numbers.
type driverRow struct {
	plugin   string
	own      bool
	delay    time.Duration
	rebooted bool
	nodes    int
	// gone: kubelet's CSINode write to the taint gone, per node whose taint went; never counts
	// the others; bound: the write to the node's first pod bound.
	gone, bound []time.Duration
	never       int
	// early: pods bound before kubelet's CSINode write (after a reboot, its write in the new
	// boot), of pods; notRegistered counts kubelet's failed mounts for want of the
	// driver's registration.
	early, pods, notRegistered int
	// gaveUp counts nodes whose driver logged that it stopped trying.
	gaveUp int
	// After a reboot: nodes whose taint came back before kubelet's CSINode write in the new boot.
	back int
}

// measureDrivers runs each driver's node plugin on hollow nodes beside the control plane, for
// each registrar delay: runs rounds, each of nodes nodes on which the driver removes its own
// taint and as many on which the agent removes another, booting together with podsPerNode
// pods waiting for each. Rounds with the first delay then reboot their nodes, without kubelet's
// graceful shutdown, while pods keep arriving, with the boot record and the crash policy on.
func measureDrivers(ctx context.Context, e *env, binary, dir string, delays []time.Duration, nodes, runs int) ([]driverRow, map[string]string, error) {
	admin, err := e.kubeconfigFor("bench-drivers-admin")
	if err != nil {
		return nil, nil, err
	}
	cpLog, err := os.Create(filepath.Join(e.work, "drivers-control-plane.log"))
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = cpLog.Close() }()
	cp, err := workload.StartControlPlane(admin, cpLog)
	if err != nil {
		return nil, nil, err
	}
	defer cp.Stop()
	uninstall, err := workload.InstallCrashPolicy(ctx, e.c, startupTaint.Key+":"+string(startupTaint.Effect))
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = uninstall(context.Background()) }()

	var rows []driverRow
	versions := map[string]string{}
	for _, p := range csiPlugins {
		version, err := p.version()
		if err != nil {
			return nil, nil, err
		}
		versions[p.name] = version
		bin := filepath.Join(dir, p.name+"-"+version)
		if _, err := os.Stat(bin); err != nil {
			return nil, nil, fmt.Errorf("the %s driver's node plugin (run `make drivers`): %w", p.name, err)
		}
		if err := e.c.Create(ctx, workload.CSIDriver(p.driver)); err != nil {
			return nil, nil, err
		}
		var controller *process
		if p.central {
			if controller, err = startTaintController(ctx, bin, admin); err != nil {
				return nil, nil, err
			}
		}
		for di, delay := range delays {
			own, agent := driverRow{plugin: p.name, own: true, delay: delay}, driverRow{plugin: p.name, delay: delay}
			ownBack, agentBack := own, agent
			ownBack.rebooted, agentBack.rebooted = true, true
			for run := range runs {
				logf("  %s %s, registrar %s after it starts, run %d", p.name, version, delay, run+1)
				round, err := driversRound(ctx, e, binary, bin, admin, p, delay, di == 0, names(p, delay, run, nodes))
				if err != nil {
					controller.stop()
					return nil, nil, fmt.Errorf("%s, registrar after %s, run %d: %w", p.name, delay, run+1, err)
				}
				for _, n := range round {
					row, back := &agent, &agentBack
					if n.own {
						row, back = &own, &ownBack
					}
					row.addBoot(n)
					if di == 0 {
						back.addReboot(n)
					}
				}
			}
			rows = append(rows, own, agent)
			if di == 0 {
				rows = append(rows, ownBack, agentBack)
			}
		}
		if controller != nil && !controller.running() {
			return nil, nil, fmt.Errorf("the %s taint controller exited: %s", p.name, controller.log)
		}
		controller.stop()
		if err := e.c.Delete(ctx, workload.CSIDriver(p.driver)); err != nil {
			return nil, nil, err
		}
	}
	return rows, versions, nil
}

// names are a round's node names, the driver's own removal's first: each ends in an EC2 instance
// ID, which the EBS driver reads from the providerID.
func names(p csiPlugin, delay time.Duration, run, nodes int) []string {
	out := make([]string, 0, 2*nodes)
	for _, remover := range []string{"own", "agent"} {
		for i := range nodes {
			out = append(out, fmt.Sprintf("%s-%s-%ds-%d-%d-i-%017x", p.name, remover, int(delay.Seconds()), run, i, run*nodes+i))
		}
	}
	return out
}

// startTaintController starts the GCP PD driver's taint controller (--run-taint-controller), the
// process that removes its startup taint. Its manager always elects a leader
// (cmd/gce-pd-csi-driver/main.go, LeaderElection: enableController) without a namespace flag, so
// outside a pod controller-runtime looks for the service account's namespace file and exits; it
// runs in a mount namespace of its own with that file on a tmpfs over /run.
func startTaintController(ctx context.Context, bin, kubeconfig string) (*process, error) {
	const script = `mount -t tmpfs none /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && ` +
		`printf kube-system > /run/secrets/kubernetes.io/serviceaccount/namespace && exec "$0" "$@"`
	p, err := startProcess(ctx, []string{"KUBECONFIG=" + kubeconfig}, nil, "unshare", "--mount", "sh", "-c", script, bin,
		"--run-taint-controller", "--taint-metrics-addr=0", "--run-controller-service=false", "--run-node-service=false")
	if err != nil {
		return nil, err
	}
	// Its first election takes the free lease at once; give it the time to start its watches.
	time.Sleep(3 * time.Second)
	if !p.running() {
		return nil, fmt.Errorf("the GCP PD taint controller exited (it needs unshare and root): %s", p.log)
	}
	return p, nil
}

// driversRound boots one node per name at once, the first half under the driver's own removal,
// the rest under the agent's, and returns once each node's taint went and its pods were bound
// there, or driverSettle after kubelet's CSINode write; with reboot, it then reboots each node.
func driversRound(ctx context.Context, e *env, binary, bin, admin string, p csiPlugin, delay time.Duration, reboot bool, names []string) ([]*driverNode, error) {
	nodes := make([]*driverNode, len(names))
	for i, name := range names {
		n := &driverNode{name: name, driver: p.driver, own: i < len(names)/2, taint: startupTaint, failures: workload.NewMountFailures(),
			bound: map[string]time.Time{}, gaveUp: &phrase{s: p.gaveUp}}
		if n.own {
			n.taint = p.own
		}
		nodes[i] = n
		for k := range podsPerNode {
			if err := createDriverPod(ctx, e, p, name, fmt.Sprintf("%s-%d", name, k)); err != nil {
				return nil, err
			}
		}
	}
	defer cleanUpDriverRound(e, nodes)
	w, err := watchDrivers(ctx, e, p, nodes)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			err := bootDriverNode(ctx, e, binary, bin, admin, p, delay, n)
			if err == nil && reboot {
				err = rebootDriverNode(ctx, e, binary, bin, admin, p, delay, n)
			}
			errs <- err
		}()
	}
	var all []error
	for range nodes {
		all = append(all, <-errs)
	}
	w.stop()
	return nodes, errors.Join(all...)
}

// createDriverPod creates a pod that may only run on node, with a PVC-backed volume of the
// driver: a static PersistentVolume, as the EBS and GCP PD drivers have no inline volumes.
func createDriverPod(ctx context.Context, e *env, p csiPlugin, node, name string) error {
	for _, o := range workload.PodObjects(metav1.NamespaceDefault, name, node, p.driver, true) {
		if err := e.c.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// bootDriverNode starts the node's kubelet, which registers the Node with its taint, then the
// driver's node plugin (and the agent, under the agent's removal), registers the plugin with
// kubelet delay after it started, and waits until the taint went and every pod is bound to the
// node, or driverSettle after kubelet lists the driver in CSINode.
func bootDriverNode(ctx context.Context, e *env, binary, bin, admin string, p csiPlugin, delay time.Duration, n *driverNode) error {
	if !n.own {
		if err := workload.StampBootID(ctx, e.c, n.name, bootBefore); err != nil {
			return err
		}
	}
	var err error
	if n.kubelet, err = hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: admin, Node: n.name,
		RegisterWithTaints: []corev1.Taint{n.taint}, Labels: p.labels, Log: n.failures}); err != nil {
		return err
	}
	// The node plugin's pod runs only on a registered Node, and the EBS driver reads it as it starts.
	if err := pollUntil(ctx, n.name+": registered", func(ctx context.Context) bool {
		return e.c.Get(ctx, client.ObjectKey{Name: n.name}, &corev1.Node{}) == nil
	}); err != nil {
		return err
	}
	if err := startPlugin(ctx, e, bin, admin, p, n); err != nil {
		return err
	}
	n.pluginStarted = time.Now()
	if err := startDriverAgent(ctx, e, binary, n); err != nil {
		return err
	}
	time.Sleep(time.Until(n.pluginStarted.Add(delay)))
	if n.registrar, err = fakecsi.Register(n.kubelet.PluginsRegistry(), p.driver, socketOf(e, n)); err != nil {
		return err
	}
	n.registered = time.Now()
	// Every pod of the boot is bound before a reboot deletes them, so that none lands after.
	return waitDriverNode(ctx, e, n, n.registered, podsPerNode)
}

// socketOf is the node plugin's CSI socket.
func socketOf(e *env, n *driverNode) string { return filepath.Join(e.work, n.name+".sock") }

// startPlugin starts the node's driver plugin, as its DaemonSet's pod would.
func startPlugin(ctx context.Context, e *env, bin, admin string, p csiPlugin, n *driverNode) error {
	socket := socketOf(e, n)
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var err error
	switch p.name {
	case "ebs":
		n.plugin, err = startProcess(ctx, []string{"AWS_EC2_METADATA_DISABLED=true", "CSI_NODE_NAME=" + n.name}, n.gaveUp, bin,
			"node", "--endpoint=unix://"+socket, "--kubeconfig="+admin)
	case "gcp-pd":
		if n.metadata == nil {
			n.metadata = gceMetadata(n.name)
		}
		n.plugin, err = startProcess(ctx, []string{"GCE_METADATA_HOST=" + strings.TrimPrefix(n.metadata.URL, "http://")}, n.gaveUp, bin,
			"--endpoint=unix://"+socket, "--run-controller-service=false", "--node-name="+n.name)
	default:
		err = fmt.Errorf("no way to start the %s driver", p.name)
	}
	return err
}

// startDriverAgent starts the agent under the agent's removal: it gates on the driver's Probe, through
// the node plugin's socket, and on kubelet's registration of it.
func startDriverAgent(ctx context.Context, e *env, binary string, n *driverNode) error {
	if n.own {
		return nil
	}
	conf, err := e.kubeconfigFor("agent-" + n.name)
	if err != nil {
		return err
	}
	n.agent, err = startProcess(ctx, nil, nil, binary, "--kubeconfig="+conf, "--node-name="+n.name, testkit.Unconfined,
		"--plugins-registry="+n.kubelet.PluginsRegistry(), "--csi-address="+socketOf(e, n),
		"--taint="+startupTaint.Key+":"+string(startupTaint.Effect), "--metrics-bind-address=0", "--health-probe-bind-address=0")
	return err
}

// gceMetadata serves what the GCP PD node plugin reads from GCE's metadata server as it starts
// (pkg/gce-cloud-provider/metadata/metadata.go): the zone, the project, the instance's name and
// its machine type.
func gceMetadata(node string) *httptest.Server {
	values := map[string]string{
		"/computeMetadata/v1/instance/zone":         "projects/1/zones/us-central1-a",
		"/computeMetadata/v1/project/project-id":    "bench",
		"/computeMetadata/v1/instance/name":         node,
		"/computeMetadata/v1/instance/machine-type": "projects/1/machineTypes/n2-standard-4",
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := values[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		_, _ = w.Write([]byte(v))
	}))
}

// waitDriverNode waits until the node's taint is gone and want pods are bound to it, or
// driverSettle after kubelet lists the driver in its CSINode, counted from since.
func waitDriverNode(ctx context.Context, e *env, n *driverNode, since time.Time, want int) error {
	deadline := time.Time{}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-n.plugin.done():
			return false, fmt.Errorf("%s: the driver's node plugin exited: %s", n.name, n.plugin.log)
		case <-n.agent.done():
			return false, fmt.Errorf("%s: the agent exited: %s", n.name, n.agent.log)
		case <-n.kubelet.Exited():
			return false, fmt.Errorf("%s: kubelet exited: %w", n.name, n.kubelet.Err())
		default:
		}
		node := &corev1.Node{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: n.name}, node); err != nil {
			return false, err
		}
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.InNamespace(metav1.NamespaceDefault), client.MatchingFields{"spec.nodeName": n.name}); err != nil {
			return false, err
		}
		if !hasKey(node, n.taint.Key) && len(pods.Items) >= want {
			return true, nil
		}
		if deadline.IsZero() {
			cn, err := e.cs.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
			if err == nil && listsDriverNamed(cn, n.driver) {
				deadline = time.Now().Add(driverSettle)
			}
			if time.Since(since) > 2*time.Minute && deadline.IsZero() {
				return false, fmt.Errorf("%s: kubelet never listed the driver in CSINode: %s", n.name, n.plugin.log)
			}
		}
		return !deadline.IsZero() && time.Now().After(deadline), nil
	})
}

// rebootDriverNode reboots the node without kubelet's graceful shutdown: its pods go, its kubelet,
// driver and agent stop, and it stays down until the node lifecycle controller marks it
// unreachable, while a pod that needs the driver arrives every arrivalEvery. Kubelet comes back
// with a new boot ID (downFor after that mark), the agent with it, the driver's node plugin
// pluginAfterKubelet later, and its registrar delay after that; pods keep arriving until
// arrivalsAfter past the registration.
func rebootDriverNode(ctx context.Context, e *env, binary, bin, admin string, p csiPlugin, delay time.Duration, n *driverNode) error {
	n.failedBefore, _ = n.failures.Count()
	if err := e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingFields{"spec.nodeName": n.name}, client.GracePeriodSeconds(0)); err != nil {
		return err
	}
	n.agent.stop()
	n.agent = nil
	n.plugin.stop()
	n.kubelet.Stop()
	n.registrar.Unregister()
	if err := waitUnreachable(ctx, e, n.name); err != nil {
		return err
	}
	stopArrivals := arrive(n.name, func(name string) error { return createDriverPod(ctx, e, p, n.name, name) })
	err := func() error {
		if !n.own {
			if err := workload.StampBootID(ctx, e.c, n.name, bootAfter); err != nil {
				return err
			}
		}
		time.Sleep(downFor)
		n.returned = time.Now()
		var err error
		if n.kubelet, err = hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: admin, Node: n.name,
			RegisterWithTaints: []corev1.Taint{n.taint}, Labels: p.labels, Log: n.failures}); err != nil {
			return err
		}
		if err := fakecsi.LeaveStaleRegistration(n.kubelet.PluginsRegistry(), p.driver); err != nil {
			return err
		}
		if err := startDriverAgent(ctx, e, binary, n); err != nil {
			return err
		}
		time.Sleep(pluginAfterKubelet)
		if err := startPlugin(ctx, e, bin, admin, p, n); err != nil {
			return err
		}
		time.Sleep(delay)
		if n.registrar, err = fakecsi.Register(n.kubelet.PluginsRegistry(), p.driver, socketOf(e, n)); err != nil {
			return err
		}
		n.registeredAgain = time.Now()
		time.Sleep(arrivalsAfter)
		return nil
	}()
	var arrivalErr error
	n.arrivals, arrivalErr = stopArrivals()
	if err := errors.Join(err, arrivalErr); err != nil {
		return err
	}
	return waitDriverNode(ctx, e, n, n.registeredAgain, len(n.arrivals))
}

// phrase notes whether a process's output ever held s; an empty s is never seen.
type phrase struct {
	s     string
	mu    sync.Mutex
	found bool
}

// Write implements io.Writer; the processes write a log line at a time.
func (p *phrase) Write(b []byte) (int, error) {
	if p.s != "" && strings.Contains(string(b), p.s) {
		p.mu.Lock()
		p.found = true
		p.mu.Unlock()
	}
	return len(b), nil
}

func (p *phrase) seen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.found
}

// driversWatch records, from watch events, each node's taint going on and off, kubelet listing
// the driver in its CSINode, and its pods' binding.
type driversWatch struct {
	watches []interface{ Stop() }
	done    chan struct{}
	once    sync.Once
}

func watchDrivers(ctx context.Context, e *env, p csiPlugin, nodes []*driverNode) (*driversWatch, error) {
	byName := map[string]*driverNode{}
	for _, n := range nodes {
		byName[n.name] = n
	}
	w := &driversWatch{done: make(chan struct{})}
	nodeWatch, err := e.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	w.watches = append(w.watches, nodeWatch)
	csiNodeWatch, err := e.cs.StorageV1().CSINodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		w.stop()
		return nil, err
	}
	w.watches = append(w.watches, csiNodeWatch)
	podWatch, err := e.cs.CoreV1().Pods(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		w.stop()
		return nil, err
	}
	w.watches = append(w.watches, podWatch)
	nodeEvents, csiNodeEvents, podEvents := stamped(nodeWatch.ResultChan()), stamped(csiNodeWatch.ResultChan()), stamped(podWatch.ResultChan())
	go func() {
		defer close(w.done)
		for nodeEvents != nil || csiNodeEvents != nil || podEvents != nil {
			var ev stampedEvent
			var ok bool
			select {
			case ev, ok = <-nodeEvents:
				if !ok {
					nodeEvents = nil
				}
			case ev, ok = <-csiNodeEvents:
				if !ok {
					csiNodeEvents = nil
				}
			case ev, ok = <-podEvents:
				if !ok {
					podEvents = nil
				}
			}
			if !ok {
				continue
			}
			switch o := ev.Object.(type) {
			case *corev1.Node:
				if n := byName[o.Name]; n != nil && hasKey(o, n.taint.Key) != n.tainted {
					n.tainted = !n.tainted
					if n.tainted {
						n.on = append(n.on, ev.at)
					} else {
						n.off = append(n.off, ev.at)
					}
				}
			case *storagev1.CSINode:
				if n := byName[o.Name]; n != nil && listsDriverNamed(o, p.driver) != n.isListed {
					n.isListed = !n.isListed
					if n.isListed {
						n.listed = append(n.listed, ev.at)
					}
				}
			case *corev1.Pod:
				if n := byName[o.Spec.NodeName]; n != nil && n.bound[o.Name].IsZero() {
					n.bound[o.Name] = ev.at
				}
			}
		}
	}()
	return w, nil
}

// stop ends the watches and waits until their last events are recorded.
func (w *driversWatch) stop() {
	w.once.Do(func() {
		for _, x := range w.watches {
			x.Stop()
		}
	})
	if len(w.watches) == 3 {
		<-w.done
	}
}

// cleanUpDriverRound stops what a round started and deletes its Nodes, CSINodes, pods, claims
// and volumes.
func cleanUpDriverRound(e *env, nodes []*driverNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			n.agent.stop()
			if n.registrar != nil {
				n.registrar.Unregister()
			}
			if n.kubelet != nil {
				n.kubelet.Stop()
			}
			n.plugin.stop()
			if n.metadata != nil {
				n.metadata.Close()
			}
		})
	}
	wg.Wait()
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	deleteRound(e, names)
}

// notRegistered counts the node's failed mounts for want of the driver's registration in its
// boot (rebooted false) or after its reboot.
func (n *driverNode) notRegistered(rebooted bool) int {
	causes := n.failures.List()
	if !n.returned.IsZero() {
		if rebooted {
			causes = causes[n.failedBefore:]
		} else {
			causes = causes[:n.failedBefore]
		}
	}
	count := 0
	for _, c := range causes {
		if c == workload.NotRegistered {
			count++
		}
	}
	return count
}

// addBoot records a node's boot.
func (r *driverRow) addBoot(n *driverNode) {
	r.nodes++
	var write time.Time
	if len(n.listed) > 0 {
		write = n.listed[0]
	}
	gone := firstAfter(n.off, time.Time{})
	if !n.returned.IsZero() && gone.After(n.returned) {
		gone = time.Time{}
	}
	switch {
	case gone.IsZero() || write.IsZero():
		r.never++
	default:
		r.gone = append(r.gone, gone.Sub(write))
	}
	var first time.Time
	for pod, at := range n.bound {
		if strings.Contains(pod, "-after-") {
			continue
		}
		r.pods++
		if write.IsZero() || at.Before(write) {
			r.early++
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if !first.IsZero() && !write.IsZero() {
		r.bound = append(r.bound, first.Sub(write))
	}
	r.notRegistered += n.notRegistered(false)
	if n.returned.IsZero() && n.gaveUp.seen() {
		r.gaveUp++
	}
}

// addReboot records a node's reboot. Kubelet drops the driver from CSINode as it comes back (its
// registration socket is stale) and lists it again once the registrar registers it: times run
// from that write.
func (r *driverRow) addReboot(n *driverNode) {
	r.nodes++
	write := firstAfter(n.listed, n.returned)
	back := firstAfter(n.on, n.returned)
	if !back.IsZero() && (write.IsZero() || back.Before(write)) {
		r.back++
	}
	switch gone := firstAfter(n.off, back); {
	case write.IsZero():
		r.never++
	case !back.IsZero() && !gone.IsZero():
		r.gone = append(r.gone, gone.Sub(write))
	}
	var first time.Time
	for _, pod := range n.arrivals {
		at, ok := n.bound[pod]
		if !ok {
			continue
		}
		r.pods++
		if write.IsZero() || at.Before(write) {
			r.early++
		} else if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if !first.IsZero() {
		r.bound = append(r.bound, first.Sub(write))
	}
	r.notRegistered += n.notRegistered(true)
}

// drivers runs the drivers scenario and writes drivers.md.
func drivers(ctx context.Context, e *env, c benchConfig) error {
	logf("CSI drivers' own taint removal beside the agent: %d nodes each, %d runs, registrar after %v", c.driversNodes, c.driversRuns, c.registrarDelays)
	start := time.Now()
	rows, versions, err := measureDrivers(ctx, e, c.binary, c.driversDir, c.registrarDelays, c.driversNodes, c.driversRuns)
	if err != nil {
		return fmt.Errorf("CSI drivers' own taint removal: %w", err)
	}
	md := driversMarkdown(rows, versions, c, machine(), time.Since(start))
	fmt.Println(md)
	return os.WriteFile(filepath.Join(c.out, "drivers.md"), []byte(md), 0o644)
}

// spread formats p50 / p95 / max, or "-" for no samples.
func spread(s []time.Duration) string {
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", ms(percentile(s, 0.5)), ms(percentile(s, 0.95)), ms(percentile(s, 1)))
}

// remover names a row's remover.
func (r driverRow) remover() string {
	if r.own {
		return "the driver's own"
	}
	return "the agent"
}

// driversMarkdown reports the drivers scenario.
func driversMarkdown(rows []driverRow, versions map[string]string, c benchConfig, machine string, elapsed time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# CSI drivers' own taint removal, beside the agent")
	p("")
	p("\"My CSI driver already removes its own startup taint, so why run this?\" Here is the measurement, on the real path: the")
	p("drivers' own node plugins, built from their modules (`make drivers`, pinned in `hack/drivers`), against the agent.")
	p("")
	p("Machine: %s. Whole run: %s (`make bench`, scenario `drivers`). Drivers: EBS %s", machine, elapsed.Round(time.Second), versions["ebs"])
	p("(`github.com/kubernetes-sigs/aws-ebs-csi-driver`) and GCP PD %s (`sigs.k8s.io/gcp-compute-persistent-disk-csi-driver`).", versions["gcp-pd"])
	p("Each node is a hollow kubelet v1.37.2 (kubelet's real plugin watcher, CSINode writes and volume path), placed on by the")
	p("real kube-scheduler and kube-controller-manager against an envtest API server. Per driver and registrar delay, %d runs;", c.driversRuns)
	p("each boots %d nodes on which the driver removes its own taint and %d on which the agent removes another (a key the", c.driversNodes, c.driversNodes)
	p("driver does not own, `%s:%s`), together, with the same driver, pods and delay. On each node the driver's", startupTaint.Key, startupTaint.Effect)
	p("node plugin starts once kubelet registered the Node, and its registrar registers it with kubelet the delay later, as a")
	p("slow node-driver-registrar does; the agent gates on the same plugin's Probe and on kubelet's registration. %d pods per", podsPerNode)
	p("node wait for it, each with a `nodeSelector` for it and a PVC-backed volume of the driver (a static PersistentVolume).")
	p("The drivers' NodeStageVolume then fails for want of a device: expected, and after the registration.")
	p("")
	p("How each runs here:")
	p("")
	p("- **EBS**: `node` mode with `AWS_EC2_METADATA_DISABLED=true` and `CSI_NODE_NAME`, so it reads the instance type,")
	p("  region and zone from the Node's labels and the instance ID from its providerID (`pkg/cloud/metadata/k8s.go`); kubemark")
	p("  sets the providerID to `kubemark://NODE`, so the node names end in an instance ID. Kubelet registers the Node with")
	p("  the driver's taint (`ebs.csi.aws.com/agent-not-ready:NoExecute`), as the driver's docs ask.")
	p("- **GCP PD**: the node plugin (`--run-controller-service=false`) reads its zone, project, instance name and machine type")
	p("  from a metadata server this bench serves (`GCE_METADATA_HOST`). Its taint removal is not in the node plugin: it is a")
	p("  central controller (`--run-taint-controller`, `pkg/controller/taint/taint_remover.go`) that watches every Node and")
	p("  CSINode of the cluster. It always elects a leader (`cmd/gce-pd-csi-driver/main.go:591`) and has no flag for the")
	p("  election's namespace, so outside a pod controller-runtime exits (\"not running in-cluster, please specify")
	p("  LeaderElectionNamespace\"); it runs here in a mount namespace of its own (`unshare`) with the service account's")
	p("  namespace file on a tmpfs. Its webhook (`--run-taint-webhook`, `pkg/webhook/taint/node_taint.go`) adds")
	p("  `pd.csi.storage.gke.io/not-ready=true:NoSchedule` to a Node as it is created; kubelet registers the Node with that")
	p("  taint here instead, which is the same Node.")
	p("")
	p("## After the node joins")
	p("")
	p("Times run from the watch event of kubelet's CSINode write that lists the driver.")
	p("")
	p("| driver | removed by | registrar after the plugin's start | nodes | CSINode write → taint gone p50 / p95 / max | taint never went (nodes) | "+
		"CSINode write → first pod bound p50 / p95 / max | pods bound before the CSINode write | %q mount errors |", workload.NotRegistered)
	p("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.rebooted {
			continue
		}
		never := fmt.Sprint(r.never)
		if r.own && r.gaveUp > 0 {
			never += fmt.Sprintf(" (the driver logged that it gave up on %d)", r.gaveUp)
		}
		p("| %s | %s | %s | %d | %s | %s | %s | %d of %d | %d |", r.plugin, r.remover(), r.delay, r.nodes, spread(r.gone), never, spread(r.bound),
			r.early, r.pods, r.notRegistered)
	}
	p("")
	p("A node whose taint never went was given %s after the CSINode write.", driverSettle)
	p("")
	p("## After a reboot")
	p("")
	p("The rounds with the first delay then reboot each node without kubelet's graceful shutdown: its pods go, and kubelet,")
	p("the driver and the agent stop until the node lifecycle controller marks the Node unreachable; kubelet comes back %s", downFor)
	p("later with a new boot ID, the agent with it, the driver's node plugin %s after kubelet, and its registrar the delay", pluginAfterKubelet)
	p("after that. A pod that needs the driver arrives every %s from the reboot until %s after the registration. The agent", arrivalEvery, arrivalsAfter)
	p("runs as installed on 1.36 and later: with the boot record and `config/components/taint-after-crash`. Kubelet drops the")
	p("driver from CSINode as it comes back (the registration socket is stale) and lists it again after the new registration;")
	p("times run from that write.")
	p("")
	p("| driver | removed by | nodes | taint back before the CSINode write | pods arrived | placed before the CSINode write | "+
		"%q mount errors | CSINode write → taint gone p50 / p95 / max | CSINode write → first pod bound p50 / p95 / max |", workload.NotRegistered)
	p("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if !r.rebooted {
			continue
		}
		p("| %s | %s | %d | %d | %d | %d | %d | %s | %s |", r.plugin, r.remover(), r.nodes, r.back, r.pods, r.early, r.notRegistered, spread(r.gone), spread(r.bound))
	}
	p("")
	p("## What the drivers' code does")
	p("")
	p("EBS %s, `pkg/driver/node.go`:", versions["ebs"])
	p("")
	p("- the node plugin tries once 1 s after it starts (`taintRemovalInitialDelay`, line 71), then on an exponential backoff")
	p("  from 500 ms, 10 tries (lines 73-77): tries at about 1, 1.5, 2.5, 4.5, 8.5, 16.5, 32.5, 64.5, 128.5 and 256.5 s after")
	p("  the start. After the tenth it logs \"Retries exhausted, giving up\" (line 870) and never tries again: a registrar")
	p("  slower than that leaves the node tainted until the driver's pod restarts;")
	p("- it checks only that CSINode lists the driver with an allocatable count (`checkAllocatable`, line 934): never its own")
	p("  Probe, and it never watches, so the taint goes at its next try after kubelet's write, not at the write;")
	p("- it removes the taint with a JSON patch whose `test` op holds the whole taint list (line 910): any other write to the")
	p("  Node's taints in between fails the try, and costs one of the ten;")
	p("- after a reboot nothing puts the taint back (kubelet's `--register-with-taints` applies only to a new Node), so there is")
	p("  nothing for it to remove, and pods land before it is registered;")
	p("- its node ClusterRole lets every node plugin patch every Node (`charts/aws-ebs-csi-driver/templates/clusterrole-csi-node.yaml`).")
	p("")
	p("GCP PD %s:", versions["gcp-pd"])
	p("")
	p("- a central controller removes the taint: it watches CSINodes and Nodes (`pkg/controller/taint/taint_remover.go`, lines")
	p("  53 and 59) and removes the taint at kubelet's CSINode write that lists the driver (line 114), so it is as quick as the")
	p("  agent at the first boot, and it never gives up while the CSINode exists (it retries every 3 s, line 34);")
	p("- it fails open: a Node older than 12 minutes without a CSINode loses the taint (lines 31 and 101-107), so a node")
	p("  whose kubelet never wrote its CSINode is released without its driver;")
	p("- it removes the taint with a merge patch of the whole taint list without optimistic locking (line 137): a taint")
	p("  another writer added between its cache's read and the patch is dropped;")
	p("- the webhook adds the taint only at a Node's creation (`deploy/kubernetes/base/webhook/webhook-config.yaml`, operations")
	p("  CREATE) and with `failurePolicy: Ignore`: a Node created while the webhook's pod is not serving (a cold cluster, a")
	p("  rollout) joins without the taint; a label `pd.csi.storage.gke.io/disable-startup-taint=true` skips it;")
	p("- after a reboot nothing puts the taint back, as with EBS; the driver gates on CSINode only, never on its Probe;")
	p("- `--enable-node-readiness-condition` (off by default; the node side of the `readiness.k8s.io` direction of PR #2401)")
	p("  makes the node plugin set a Node condition, `pd.csi.storage.gke.io/Ready`, False as it starts and True once its")
	p("  registrar's `/healthz` answers (`pkg/gce-pd-csi-driver/node_readiness.go`, lines 89-131), for a node-readiness")
	p("  controller to act on: the registrar's health, not kubelet's CSINode write, and once. Its own comment (lines 87-88)")
	p("  says a crash leaves the condition True until the container restarts, so after a reboot the last boot's True stands")
	p("  until the new pod resets it. It is not measured here: its client comes from the in-cluster configuration only")
	p("  (`cmd/gce-pd-csi-driver/main.go:391`, `pkg/k8sclient`).")
	p("")
	p("## When you do not need this agent")
	p("")
	p("A driver that waits for kubelet's CSINode write places no pod early at a node's first boot: both drivers above place none")
	p("(the first table's \"pods bound before\" column). If a CSI driver is your only node agent, your nodes are replaced rather")
	p("than rebooted, and a few seconds' wait at a node's start costs you nothing, the driver's own removal is enough. What")
	p("the agent adds:")
	p("")
	p("- **latency**: it watches, so the taint goes milliseconds after kubelet's write, where the EBS driver's backoff takes")
	p("  seconds, and more the later the registrar;")
	p("- **it never gives up**: the EBS driver stops trying about 256 s after it starts;")
	p("- **reboots**: with the boot record (and the crash policy from 1.36) the taint is back before the scheduler can place a")
	p("  pod, where neither driver puts it back;")
	p("- **other gates**: the driver's Probe, a CNI's configuration, device plugins, DaemonSets' pods ([gates](../gates.md));")
	p("- **one install for every agent**, each confined to its own Node, where each driver's removal is its own code, taint")
	p("  and grant (EBS: every node plugin may patch every Node; GCP PD: a central controller that may patch every Node).")
	p("")
	p("## Rerun it")
	p("")
	p("```")
	p("make drivers    # builds each driver's node plugin once, into DRIVERS_DIR (~/.local/share/startup-taint-remover/drivers)")
	p("go run ./test/bench --scenarios=drivers --drivers-dir=$HOME/.local/share/startup-taint-remover/drivers \\")
	p("  --drivers-nodes=%d --drivers-runs=%d --registrar-delays=%s", c.driversNodes, c.driversRuns, joinDurations(c.registrarDelays))
	p("```")
	p("")
	p("It needs root and `unshare` for the GCP PD taint controller (above). CI does not run it.")
	return b.String()
}

// joinDurations formats durations as the --registrar-delays flag takes them.
func joinDurations(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return strings.Join(out, ",")
}
