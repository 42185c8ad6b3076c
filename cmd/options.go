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
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

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
		"The namespaces whose DaemonSets --node-agents counts, comma-separated; the agent reads DaemonSets and pods there only, "+
			"and its grant is a Role in each. Name only namespaces where the cluster admin alone creates DaemonSets and pods: "+
			"anyone who can may hold new nodes. Defaults to kube-system and the agent's own namespace (POD_NAMESPACE), unless that "+
			"is default, where anyone's pods land.")
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
	if err := o.validateNodeAgentNamespaces(explicit); err != nil {
		return err
	}
	if err := o.validateServing(); err != nil {
		return err
	}
	return o.validateReconciler()
}

// parseNamespace accepts one item of --node-agent-namespaces: a namespace's name.
func parseNamespace(v string) (string, error) {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return "", fmt.Errorf("%q is not a namespace name: %s", v, strings.Join(errs, "; "))
	}
	return v, nil
}

// validateNodeAgentNamespaces refuses --node-agent-namespaces where no group has --node-agents,
// which would leave it unread, and sets its default.
func (o *options) validateNodeAgentNamespaces(explicit map[string]bool) error {
	used := slices.ContainsFunc(o.groups, func(g groupOptions) bool { return g.nodeAgents != "" })
	if explicit["node-agent-namespaces"] && !used {
		return errors.New("--node-agent-namespaces: needs --node-agents (in some group of --config)")
	}
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

// configFile is what --config holds: groups, each a map from the name of a group flag (groupFlags)
// to its value (a list for a repeatable flag), and the group's name.
type configFile struct {
	Groups []map[string]any `json:"groups"`
}

// readGroups reads the groups of --config, each parsed by the group flags' own parsers and
// checked as the command line's group is. A group flag on the command line as well is refused:
// which would win?
func (o *options) readGroups(explicit map[string]bool) error {
	for _, name := range groupFlags {
		if explicit[name] {
			return fmt.Errorf("--%s: set it in the groups of --config, not on the command line", name)
		}
	}
	data, err := os.ReadFile(o.configFile)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var file configFile
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		// The YAML library lists several problems on lines of their own; the caller prints one.
		return fmt.Errorf("--config %s: %s", o.configFile, strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
	}
	if len(file.Groups) == 0 {
		return fmt.Errorf("--config %s: groups: empty; list at least one group", o.configFile)
	}
	for i, settings := range file.Groups {
		g, explicit, err := parseGroup(settings, o.setting(i))
		switch {
		case err != nil:
		case g.name == "":
			// The reconciler lets a lone group go unnamed; a group of a file is always named.
			err = fmt.Errorf(`%s: "" is not a DNS label: every group of --config needs a name`, o.setting(i)("name"))
		default:
			err = o.validateGroup(&g, explicit, o.setting(i))
		}
		if err != nil {
			return fmt.Errorf("--config %s: %w", o.configFile, err)
		}
		o.groups = append(o.groups, g)
	}
	return nil
}

// parseGroup parses one group of --config with the group flags' own parsers, and returns it with
// the flags it set.
func parseGroup(settings map[string]any, setting func(string) string) (groupOptions, map[string]bool, error) {
	var g groupOptions
	fs := flag.NewFlagSet("group", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindGroupFlags(fs, &g)
	explicit := map[string]bool{}
	keys := make([]string, 0, len(settings))
	for key := range settings {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		value := settings[key]
		if key == nameSetting {
			name, ok := value.(string)
			if !ok {
				return g, nil, fmt.Errorf("%s: not a string", setting("name"))
			}
			g.name = name
			continue
		}
		if fs.Lookup(key) == nil {
			return g, nil, fmt.Errorf("%s: not a setting of a group; those are name, %s", setting(key), strings.Join(groupFlags, ", "))
		}
		values, ok := value.([]any)
		if !ok {
			values = []any{value}
		}
		for _, v := range values {
			switch v.(type) {
			case string, bool, float64:
			default:
				return g, nil, fmt.Errorf("%s: %v is not a string, a boolean or a number", setting(key), v)
			}
			if err := fs.Set(key, fmt.Sprint(v)); err != nil {
				return g, nil, fmt.Errorf("%s: %w", setting(key), err)
			}
		}
		explicit[key] = true
	}
	return g, explicit, nil
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
