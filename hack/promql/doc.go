// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package promql checks the PromQL of the dashboard (config/grafana) and of the alert rules
// (config/prometheus) with Prometheus's own parser, and checks that every metric they name is
// one the agent exports, read from a real /metrics. It is a module of its own, as hack/chart is,
// so that Prometheus stays out of the main go.mod.
package promql
