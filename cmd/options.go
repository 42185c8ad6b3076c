// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// options is everything the command line and environment decide.
type options struct {
	nodeName string
	// groupOptions is the group of taints and gates the command line describes; groups are those
	// the agent serves: that one, or the groups of --config.
	groupOptions
	groups        []groupOptions
	configFile    string
	probeInterval time.Duration
	probeTimeout  time.Duration
	// pluginsRegistry is kubelet's plugins registry, where a CSI driver's registrar has its socket.
	pluginsRegistry string
	// nodeAgentNamespaces are where --node-agents counts DaemonSets.
	nodeAgentNamespaces []string
	maxWait             time.Duration
	retaintAfter        time.Duration
	dryRun              bool
	conditionsOnly      bool
	podName             string
	podNamespace        string

	metricsAddr    string
	metricsSecure  bool
	enableHTTP2    bool
	metricsCertDir string
	metricsCert    string
	metricsKey     string
	probeAddr      string
	pprofAddr      string
	kubeconfig     string

	requireConfinement bool

	zap zap.Options

	// reconciler is what the options describe, built and validated once by validateReconciler:
	// main runs it, gates and all.
	reconciler *controllers.NodeReconciler
}

// groupOptions is one group of startup taints and the gates that hold them (controllers.Group).
type groupOptions struct {
	name               string
	taints             []startuptaint.TaintSpec
	csiAddress         string
	requireCSINode     bool
	requireAllocatable bool
	readyURL           string
	readyContainer     string
	requireResources   []gates.ResourceRequirement
	readyFiles         []string
	resourceSlices     []string
	conditions         []gates.ConditionRequirement
	pods               []gates.PodRequirement
	nodeAgents         string
	conditionType      string
}

// errVersionShown tells the caller that --version printed the version: nothing is left to do.
var errVersionShown = errors.New("version shown")

// parseOptions parses args (without the program name) and validates the result. It does not touch
// the network, so a bad command line fails before anything is sent to the API server.
func parseOptions(args []string, getenv func(string) string, usage io.Writer) (*options, error) {
	o := &options{podName: getenv("POD_NAME"), podNamespace: getenv("POD_NAMESPACE")}
	fs := flag.NewFlagSet("startup-taint-remover", flag.ContinueOnError)
	// flag prints the error and the whole usage on a parse error; the caller prints one line.
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.nodeName, "node-name", getenv("NODE_NAME"),
		"Name of the Node to untaint: the one this pod runs on. Defaults to the NODE_NAME environment variable.")
	bindGroupFlags(fs, &o.groupOptions)
	fs.StringVar(&o.configFile, "config", "",
		"A YAML file of several groups of startup taints and their gates, each removed as soon as its own gates pass "+
			"(see docs/gates.md); the group flags (--taint, --csi-address, the gates, --condition-type) are then set there.")
	fs.DurationVar(&o.probeInterval, "probe-interval", controllers.DefaultProbeInterval,
		"How often the CSI socket and the ready URL are probed.")
	fs.DurationVar(&o.probeTimeout, "probe-timeout", 3*time.Second,
		"How long one probe may take before the agent counts as not ready.")
	fs.StringVar(&o.pluginsRegistry, "plugins-registry", "/var/lib/kubelet/plugins_registry",
		"Kubelet's plugins registry, where a CSI driver's registrar has its socket (mount it read-only). After a reboot the "+
			"driver's CSINode entry from the boot before counts only once that socket is of this boot and kubelet has had "+
			"time to register the driver through it; empty turns that off.")
	fs.Var(listFlag[string]{items: &o.nodeAgentNamespaces, parse: parseNamespace, sep: ","}, "node-agent-namespaces",
		"The cluster admin's namespaces, comma-separated, where node agents and what they need run: --node-agents counts the "+
			"DaemonSets there, and while a node is held, the pending pods there that do not tolerate its startup taints are named "+
			"(UntoleratedStartupTaint). The agent reads DaemonSets and pods there only, and its grant is a Role in each. Name only "+
			"namespaces where the cluster admin alone creates DaemonSets and pods: anyone who can may hold new nodes. Defaults to "+
			"kube-system and the agent's own namespace (POD_NAMESPACE), unless that is default, where anyone's pods land.")
	fs.DurationVar(&o.maxWait, "max-wait", 0,
		"Remove the startup taints anyway once this long has passed since the Node's creation, or for a taint put back after a "+
			"reboot since the boot, even if a gate does not pass; 0 (the default) waits forever.")
	fs.Var(optionalDuration{&o.retaintAfter}, "retaint-after",
		"Continuous mode: when no startup taint is on the Node and a gate has not passed for this long, put the first --taint's key "+
			"(with --config, each group's) back with effect NoSchedule, and remove it once every gate has passed for as long; "+
			"0 or empty (the default) is off.")
	fs.BoolVar(&o.conditionsOnly, "conditions-only", false,
		"Publish each group's verdict as its --condition-type Node condition and never write a taint, for clusters where "+
			"another controller (node-readiness-controller, a platform's) removes the taint; needs --condition-type, "+
			"and no --max-wait or --retaint-after.")
	fs.BoolVar(&o.dryRun, "dry-run", false,
		"Evaluate everything but never write to the Node: report the removals it would make (log, WouldRemoveTaint event, "+
			"startup_taint_removals_total{result=\"dry_run\"}), to run beside another remover and compare.")
	bindServingFlags(fs, o)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig; without it, KUBECONFIG, then the pod's in-cluster config, is used.")
	fs.BoolVar(&o.requireConfinement, "require-confinement", true,
		"Write nothing (no taint removed, no condition written) until an admission policy is seen to confine this agent to its "+
			"own Node: a dry-run change of its Node's labels must be refused. Until then the agent is not ready and says why. "+
			"false runs it unjudged, for an install that leaves the policy out on purpose.")
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	// One line per error: a stack trace of the logging call tells an operator nothing.
	o.zap.StacktraceLevel = zapcore.PanicLevel
	o.zap.BindFlags(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usage)
			_, _ = fmt.Fprintln(usage, "Usage: startup-taint-remover [flags]")
			fs.PrintDefaults()
		}
		return nil, err
	}
	if *showVersion {
		_, _ = fmt.Fprintln(usage, "startup-taint-remover", metrics.Version())
		return nil, errVersionShown
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: all settings are flags", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if err := o.validate(explicit); err != nil {
		return nil, err
	}
	return o, nil
}

