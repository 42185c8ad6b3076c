// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command bench measures startup-taint-remover against an envtest control plane and writes the
// results, with a chart, to docs/bench. `make bench` runs it. It measures:
//
//  1. reaction time: driver ready, CSINode registration and a re-added taint, each to the taint's
//     removal, with the real reconciler, cache and patch path;
//  2. memory and API requests of the real binary as a separate process, against clusters of
//     100, 1,000 and 5,000 realistic Nodes, with its secure metrics endpoint on, side by side with
//     a baseline agent that caches every Node (the cluster-wide design) and with the floor (the
//     smallest controller-runtime agent: one cached Node, nothing else), at start and over an
//     idle period;
//  3. a fleet start: 1,000 agents, each with its own client and own-node cache, untainting 1,000
//     Nodes at once;
//  4. the start sequence with the real kubelet (kubemark's hollow node): the driver and its
//     registrar start, kubelet writes the CSINode entry, the binary removes the taint;
//  5. the outcome, by removal strategy, beside the scheduler's own check: hollow nodes boot
//     together while pods that need their driver (inline or PVC-backed volumes) wait, the real
//     scheduler places the pods, and kubelet mounts their volumes through the driver, or fails
//     to; also with a driver whose Probe is not ready after its registration, and one that dies
//     later;
//  6. the same after a reboot: a node whose pods have their volumes goes down, with or without
//     kubelet's graceful shutdown, while pods keep arriving, and comes back with a new boot ID.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

type benchConfig struct {
	binary, baseline, floor, out string
	// tenantsBefore is a binary from before the node agents' namespaces, for the tenants scenario.
	tenantsBefore string
	// monitorPeriod is the node lifecycle controller's --node-monitor-period in the reboot scenario.
	monitorPeriod   time.Duration
	scenarios       map[string]bool
	trials, repeats int
	sizes           []int
	idle            time.Duration
	fleet           int
	// workloadFleets are how many nodes boot together in the workload scenario, each size for
	// workloadTrials nodes per strategy.
	workloadFleets []int
	workloadTrials int
	// reboots is how many times the reboot scenario reboots a node per case.
	reboots int
	// strategies selects the workload and reboot scenarios' cases by their strategy's name.
	strategies *regexp.Regexp
	// pluginNodes is the size of the cluster the kubectl plugin lists.
	pluginNodes int
	// nodeAgentsFleets are how many nodes boot together in the node-agents scenario, each size in turn,
	// with daemonSets node agents.
	nodeAgentsFleets []int
	coldStartFleets  []int
	daemonSets       int
	// driversDir holds the CSI drivers' node plugins hack/drivers/build.sh builds; the drivers
	// scenario boots driversNodes nodes per remover, driversRuns times per registrar delay.
	driversDir                string
	driversNodes, driversRuns int
	registrarDelays           []time.Duration
}

// selected returns the cases whose strategy's name matches --strategies.
func (c benchConfig) selected(cases []workloadCase) []workloadCase {
	return slices.DeleteFunc(slices.Clone(cases), func(wc workloadCase) bool {
		name := wc.name
		switch wc.fault {
		case shutsDown:
			name += " (graceful shutdown)"
		case rebootsShort:
			name += " (short reboot)"
		}
		return !c.strategies.MatchString(name)
	})
}

// env is the control plane every measurement shares.
type env struct {
	testEnv *envtest.Environment
	cfg     *rest.Config
	c       client.Client
	cs      kubernetes.Interface
	audit   *auditLog
	work    string
	// scrapeToken is a service account token that may get /metrics, for the agent's secure endpoint.
	scrapeToken string
}

