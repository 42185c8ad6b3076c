// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package promql

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

const repo = "../.."

// kubeStateMetrics are the kube-state-metrics series a rule reads, for nodes where no agent runs
// to export its own.
var kubeStateMetrics = map[string]bool{"kube_node_spec_taint": true}

// grafanaVariables are what Grafana writes in before a query reaches Prometheus.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$job", ".*")

// query is one PromQL expression and where it is.
type query struct{ where, expr string }

// dashboardQueries are the dashboard's panel queries.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	panels, err := testkit.DashboardPanels(filepath.Join(repo, "config/grafana/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, p := range panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			out = append(out, query{"dashboard panel " + p.Title, grafanaVariables.Replace(target.Expr)})
		}
	}
	return out
}

// ruleQueries are the alert rules' expressions.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "config/prometheus/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			out = append(out, query{"alert " + rule.Alert, rule.Expr})
		}
	}
	return out
}

// metricNames are the metric names q selects.
func metricNames(expr parser.Expr) []string {
	var out []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if v, ok := node.(*parser.VectorSelector); ok {
			for _, m := range v.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					out = append(out, m.Value)
				}
			}
		}
		return nil
	})
	return out
}

func TestEveryQueryParsesAndNamesOnlyMetricsTheAgentExports(t *testing.T) {
	queries := append(dashboardQueries(t), ruleQueries(t)...)
	exported := scrapeAgents(t)
	named := 0
	for _, q := range queries {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
			continue
		}
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", q.where, q.expr)
		}
		for _, name := range names {
			named++
			if !exported[name] && !kubeStateMetrics[name] {
				t.Errorf("%s: %s is not a metric the agent exports", q.where, name)
			}
		}
	}
	t.Logf("%d queries parse; the %d metric names they use are all in the agent's /metrics", len(queries), named)
}

// scrapeAgents runs the agent binary against an envtest API server through what makes it export
// every series: a driver that is not ready, a removal forced by --max-wait, continuous mode
// putting the taint back, the driver turning ready, a Node condition, and a second Node that
// registered without the taint. It returns every sample name of their /metrics.
func scrapeAgents(t *testing.T) map[string]bool {
	t.Helper()
	env, c := testkit.StartEnvtest(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testkit.WriteKubeconfig(env, envtest.User{Name: "admin", Groups: []string{"system:masters"}}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(dir, "startup-taint-remover")
	if out, err := exec.Command("go", "build", "-C", repo, "-o", binary, "./cmd").CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v: %s", err, out)
	}

	ctx := context.Background()
	const driverName = "ebs.csi.aws.com"
	taint := corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	agent := func(node string, taints []corev1.Taint, readiness fakecsi.Readiness, flags ...string) (*fakecsi.Driver, string) {
		for _, o := range []client.Object{
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{Taints: taints}},
			&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: node}}}},
		} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		driver, err := fakecsi.Start(filepath.Join(t.TempDir(), "csi.sock"), driverName, readiness)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(driver.Stop)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		cmd := exec.Command(binary, append([]string{"--kubeconfig=" + kubeconfig, testkit.Unconfined, "--node-name=" + node, "--csi-address=" + driver.Path(),
			"--taint=" + taint.Key, "--metrics-bind-address=" + addr, "--metrics-secure=false", "--health-probe-bind-address=0",
			"--probe-interval=100ms"}, flags...)...)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return driver, addr
	}
	driver, busy := agent("busy", []corev1.Taint{taint}, fakecsi.NotReady, "--max-wait=1s", "--retaint-after=1s",
		"--condition-type=example.com/AgentReady")
	_, untainted := agent("untainted", nil, fakecsi.Ready)

	scrape := func(addr string) map[string]bool {
		names := map[string]bool{}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return names
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, _, _ := strings.Cut(line, "{")
			name, _, _ = strings.Cut(name, " ")
			names[name] = true
		}
		return names
	}
	// Forced at 1 s, put back 1 s later; then ready, and removed again.
	waitFor := func(addr, name string) {
		deadline := time.Now().Add(time.Minute)
		for !scrape(addr)[name] {
			if time.Now().After(deadline) {
				t.Fatalf("no %s on %s/metrics within a minute", name, addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor(busy, "startup_taint_retaints_total")
	driver.SetReadiness(fakecsi.Ready)
	waitFor(busy, "startup_taint_ready_to_removed_seconds_count")
	waitFor(untainted, "startup_taint_missing_at_registration")

	exported := map[string]bool{}
	for _, addr := range []string{busy, untainted} {
		for name := range scrape(addr) {
			exported[name] = true
		}
	}
	var ours []string
	for name := range exported {
		if strings.HasPrefix(name, "startup_taint_") {
			ours = append(ours, name)
		}
	}
	slices.Sort(ours)
	t.Logf("the agents export %d startup_taint_ sample names: %s", len(ours), strings.Join(ours, ", "))
	return exported
}