// validateBindAddress accepts "0" (off) or HOST:PORT with a port from 0 to 65535.
func validateBindAddress(addr string) error {
	if addr == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT or 0", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

func (o *options) validate(explicit map[string]bool) error {
	if o.nodeName == "" {
		return errors.New("--node-name: empty; set it or the NODE_NAME environment variable (downward API spec.nodeName)")
	}
	if errs := validation.IsDNS1123Subdomain(o.nodeName); len(errs) > 0 {
		return fmt.Errorf("--node-name: %q is not a valid node name: %s", o.nodeName, strings.Join(errs, "; "))
	}
	switch {
	case o.probeInterval <= 0:
		return fmt.Errorf("--probe-interval: %s is not positive", o.probeInterval)
	case o.probeTimeout <= 0:
		return fmt.Errorf("--probe-timeout: %s is not positive", o.probeTimeout)
	case o.pluginsRegistry != "" && !filepath.IsAbs(o.pluginsRegistry):
		return fmt.Errorf("--plugins-registry: %q is not an absolute path", o.pluginsRegistry)
	}
	if err := o.validateModes(explicit); err != nil {
		return err
	}
	if o.configFile == "" {
		if err := o.validateGroup(&o.groupOptions, explicit, o.setting(-1)); err != nil {
			return err
		}
		o.groups = []groupOptions{o.groupOptions}
	} else if err := o.readGroups(explicit); err != nil {
		return err
	}
	if err := o.validateNodeAgentNamespaces(); err != nil {
		return err
	}
	if err := o.validateServing(); err != nil {
		return err
	}
	return o.validateReconciler()
}

// validateNodeAgentNamespaces sets --node-agent-namespaces' default. The reconciler reads it with
// or without --node-agents: it names the pods there that the startup taints keep away.
func (o *options) validateNodeAgentNamespaces() error {
	if len(o.nodeAgentNamespaces) == 0 {
		o.nodeAgentNamespaces = gates.DefaultNodeAgentNamespaces(o.podNamespace)
	}
	return nil
}

// setting returns the function that names a setting of group i in messages: a flag, for the
// command line's group (i < 0), or a setting of a group of --config.
func (o *options) setting(i int) func(string) string {
	if i < 0 {
		return func(name string) string { return "--" + name }
	}
	return func(name string) string { return fmt.Sprintf("groups[%d].%s", i, name) }
}

// validateGroup checks one group's gates and the taints they guard. setting names a group setting
// in the messages: a flag, or a setting of a group of --config.
func (o *options) validateGroup(g *groupOptions, explicit map[string]bool, setting func(string) string) error {
	g.csiAddress = strings.TrimPrefix(g.csiAddress, "unix://")
	switch {
	case g.readyContainer != "" && len(validation.IsDNS1123Label(g.readyContainer)) > 0:
		return fmt.Errorf("%s: %q is not a container name", setting("ready-container"), g.readyContainer)
	case g.readyContainer != "" && (o.podName == "" || o.podNamespace == ""):
		return fmt.Errorf("%s: needs the agent's own Pod in the POD_NAME and POD_NAMESPACE environment variables (downward API)",
			setting("ready-container"))
	case g.nodeAgents != "" && g.nodeAgents != string(gates.NodeAgentsAll) && g.nodeAgents != string(gates.NodeAgentsLabelled):
		return fmt.Errorf("%s: %q is neither %s nor %s", setting("node-agents"), g.nodeAgents, gates.NodeAgentsAll, gates.NodeAgentsLabelled)
	case g.csiAddress != "" && !filepath.IsAbs(g.csiAddress):
		return fmt.Errorf("%s: %q is not an absolute path", setting("csi-address"), g.csiAddress)
	case g.csiAddress == "" && explicit["require-csinode"] && g.requireCSINode:
		return fmt.Errorf("%s: needs %s", setting("require-csinode"), setting("csi-address"))
	case g.requireAllocatable && (g.csiAddress == "" || !g.requireCSINode):
		return fmt.Errorf("%s: needs %s and %s", setting("require-allocatable"), setting("csi-address"), setting("require-csinode"))
	}
	if g.conditionType != "" {
		if err := unrendered(g.conditionType); err != nil {
			return fmt.Errorf("%s: %w", setting("condition-type"), err)
		}
	}
	if g.readyURL != "" {
		u, err := url.Parse(g.readyURL)
		if err != nil {
			return fmt.Errorf("%s: %w", setting("ready-url"), err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: %q is not an http(s) URL with a host", setting("ready-url"), g.readyURL)
		}
	}
	if g.csiAddress == "" {
		g.requireCSINode = false
	}
	return nil
}

// validateModes checks the settings that change what the agent does with the gates' verdict.
func (o *options) validateModes(explicit map[string]bool) error {
	switch {
	case o.maxWait < 0:
		return fmt.Errorf("--max-wait: %s is negative", o.maxWait)
	case o.retaintAfter < 0:
		return fmt.Errorf("--retaint-after: %s is negative", o.retaintAfter)
	case o.dryRun && o.requireConfinement && explicit["require-confinement"]:
		return errors.New("--require-confinement: cannot be checked with --dry-run, which sends no patch, not even the check's")
	}
	return nil
}

// validateServing checks the metrics and health endpoints' settings.
func (o *options) validateServing() error {
	for _, f := range []struct{ name, addr string }{
		{"--metrics-bind-address", o.metricsAddr}, {"--health-probe-bind-address", o.probeAddr},
		{"--pprof-bind-address", o.pprofAddr},
	} {
		if err := validateBindAddress(f.addr); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if o.metricsCertDir == "" {
		return nil
	}
	if o.metricsCert == "" || o.metricsKey == "" {
		return errors.New("--metrics-cert-name and --metrics-cert-key: must not be empty with --metrics-cert-path")
	}
	if info, err := os.Stat(o.metricsCertDir); err != nil || !info.IsDir() {
		return fmt.Errorf("--metrics-cert-path: %q is not a directory", o.metricsCertDir)
	}
	return nil
}
