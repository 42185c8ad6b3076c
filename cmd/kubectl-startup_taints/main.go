// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command kubectl-startup_taints is a kubectl plugin (`kubectl startup-taints`) that shows, across
// a fleet, which Nodes hold a startup taint of any install of the startup-taint-remover, since
// when, and which gate holds it; with --all, which are done, when, and how. It reads only what
// the agents already write (taints, the removed record, their conditions and events), with the
// user's own credentials, a page of Nodes at a time.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// exitUsage is the status of a command line the plugin cannot run: before any request.
const exitUsage = 2

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the plugin; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl startup-taints", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config := genericclioptions.NewConfigFlags(true)
	config.AddFlags(fs)
	var o options
	var output string
	fs.BoolVar(&o.all, "all", false, "Also list the Nodes whose startup taints are gone: when, and whether --max-wait forced them.")
	fs.StringVarP(&o.selector, "selector", "l", "", "Only Nodes with these labels (a label selector).")
	fs.StringVarP(&output, "output", "o", "", "Output format: wide or json.")
	fs.Int64Var(&o.chunk, "chunk-size", 500, "List Nodes, events and ClusterRoles this many at a time.")
	var namespaces []string
	fs.StringSliceVar(&namespaces, "namespaces", nil, "With tolerations: the namespaces whose workloads to check, comma-separated; "+
		"kube-system and each install's own when empty.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fs.SetOutput(stdout)
			_, _ = fmt.Fprintln(stdout, "Usage: kubectl startup-taints [--all] [-l SELECTOR] [-o wide|json] [kubectl's connection flags]\n"+
				"       kubectl startup-taints tolerations [--namespaces NS,...] [kubectl's connection flags]\n"+
				"tolerations lists the workloads whose pods could not run on a node that carries the startup taints, and the fix; "+
				"it exits with status 1 when it lists any.")
			fs.PrintDefaults()
			return 0
		}
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return exitUsage
	}
	switch {
	case output != outputTable && output != outputWide && output != outputJSON:
		_, _ = fmt.Fprintf(stderr, "error: --output: %q is not wide or json\n", output)
		return exitUsage
	case o.chunk <= 0:
		_, _ = fmt.Fprintf(stderr, "error: --chunk-size: %d is not positive\n", o.chunk)
		return exitUsage
	case fs.NArg() > 1 || fs.NArg() == 1 && fs.Arg(0) != "tolerations":
		_, _ = fmt.Fprintf(stderr, "error: unexpected argument %q\n", fs.Arg(fs.NArg()-1))
		return exitUsage
	case fs.NArg() == 0 && len(namespaces) > 0:
		_, _ = fmt.Fprintln(stderr, "error: --namespaces: only with tolerations")
		return exitUsage
	case fs.NArg() == 1 && (o.all || o.selector != "" || output != ""):
		_, _ = fmt.Fprintln(stderr, "error: tolerations takes neither --all, --selector nor --output")
		return exitUsage
	}
	restConfig, err := config.ToRESTConfig()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return exitUsage
	}
	c, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return exitUsage
	}
	if fs.NArg() == 1 {
		return tolerations(ctx, c, namespaces, o.chunk, stdout, stderr)
	}
	if err := list(ctx, c, o, output, stdout); err != nil {
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// list finds the installs, reads the Nodes and prints them.
func list(ctx context.Context, c kubernetes.Interface, o options, output string, w io.Writer) error {
	installs, err := findInstalls(ctx, c, o.chunk)
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("you may not list ClusterRoles, by which the plugin finds each install's startup taints: %w", err)
	}
	if err != nil {
		return err
	}
	if len(installs) == 0 {
		return errors.New("no install of the startup-taint-remover in this cluster: no ClusterRole grants " +
			"\"remove\" on startuptaints.startup-taint-remover.github.io, as every install's does")
	}
	rows, nodes, err := gather(ctx, c, installs, o)
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("you may not list Nodes, or the events in the default namespace: %w", err)
	}
	if err != nil {
		return err
	}
	return printReport(w, rows, nodes, drivers(ctx, c, installs), output, time.Now())
}

// tolerations runs `kubectl startup-taints tolerations` and returns its exit status: 1 when it
// lists a workload, as when it fails, so that it can gate a pipeline.
func tolerations(ctx context.Context, c kubernetes.Interface, namespaces []string, chunk int64, stdout, stderr io.Writer) int {
	installs, err := findInstalls(ctx, c, chunk)
	if err == nil && len(installs) == 0 {
		err = errors.New("no install of the startup-taint-remover in this cluster, so no startup taints to check against")
	}
	listed := 0
	if err == nil {
		listed, err = checkTolerations(ctx, c, installs, namespaces, chunk, stdout)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if listed > 0 {
		return 1
	}
	return 0
}