func main() {
	var c benchConfig
	var sizes string
	flag.StringVar(&c.binary, "binary", "bin/startup-taint-remover", "the startup-taint-remover binary")
	flag.StringVar(&c.tenantsBefore, "tenants-before", "", "a binary built from before the node agents' namespaces (issue 47), "+
		"for a row of the tenants scenario as that release ran; none when empty")
	flag.StringVar(&c.baseline, "baseline", "bin/bench-baseline", "the cluster-wide baseline agent")
	flag.StringVar(&c.floor, "floor", "bin/bench-floor", "the smallest controller-runtime agent, the memory floor")
	flag.StringVar(&c.out, "out", "docs/bench", "where to write results.md and memory.png")
	flag.IntVar(&c.trials, "trials", 200, "trials per reaction-time scenario")
	flag.IntVar(&c.repeats, "repeats", 3, "process starts per memory measurement; the median is reported")
	flag.StringVar(&sizes, "sizes", "100,1000,5000", "cluster sizes (Node objects) for the memory runs")
	flag.DurationVar(&c.idle, "idle", 5*time.Minute, "idle period over which periodic requests are counted")
	flag.IntVar(&c.fleet, "fleet", 1000, "agents in the fleet start")
	fleets := flag.String("workload-nodes", "1,10", "hollow nodes booting together in the workload scenario, each size in turn")
	flag.IntVar(&c.workloadTrials, "workload-trials", 10, "nodes per case (strategy, volume kind and fault) and size in the workload scenario")
	flag.DurationVar(&c.monitorPeriod, "node-monitor-period", time.Second,
		"the node lifecycle controller's --node-monitor-period in the reboot scenario (clusters run 5s); another than 1s writes reboot-monitor-PERIOD.md")
	flag.IntVar(&c.reboots, "reboots", 10, "reboots per case (strategy, volume kind and kind of shutdown) in the reboot scenario")
	flag.IntVar(&c.pluginNodes, "plugin-nodes", 5000, "Nodes in the cluster the kubectl plugin lists")
	nodeAgentsFleets := flag.String("node-agents-nodes", "10,100", "nodes booting together in the node-agents scenario, each size in turn")
	flag.IntVar(&c.daemonSets, "daemonsets", 20, "node agents' DaemonSets in the node-agents scenario")
	coldFleets := flag.String("cold-start-nodes", "10,100", "nodes starting cold together in the cold-start scenario, each size in turn")
	home, _ := os.UserHomeDir()
	flag.StringVar(&c.driversDir, "drivers-dir", filepath.Join(home, ".local", "share", "startup-taint-remover", "drivers"),
		"the directory make drivers builds the CSI drivers' node plugins into, as NAME-VERSION")
	flag.IntVar(&c.driversNodes, "drivers-nodes", 5, "nodes per remover booting together in the drivers scenario")
	flag.IntVar(&c.driversRuns, "drivers-runs", 2, "runs per driver and registrar delay in the drivers scenario")
	delays := flag.String("registrar-delays", "4s,20s,300s", "in the drivers scenario, from the driver's node plugin's start to its registrar's registration, each in turn")
	strategies := flag.String("strategies", "", "a regular expression: run only the workload and reboot cases whose strategy's name matches it "+
		"(with \" (graceful shutdown)\" after it for a reboot through kubelet's graceful shutdown, \" (short reboot)\" for one within the grace period)")
	scenarios := flag.String("scenarios", "reaction,memory,fleet,kubelet,workload,reboot,plugin,node-agents,tenants,cold-start,drivers",
		"what to measure: reaction, memory and fleet write results.md, kubelet writes kubelet.md, workload writes workload.md, reboot writes reboot.md, "+
			"plugin writes plugin.md, node-agents writes node-agents.md, tenants writes tenants.md, cold-start writes cold-start.md, drivers writes drivers.md; all by default")
	flag.Parse()
	c.scenarios = map[string]bool{}
	for _, s := range strings.Split(*scenarios, ",") {
		switch s {
		case "reaction", "memory", "fleet", "kubelet", "workload", "reboot", "plugin", "node-agents", "tenants", "cold-start", "drivers":
			c.scenarios[s] = true
		default:
			fmt.Fprintf(os.Stderr, "bench: --scenarios: %q is not one of reaction, memory, fleet, kubelet, workload, reboot, plugin, node-agents, tenants, cold-start, drivers\n", s)
			os.Exit(2)
		}
	}
	if c.scenarios["reaction"] != c.scenarios["memory"] || c.scenarios["memory"] != c.scenarios["fleet"] {
		fmt.Fprintln(os.Stderr, "bench: --scenarios: reaction, memory and fleet make one report; ask for all three or none")
		os.Exit(2)
	}
	c.sizes = positives("--sizes", sizes)
	c.workloadFleets = positives("--workload-nodes", *fleets)
	c.nodeAgentsFleets = positives("--node-agents-nodes", *nodeAgentsFleets)
	c.coldStartFleets = positives("--cold-start-nodes", *coldFleets)
	for _, d := range strings.Split(*delays, ",") {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "bench: --registrar-delays: %q is not a positive duration\n", d)
			os.Exit(2)
		}
		c.registrarDelays = append(c.registrarDelays, v)
	}
	if c.driversNodes < 1 || c.driversRuns < 1 {
		fmt.Fprintln(os.Stderr, "bench: --drivers-nodes and --drivers-runs: must be positive")
		os.Exit(2)
	}
	if c.daemonSets < 1 {
		fmt.Fprintln(os.Stderr, "bench: --daemonsets: must be positive")
		os.Exit(2)
	}
	if c.workloadTrials < 1 {
		fmt.Fprintln(os.Stderr, "bench: --workload-trials: must be positive")
		os.Exit(2)
	}
	if c.reboots < 1 {
		fmt.Fprintln(os.Stderr, "bench: --reboots: must be positive")
		os.Exit(2)
	}
	var err error
	if c.strategies, err = regexp.Compile(*strategies); err != nil {
		fmt.Fprintf(os.Stderr, "bench: --strategies: %v\n", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// positives parses a flag's comma-separated positive numbers, or exits with status 2 naming it.
func positives(name, value string) []int {
	parts := strings.Split(value, ",")
	out := make([]int, 0, len(parts))
	for _, s := range parts {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: %s: %q is not a positive number\n", name, s)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func run(c benchConfig) error {
	// The agents run in this process are stopped mid-request between scenarios; their errors
	// then are expected noise.
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Hour)
	defer cancel()
	start := time.Now()

	e, err := startEnv()
	if err != nil {
		return err
	}
	defer e.stop()

	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	if c.scenarios["kubelet"] {
		logf("the start sequence with the real kubelet: %d trials", c.trials)
		kstart := time.Now()
		k, err := measureKubelet(ctx, e, c.binary, c.trials)
		if err != nil {
			return fmt.Errorf("the start sequence with the real kubelet: %w", err)
		}
		md := k.markdown(machine(), time.Since(kstart))
		fmt.Println(md)
		if err := os.WriteFile(filepath.Join(c.out, "kubelet.md"), []byte(md), 0o644); err != nil {
			return err
		}
	}
	if c.scenarios["tenants"] {
		logf("a tenant's objects: %d DaemonSets and %d pods of %d MiB, %d runs per case", tenantObjects, tenantObjects, tenantObjectBytes>>20, c.repeats)
		tstart := time.Now()
		r, err := measureTenants(ctx, e, c.binary, c.tenantsBefore, c.repeats)
		if err != nil {
			return fmt.Errorf("a tenant's objects: %w", err)
		}
		md := tenantsMarkdown(r, c.repeats, machine(), time.Since(tstart))
		fmt.Println(md)
		if err := os.WriteFile(filepath.Join(c.out, "tenants.md"), []byte(md), 0o644); err != nil {
			return err
		}
	}
	if c.scenarios["plugin"] {
		const runs = 20
		logf("kubectl startup-taints on %d Nodes: %d runs", c.pluginNodes, runs)
		pstart := time.Now()
		plugin, err := buildPlugin(e.work)
		if err != nil {
			return err
		}
		r, err := measurePlugin(ctx, e, plugin, c.pluginNodes, runs)
		if err != nil {
			return fmt.Errorf("kubectl startup-taints: %w", err)
		}
		md := pluginMarkdown(r, runs, machine(), time.Since(pstart))
		fmt.Println(md)
		if err := os.WriteFile(filepath.Join(c.out, "plugin.md"), []byte(md), 0o644); err != nil {
			return err
		}
	}
	if c.scenarios["workload"] {
		logf("pods that need the driver, by removal strategy: %d nodes each, %v booting together", c.workloadTrials, c.workloadFleets)
		wstart := time.Now()
		w, err := measureWorkload(ctx, e, c.binary, c.selected(workloadCases), c.workloadFleets, c.workloadTrials, time.Second)
		if err != nil {
			return fmt.Errorf("pods that need the driver: %w", err)
		}
		md := workloadMarkdown(w, machine(), time.Since(wstart))
		fmt.Println(md)
		if err := os.WriteFile(filepath.Join(c.out, "workload.md"), []byte(md), 0o644); err != nil {
			return err
		}
	}
	if c.scenarios["reboot"] {
		logf("pods that need the driver after a reboot, by strategy: %d reboots each", c.reboots)
		rstart := time.Now()
		w, err := measureWorkload(ctx, e, c.binary, c.selected(rebootCases), []int{1}, c.reboots, c.monitorPeriod)
		if err != nil {
			return fmt.Errorf("pods that need the driver after a reboot: %w", err)
		}
		md := rebootMarkdown(w, machine(), time.Since(rstart), c.monitorPeriod)
		fmt.Println(md)
		// The clusters' own period has a file of its own beside the tests' 1 s.
		file := "reboot.md"
		if c.monitorPeriod != time.Second {
			file = "reboot-monitor-" + c.monitorPeriod.String() + ".md"
		}
		if err := os.WriteFile(filepath.Join(c.out, file), []byte(md), 0o644); err != nil {
			return err
		}
	}
	for _, scenario := range []struct {
		name string
		run  func(context.Context, *env, benchConfig) error
	}{{"node-agents", nodeAgents}, {"cold-start", coldStart}, {"drivers", drivers}} {
		if !c.scenarios[scenario.name] {
			continue
		}
		if err := scenario.run(ctx, e, c); err != nil {
			return err
		}
	}
	if !c.scenarios["reaction"] {
		return nil
	}

	rep := &report{machine: machine(), config: c}
	logf("reaction time: %d trials per scenario", c.trials)
	if rep.reaction, err = measureReaction(ctx, e, c.trials); err != nil {
		return fmt.Errorf("reaction time: %w", err)
	}
	logf("memory and API requests at %v Nodes, %d starts each", c.sizes, c.repeats)
	if rep.memory, rep.idle, err = measureMemory(ctx, e, c); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	logf("fleet start: %d agents, %d runs", c.fleet, c.repeats)
	if rep.fleet, err = measureFleet(ctx, e, c.fleet, c.repeats); err != nil {
		return fmt.Errorf("fleet start: %w", err)
	}
	rep.elapsed = time.Since(start)

	md := rep.markdown()
	fmt.Println(md)
	if err := os.WriteFile(filepath.Join(c.out, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	return writeChart(filepath.Join(c.out, "memory.png"), rep)
}

func startEnv() (*env, error) {
	work, err := os.MkdirTemp("", "startup-taint-bench-")
	if err != nil {
		return nil, err
	}
	audit, err := newAuditLog(work)
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{}
	api := te.ControlPlane.GetAPIServer().Configure()
	api.Set("audit-policy-file", audit.policyPath)
	api.Set("audit-log-path", audit.logPath)
	api.Set("audit-log-maxsize", "2048")
	// The fleet start opens thousands of connections and requests at once.
	api.Set("max-requests-inflight", "3000")
	api.Set("max-mutating-requests-inflight", "1000")
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest (run `make envtest`, or set KUBEBUILDER_ASSETS): %w", err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	token, err := scraperToken(cs)
	if err != nil {
		return nil, err
	}
	return &env{testEnv: te, cfg: cfg, c: c, cs: cs, audit: audit, work: work, scrapeToken: token}, nil
}

// scraperToken makes a service account that may get /metrics, as Prometheus's is with the
// metrics-reader role, and returns a token of it.
func scraperToken(cs kubernetes.Interface) (string, error) {
	ctx := context.Background()
	const name = "bench-scraper"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: metav1.NamespaceDefault}}}
	if _, err := cs.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the scraper's service account: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the scraper's role: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("binding the scraper's role: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting the scraper's token: %w", err)
	}
	return tr.Status.Token, nil
}

func (e *env) stop() {
	_ = e.testEnv.Stop()
	_ = os.RemoveAll(e.work)
}

// kubeconfigFor writes a kubeconfig for a user of its own, so the audit log tells its requests apart.
func (e *env) kubeconfigFor(user string) (string, error) {
	path := filepath.Join(e.work, user+".kubeconfig")
	return path, testkit.WriteKubeconfig(e.testEnv, envtest.User{Name: user, Groups: []string{"system:masters"}}, path)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// machine describes where the numbers were taken.
func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				if _, v, ok := strings.Cut(line, ":"); ok {
					model = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s %s/%s", runtime.NumCPU(), model, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
