// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package promql

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
)

// ruleExpr returns the expression of the alert named alert.
func ruleExpr(t *testing.T, alert string) string {
	t.Helper()
	for _, q := range ruleQueries(t) {
		if q.where == "alert "+alert {
			return q.expr
		}
	}
	t.Fatalf("no alert %s in config/prometheus/rules.yaml", alert)
	return ""
}

// StartupTaintWithoutAgent fires for a startup taint on a node where no agent reports, and for no
// other taint and no node whose agent reports, evaluated by Prometheus' own engine on
// kube-state-metrics' and the agents' series as they would be scraped.
func TestStartupTaintWithoutAgentFiresOnlyWhereNoAgentReports(t *testing.T) {
	expr := strings.ReplaceAll(ruleExpr(t, "StartupTaintWithoutAgent"), "\n", " ")
	promqltest.RunTest(t, `
load 1m
  kube_node_spec_taint{job="kube-state-metrics", node="no-agent", key="ebs.csi.aws.com/agent-not-ready", effect="NoExecute"} 1x20
  kube_node_spec_taint{job="kube-state-metrics", node="no-agent", key="example.com/dedicated", effect="NoSchedule"} 1x20
  kube_node_spec_taint{job="kube-state-metrics", node="autoscaled", key="startup-taint.cluster-autoscaler.kubernetes.io/gpu", effect="NoSchedule"} 1x20
  kube_node_spec_taint{job="kube-state-metrics", node="karpenter", key="readiness.k8s.io/NetworkReady", effect="NoSchedule"} 1x20
  kube_node_spec_taint{job="kube-state-metrics", node="held", key="ebs.csi.aws.com/agent-not-ready", effect="NoExecute"} 1x20
  startup_taint_present{namespace="kube-system", node="held", taint="ebs.csi.aws.com/agent-not-ready"} 1x20
  startup_taint_present{namespace="kube-system", node="removed", taint="ebs.csi.aws.com/agent-not-ready"} 0x20

eval instant at 20m `+expr+`
  {node="no-agent", key="ebs.csi.aws.com/agent-not-ready"} 1
  {node="autoscaled", key="startup-taint.cluster-autoscaler.kubernetes.io/gpu"} 1
  {node="karpenter", key="readiness.k8s.io/NetworkReady"} 1
`, promqltest.NewTestEngine(t, false, 5*time.Minute, 10000))
}
