// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command baseline is the cluster-wide design that the benchmark compares against: the same
// reconciler and gates, but a manager whose cache holds every Node and CSINode in the cluster, as a
// central remover or an agent without field selectors would. It is not shipped.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

func main() {
	node := flag.String("node-name", "", "node")
	csiAddress := flag.String("csi-address", "", "CSI socket")
	metricsAddr := flag.String("metrics-bind-address", "0", "plain HTTP metrics address")
	flag.Parse()
	// --kubeconfig is controller-runtime's own flag, read by ctrl.GetConfig.
	if err := run(*node, *csiAddress, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

func run(node, csiAddress, metricsAddr string) error {
	ctrl.SetLogger(zap.New())
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	gate, err := gates.NewCSIGate(csiAddress, 3*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = gate.Close() }()
	r := &controllers.NodeReconciler{NodeName: node, Groups: []controllers.Group{controllers.CSIDriverGroup(node, gate)}}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
