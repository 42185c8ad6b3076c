// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command floor is the smallest agent controller-runtime allows, the benchmark's memory floor: a
// manager whose cache holds one Node, a reconciler that does nothing, and metrics served over
// plain HTTP. The agent's resident memory is reported as a ratio to it. It is not shipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func main() {
	node := flag.String("node-name", "", "the one Node to cache")
	metricsAddr := flag.String("metrics-bind-address", "0", "plain HTTP metrics address")
	flag.Parse()
	// --kubeconfig is controller-runtime's own flag, read by ctrl.GetConfig.
	if err := run(*node, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(node, metricsAddr string) error {
	ctrl.SetLogger(zap.New())
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: metricsAddr},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", node)},
		}},
	})
	if err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).For(&corev1.Node{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
