// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command startup-taint-remover removes a node's startup taint once the node agent on it (a CSI
// driver, a CNI agent) is really ready, and keeps removing it if it comes back. It runs on every
// node, in a DaemonSet or as a sidecar, and watches only its own Node.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	// The image has no CA bundle (it holds the binary alone), so an https --ready-url to a public CA
	// verifies against Mozilla's roots compiled in; a host's own bundle, where there is one, wins.
	_ "golang.org/x/crypto/x509roots/fallback"
	clientfeatures "k8s.io/client-go/features"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metricsauth"
)

// Exit statuses: 2 for a bad command line or kubeconfig, 1 for a failure while running.
const (
	exitFailure  = 1
	exitBadInput = 2
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	opts, err := parseOptions(args, os.Getenv, os.Stdout)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errVersionShown) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "startup-taint-remover: %v\n", err)
		return exitBadInput
	}
	cfg, err := loadConfig(opts.kubeconfig, os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "startup-taint-remover: %v\n", err)
		return exitBadInput
	}

	if err := disableWatchList(); err != nil {
		fmt.Fprintf(os.Stderr, "startup-taint-remover: %v\n", err)
		return exitFailure
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	logger := ctrl.Log.WithName("setup").WithValues("node", opts.nodeName)
	if err := runManager(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		if errors.Is(err, errServerTooOld) {
			fmt.Fprintf(os.Stderr, "startup-taint-remover: %v\n", err)
			return exitBadInput
		}
		logger.Error(err, "stopped")
		return exitFailure
	}
	return 0
}

// loadConfig reads the kubeconfig named by the flag, else by KUBECONFIG, else the pod's
// in-cluster config. Unlike controller-runtime's default it never guesses ~/.kube/config: a node
// agent pointed at the wrong cluster would untaint the wrong node.
func loadConfig(flagPath, envPath string) (*rest.Config, error) {
	switch {
	case flagPath != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", flagPath)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", flagPath, err)
		}
		return cfg, nil
	case envPath != "":
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: envPath}, nil).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("KUBECONFIG %s: %w", envPath, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to: not running in a pod (%w); set --kubeconfig or KUBECONFIG", err)
	}
	return cfg, nil
}

// disableWatchList makes the informers list and then watch, instead of streaming the list over a
// watch. The streaming path retries a refused connection in a loop of its own that reports no error
// and sleeps through shutdown, so an outage could be neither logged nor left promptly on SIGTERM;
// for a cache of one object it saves nothing.
func disableWatchList() error {
	gates, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		return errors.New("client-go feature gates cannot be set")
	}
	if err := gates.Set(clientfeatures.WatchListClient, false); err != nil {
		return fmt.Errorf("disabling %s: %w", clientfeatures.WatchListClient, err)
	}
	return nil
}

func runManager(ctx context.Context, cfg *rest.Config, opts *options) error {

	metricsOpts := metricsserver.Options{
		BindAddress:   opts.metricsAddr,
		SecureServing: opts.metricsSecure,
		CertDir:       opts.metricsCertDir,
		CertName:      opts.metricsCert,
		KeyName:       opts.metricsKey,
	}
	if opts.metricsSecure {
		metricsOpts.FilterProvider = metricsauth.Provider
	}
	if !opts.enableHTTP2 {
		// HTTP/2 stream cancellation and rapid reset attacks (CVE-2023-44487, CVE-2023-39325).
		metricsOpts.TLSOpts = append(metricsOpts.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	rc, err := versionClient(cfg)
	if err != nil {
		return err
	}
	conn := &connectivity{log: ctrl.Log.WithName("apiserver").WithValues("node", opts.nodeName), ping: versionPing(rc)}
	server := &serverCheck{opts: opts, rc: rc, log: conn.log}
	info, err := server.atStart(ctx, serverWaitAtStart)
	if err != nil {
		return err
	}
	shutdown := 2 * time.Second
	r := opts.reconciler
	defer closeGates(r)
	mgrOpts := r.ManagerOptions()
	mgrOpts.Cache.DefaultWatchErrorHandler = conn.watchError
	// client-go's own scheme, built at its package's init and used by its typed clients anyway:
	// a scheme of our own would hold a second copy of every type's registration.
	mgrOpts.Scheme = clientgoscheme.Scheme
	mgrOpts.Metrics = metricsOpts
	mgrOpts.HealthProbeBindAddress = opts.probeAddr
	mgrOpts.PprofBindAddress = opts.pprofAddr
	mgrOpts.GracefulShutdownTimeout = &shutdown
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	metrics.RegisterBuildInfo(crmetrics.Registry)

	if !opts.dryRun {
		// A dry run sends no request that could write, not even the check's dry-run patch.
		r.Confinement = controllers.NewConfinementCheck(opts.requireConfinement)
		r.Confinement.Server = info
	}
	if info == nil {
		// The API server did not answer in time: its version is read once it does.
		if err := mgr.Add(server); err != nil {
			return fmt.Errorf("adding the API server's version check: %w", err)
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", cacheSynced(mgr)); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// closeGates releases the connections of r's gates that hold one.
func closeGates(r *controllers.NodeReconciler) {
	for _, g := range r.Groups {
		for _, gate := range g.Gates {
			if c, ok := gate.(interface{ Close() error }); ok {
				_ = c.Close()
			}
		}
	}
}

// cacheSynced reports ready once the cache holds the node, so the pod is ready only when the
// controller can act. The agent's own readiness is not the pod's: a pod waiting for its driver
// is healthy.
func cacheSynced(mgr ctrl.Manager) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("cache not synced yet")
		}
		return nil
	}
}
