// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// gateKind is one kind of gate as the binary is configured. The group flags, their --config keys,
// the order the gates are checked in, the names errors give, the flag reference (docs/flags.md)
// and the chart's coverage (TestTheChartCoversEveryGateKind) all come from this table.
type gateKind struct {
	// flag adds the gate: a group flag, and so a --config key of a group.
	flag string
	// chartValue is the chart's value that sets it, top level and in each group; "" where the
	// chart does not offer the gate.
	chartValue string
	// bind defines the kind's flags on fs, into g: flag, and any that modify its gate.
	bind func(fs *flag.FlagSet, g *groupOptions)
	// build adds the gates g sets, each with the flag that set it.
	build func(o *options, g groupOptions, add func(setting string, gate gates.Gate))
}

// gateKinds are the kinds of gates, in the order their gates are checked.
var gateKinds = []gateKind{
	{flag: "csi-address", chartValue: "csi",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.StringVar(&g.csiAddress, "csi-address", "",
				"Absolute path of the CSI driver's Unix socket (unix:// prefix allowed). The driver must answer Identity/Probe.")
			fs.BoolVar(&g.requireCSINode, "require-csinode", true,
				"With --csi-address, also wait until kubelet has registered the driver in this node's CSINode.")
			fs.BoolVar(&g.requireAllocatable, "require-allocatable", false,
				"Also wait until the driver's CSINode entry has allocatable.count (the attach limit).")
		},
		build: func(o *options, g groupOptions, add func(string, gates.Gate)) {
			if g.csiAddress == "" {
				return
			}
			// Only an empty path fails, and validateGroup has refused a relative one.
			csi, _ := gates.NewCSIGate(g.csiAddress, o.probeTimeout)
			add("csi-address", csi)
			if g.requireCSINode {
				csiNode := gates.NewCSINodeGate(o.nodeName, csi, g.requireAllocatable)
				add("require-csinode", csiNode)
				if o.pluginsRegistry != "" {
					// Whether the CSINode entry is of this boot, after a reboot.
					add("plugins-registry", gates.NewRegistrationGate(o.pluginsRegistry, csi, csiNode, clock.RealClock{}, o.probeTimeout))
				}
			}
		}},
	{flag: "ready-url", chartValue: "readyURL",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.StringVar(&g.readyURL, "ready-url", "", "http(s) URL of a local health endpoint; any 2xx answer means ready.")
		},
		build: func(o *options, g groupOptions, add func(string, gates.Gate)) {
			if g.readyURL != "" {
				add("ready-url", gates.NewHTTPGate(g.readyURL, o.probeTimeout))
			}
		}},
	{flag: "ready-file", chartValue: "readyFiles",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.Var(listFlag[string]{items: &g.readyFiles, parse: parseFilePattern}, "ready-file",
				"A gate that passes while a regular, non-empty file matches this absolute path, whose file name may be a glob "+
					"(a CNI agent's /etc/cni/net.d/*.conflist); repeatable, every pattern must match. Its directory is watched.")
		},
		build: func(_ *options, g groupOptions, add func(string, gates.Gate)) {
			if len(g.readyFiles) > 0 {
				// Each pattern was checked by the same constructor as it was parsed.
				file, _ := gates.NewFileGate(g.readyFiles...)
				add("ready-file", file)
			}
		}},
	// Not in the chart: its pod has no other container to gate on.
	{flag: "ready-container",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.StringVar(&g.readyContainer, "ready-container", "",
				"A gate that passes while the container of this name in the agent's own Pod is ready (kubelet's readiness probe); "+
					"the Pod is named by the POD_NAME and POD_NAMESPACE environment variables (downward API).")
		},
		build: func(o *options, g groupOptions, add func(string, gates.Gate)) {
			if g.readyContainer != "" {
				pod := types.NamespacedName{Namespace: o.podNamespace, Name: o.podName}
				add("ready-container", gates.NewContainerGate(o.nodeName, pod, g.readyContainer))
			}
		}},
	{flag: "require-resource", chartValue: "requireResources",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.Var(listFlag[gates.ResourceRequirement]{items: &g.requireResources, parse: gates.ParseResourceRequirement}, "require-resource",
				"A gate that passes while the Node's status.allocatable has at least MIN of the resource, as NAME[=MIN] (MIN 1 when left out), "+
					"as a device plugin advertises it through kubelet; repeatable.")
		},
		build: func(_ *options, g groupOptions, add func(string, gates.Gate)) {
			if len(g.requireResources) > 0 {
				add("require-resource", gates.NewResourceGate(g.requireResources...))
			}
		}},
	{flag: "require-resourceslice", chartValue: "requireResourceSlices",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.Var(listFlag[string]{items: &g.resourceSlices, parse: parseDriverName}, "require-resourceslice",
				"A gate that passes while this Dynamic Resource Allocation driver has published a ResourceSlice for this node "+
					"with at least one device; repeatable.")
		},
		build: func(o *options, g groupOptions, add func(string, gates.Gate)) {
			if len(g.resourceSlices) > 0 {
				add("require-resourceslice", gates.NewResourceSliceGate(o.nodeName, g.resourceSlices...))
			}
		}},
	{flag: "require-condition", chartValue: "requireConditions",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.Var(listFlag[gates.ConditionRequirement]{items: &g.conditions, parse: gates.ParseConditionRequirement}, "require-condition",
				"A gate that passes while the Node has this condition with this status, as TYPE[=STATUS] (STATUS True when left out), "+
					"as Node Problem Detector, a cloud controller or another agent publishes it; repeatable.")
		},
		build: func(_ *options, g groupOptions, add func(string, gates.Gate)) {
			if len(g.conditions) > 0 {
				add("require-condition", gates.NewNodeConditionGate(g.conditions...))
			}
		}},
	{flag: "require-pod", chartValue: "requirePods",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.Var(listFlag[gates.PodRequirement]{items: &g.pods, parse: gates.ParsePodRequirement}, "require-pod",
				"A gate that passes while a pod on this node in NAMESPACE whose labels match LABEL_SELECTOR is Ready, as "+
					"NAMESPACE/LABEL_SELECTOR (kube-system/k8s-app=cilium): another DaemonSet's agent; repeatable. "+
					"Needs a Role that lets the agent read pods in that namespace.")
		},
		build: func(o *options, g groupOptions, add func(string, gates.Gate)) {
			if len(g.pods) > 0 {
				add("require-pod", gates.NewPodGate(o.nodeName, g.pods...))
			}
		}},
	{flag: "node-agents", chartValue: "nodeAgents",
		bind: func(fs *flag.FlagSet, g *groupOptions) {
			fs.StringVar(&g.nodeAgents, "node-agents", "",
				"A gate that passes once every node agent that should run on this node is ready, with no setting per agent: "+
					"all counts every DaemonSet that the DaemonSet controller runs here and that tolerates the startup taints "+
					"(but the agent's own and those labelled "+gates.NodeAgentLabel+"=false), labelled only those labelled =true. "+
					"Each one's pod here must be Ready; one that mounts kubelet's plugins registry read-write must serve a plugin there "+
					"that kubelet has registered (CSINode, allocatable). Only DaemonSets in --node-agent-namespaces count. "+
					"Needs to list DaemonSets and read pods there.")
		},
		build: func(o *options, g groupOptions, add func(string, gates.Gate)) {
			if g.nodeAgents == "" {
				return
			}
			startup := make([]corev1.Taint, 0, len(g.taints))
			for _, t := range g.taints {
				startup = append(startup, corev1.Taint{Key: t.Key, Effect: t.Effect})
			}
			opts := gates.NodeAgentsOptions{Node: o.nodeName, Self: types.NamespacedName{Namespace: o.podNamespace, Name: o.podName},
				Namespaces: o.nodeAgentNamespaces, Startup: startup, Choose: gates.NodeAgents(g.nodeAgents)}
			if o.pluginsRegistry != "" {
				opts.Registry = gates.NewPluginRegistry(o.pluginsRegistry)
			}
			add("node-agents", gates.NewNodeAgentsGate(opts))
			if opts.Registry != nil {
				add("node-agents", gates.NewPluginsGate(o.nodeName, opts.Registry))
			}
		}},
}

// gateFlags are the flags that each add a gate, in the order their gates are checked; a group
// without any has no readiness gate.
var gateFlags = func() []string {
	out := make([]string, 0, len(gateKinds))
	for _, k := range gateKinds {
		out = append(out, k.flag)
	}
	return out
}()

// groupFlags are the flags that describe one group, in the command line's group and in each group
// of --config: its taints, every gate kind's flags, and its condition type, by name.
var groupFlags = func() []string {
	fs := flag.NewFlagSet("group", flag.ContinueOnError)
	bindGroupFlags(fs, &groupOptions{})
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}()
