// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The command line's flags: their types, their parsers and their definitions. Each is
// validated once, by options.validate.

// parseTaint accepts one --taint item, KEY[:EFFECT], that is no placeholder left by a renderer.
func parseTaint(v string) (startuptaint.TaintSpec, error) {
	if err := unrendered(v); err != nil {
		return startuptaint.TaintSpec{}, err
	}
	return startuptaint.ParseTaintSpec(v)
}

// unrendered refuses a value that is still one of the manifests' placeholders (\TAINTS,
// \RETAINTAFTER, \CONDITIONTYPE): the tool that rendered them did not run the replacements of
// config/components/taints, and the admission policy it rendered cannot have been applied either.
func unrendered(v string) error {
	if strings.HasPrefix(v, `\`) {
		return fmt.Errorf("%q is a placeholder of the manifests that their renderer left in: "+
			"render them with kustomize v5.4.2 or later (see docs/install.md)", v)
	}
	return nil
}

// listFlag collects a repeated flag, parsing each value as it arrives so the error names it.
// With a separator, one value may also carry several, so a manifest can pass a whole list through
// one environment variable (--taint, written when the manifests are rendered from the same string
// as the admission policy's).
type listFlag[T any] struct {
	items *[]T
	parse func(string) (T, error)
	sep   string
}

func (f listFlag[T]) String() string {
	if f.items == nil {
		return ""
	}
	parts := make([]string, len(*f.items))
	for i, item := range *f.items {
		parts[i] = fmt.Sprint(item)
	}
	return strings.Join(parts, ",")
}

func (f listFlag[T]) Set(v string) error {
	values := []string{v}
	if f.sep != "" {
		values = strings.Split(v, f.sep)
		for i := range values {
			values[i] = strings.TrimSpace(values[i])
		}
	}
	for _, value := range values {
		item, err := f.parse(value)
		if err != nil {
			return err
		}
		*f.items = append(*f.items, item)
	}
	return nil
}

// parseFilePattern accepts a --ready-file pattern that a FileGate can watch.
func parseFilePattern(v string) (string, error) {
	_, err := gates.NewFileGate(v)
	return v, err
}

// parseDriverName accepts a DRA driver name, a DNS subdomain.
func parseDriverName(v string) (string, error) {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return "", fmt.Errorf("%q is not a DRA driver name: %s", v, strings.Join(errs, "; "))
	}
	return v, nil
}

// optionalDuration is a duration flag that also accepts the empty string, as 0 (off), so a
// manifest can pass a setting that is off through an environment variable.
type optionalDuration struct{ d *time.Duration }

func (f optionalDuration) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f optionalDuration) Set(v string) error {
	if err := unrendered(v); err != nil {
		return err
	}
	if v == "" {
		*f.d = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration")
	}
	*f.d = d
	return nil
}

// nameSetting is the setting of a group of --config that names it; it is not a flag.
const nameSetting = "name"

// bindGroupFlags defines a group's flags on fs, into g: its taints, each gate kind's, its condition type.
func bindGroupFlags(fs *flag.FlagSet, g *groupOptions) {
	fs.Var(listFlag[startuptaint.TaintSpec]{items: &g.taints, parse: parseTaint, sep: ","}, "taint",
		"Startup taint to remove, as KEY[:EFFECT]; repeatable, or a comma-separated list. Values are not matched. "+
			"Default with --csi-address: <driver name>/agent-not-ready.")
	for _, k := range gateKinds {
		k.bind(fs, g)
	}
	fs.StringVar(&g.conditionType, "condition-type", "",
		"Publish the gates' verdict as a Node condition of this type (True, or False with the failing gate as the reason), "+
			"written to the Node's status when it changes; empty (the default) is off.")
}

// bindServingFlags defines the flags of the metrics, health and pprof endpoints on fs, into o.
func bindServingFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to; \"0\" turns it off.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS with Kubernetes authentication and authorization; false serves plain HTTP.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"Allow HTTP/2 on the metrics server (off by default against HTTP/2 stream attacks).")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-path", "",
		"Directory holding the metrics server certificate; a self-signed one is used when empty.")
	fs.StringVar(&o.metricsCert, "metrics-cert-name", "tls.crt", "File name of the metrics server certificate.")
	fs.StringVar(&o.metricsKey, "metrics-cert-key", "tls.key", "File name of the metrics server key.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz endpoints bind to; \"0\" turns them off.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0",
		"Address to serve Go's pprof profiles on, for diagnosis; \"0\" (the default) turns it off.")
}

// parseNamespace accepts one item of --node-agent-namespaces: a namespace's name.
func parseNamespace(v string) (string, error) {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return "", fmt.Errorf("%q is not a namespace name: %s", v, strings.Join(errs, "; "))
	}
	return v, nil
}
