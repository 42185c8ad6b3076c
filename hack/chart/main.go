// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command chart lints, renders and packages the project's Helm chart with the Helm Go SDK, so
// neither the tests nor a release need a helm binary. It is a module of its own: the Helm SDK
// stays out of the main go.mod, which drivers that embed the controller import.
//
//	chart lint CHART [-f VALUES]...
//	chart template CHART -name NAME -namespace NS [-f VALUES]... [-set KEY=VALUE]...
//	chart template oci://HOST/PATH/NAME -chart-version X.Y.Z [-plain-http] ...
//	chart push ARCHIVE -to oci://HOST/PATH [-plain-http]
//	chart package CHART -version vX.Y.Z [-image REPOSITORY] [-digest sha256:...] -destination DIR
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
)

// Exit statuses: 2 for a bad command line, 1 when the chart or its values fail.
const (
	exitFailure  = 1
	exitBadInput = 2
)

func main() {
	// The SDK logs, at Info, that it follows the chart's links into config/; they are meant.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		_, _ = fmt.Fprintln(stderr, "chart: usage: chart lint|template|package|push CHART [flags]")
		return exitBadInput
	}
	cmd, dir := args[0], args[1]
	fs := flag.NewFlagSet("chart "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var values, sets listFlag
	fs.Var(&values, "f", "a values file; repeatable, later files win")
	fs.Var(&sets, "set", "KEY=VALUE, as helm --set; repeatable")
	name := fs.String("name", "startup-taint-remover", "release name (template)")
	namespace := fs.String("namespace", "startup-taint-remover-system", "release namespace (template)")
	version := fs.String("version", "", "the release, vX.Y.Z: the appVersion and image tag; the chart's version without the v (package)")
	image := fs.String("image", "", "the image repository the packaged values point at (package)")
	digest := fs.String("digest", "", "the image index digest, sha256:..., the packaged values pin (package)")
	destination := fs.String("destination", ".", "directory to write the package to (package)")
	chartVersion := fs.String("chart-version", "", "the version of an oci:// chart to pull (template)")
	to := fs.String("to", "", "the OCI repository, oci://HOST/PATH, to push to (push)")
	plainHTTP := fs.Bool("plain-http", false, "talk plain HTTP to the OCI registry, as to a test's on loopback (template, push)")
	kubeVersion := fs.String("kube-version", KubeVersion, "the cluster's Kubernetes version, vX.Y.Z (template)")
	if err := fs.Parse(args[2:]); err != nil {
		_, _ = fmt.Fprintf(stderr, "chart %s: %v\n", cmd, err)
		return exitBadInput
	}
	var err error
	switch cmd {
	case "lint":
		err = Lint(dir, values, sets)
	case "template":
		var out string
		reg := Registry{ChartVersion: *chartVersion, PlainHTTP: *plainHTTP}
		if out, err = templateFrom(*kubeVersion, dir, reg, *name, *namespace, values, sets); err == nil {
			_, err = io.WriteString(stdout, out)
		}
	case "push":
		if !strings.HasPrefix(*to, "oci://") {
			_, _ = fmt.Fprintf(stderr, "chart push: -to: %q is not oci://HOST/PATH\n", *to)
			return exitBadInput
		}
		var digest string
		if digest, err = Push(dir, *to, *plainHTTP); err == nil {
			_, err = fmt.Fprintln(stdout, digest)
		}
	case "package":
		if *version == "" {
			_, _ = fmt.Fprintln(stderr, "chart package: -version: empty")
			return exitBadInput
		}
		if *digest != "" && !imageDigest.MatchString(*digest) {
			_, _ = fmt.Fprintf(stderr, "chart package: -digest: %q is not sha256: and 64 hex digits\n", *digest)
			return exitBadInput
		}
		var path string
		if path, err = Package(dir, *version, *image, *digest, *destination); err == nil {
			_, err = fmt.Fprintln(stdout, path)
		}
	default:
		_, _ = fmt.Fprintf(stderr, "chart: unknown command %q: want lint, template, package or push\n", cmd)
		return exitBadInput
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "chart %s: %s\n", cmd, strings.ReplaceAll(err.Error(), "\n", "; "))
		return exitFailure
	}
	return 0
}

// imageDigest is an image's content digest as the chart's schema takes it.
var imageDigest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// errLint is returned when lint finds errors.
var errLint = errors.New("lint failed")
