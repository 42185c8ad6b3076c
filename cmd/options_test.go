// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	corev1 "k8s.io/api/core/v1"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestParseOptionsDefaults(t *testing.T) {
	o, err := parseOptions([]string{"--csi-address=unix:///csi/csi.sock"}, env(map[string]string{"NODE_NAME": "node-a"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.nodeName != "node-a" || o.csiAddress != "/csi/csi.sock" || !o.requireCSINode || o.requireAllocatable ||
		o.probeInterval != time.Second || o.metricsAddr != ":8443" || !o.metricsSecure || o.probeAddr != ":8081" || len(o.taints) != 0 ||
		!o.requireConfinement || o.maxWait != 0 || o.retaintAfter != 0 || o.conditionType != "" {
		t.Fatalf("unexpected defaults: %+v", o)
	}
}

// The node agents' gate counts DaemonSets in kube-system and the agent's own namespace unless
// others are named.
func TestNodeAgentNamespaces(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"--node-agents=all", "--taint=a.example.com/x"}, map[string]string{"NODE_NAME": "a", "POD_NAMESPACE": "storage"}, []string{"kube-system", "storage"}},
		{[]string{"--node-agents=all", "--taint=a.example.com/x"}, map[string]string{"NODE_NAME": "a"}, []string{"kube-system"}},
		{[]string{"--node-agents=all", "--taint=a.example.com/x", "--node-agent-namespaces=cni, storage"}, map[string]string{"NODE_NAME": "a", "POD_NAMESPACE": "x"},
			[]string{"cni", "storage"}},
		// Without the gate, they are where the pods the startup taints keep away are looked for.
		{[]string{"--csi-address=/csi/csi.sock", "--node-agent-namespaces=calico-system"}, map[string]string{"NODE_NAME": "a"}, []string{"calico-system"}},
	} {
		o, err := parseOptions(tt.args, env(tt.env), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o.nodeAgentNamespaces, tt.want) {
			t.Errorf("parseOptions(%q) with %v: namespaces %q, want %q", tt.args, tt.env, o.nodeAgentNamespaces, tt.want)
		}
	}
}

func TestParseOptionsValues(t *testing.T) {
	o, err := parseOptions([]string{
		"--node-name=node-b", "--taint=a.example.com/x", "--taint=b.example.com/y:NoExecute, c.example.com/z",
		"--ready-url=http://127.0.0.1:9808/healthz", "--probe-interval=250ms", "--require-confinement=false", "--max-wait=10m",
		"--retaint-after=30s", "--condition-type=example.com/AgentReady", "--require-resource=nvidia.com/gpu", "--require-resource=hugepages-2Mi=1Gi",
		"--ready-file=/etc/cni/net.d/*.conflist", "--require-resourceslice=gpu.example.com",
		"--require-condition=NetworkUnavailable=False", "--require-condition=example.com/GPUHealthy",
		"--require-pod=kube-system/k8s-app=cilium", "--require-pod=calico-system/app.kubernetes.io/name in (calico-node)",
	}, env(map[string]string{"NODE_NAME": "ignored"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []startuptaint.TaintSpec{{Key: "a.example.com/x"}, {Key: "b.example.com/y", Effect: corev1.TaintEffectNoExecute}, {Key: "c.example.com/z"}}
	if o.nodeName != "node-b" || len(o.taints) != 3 || o.taints[0] != want[0] || o.taints[1] != want[1] || o.taints[2] != want[2] ||
		o.requireCSINode || o.probeInterval != 250*time.Millisecond || o.requireConfinement || o.maxWait != 10*time.Minute ||
		o.retaintAfter != 30*time.Second || o.conditionType != "example.com/AgentReady" ||
		len(o.requireResources) != 2 || o.requireResources[0].String() != "nvidia.com/gpu=1" || o.requireResources[1].String() != "hugepages-2Mi=1Gi" ||
		len(o.readyFiles) != 1 || o.readyFiles[0] != "/etc/cni/net.d/*.conflist" ||
		len(o.resourceSlices) != 1 || o.resourceSlices[0] != "gpu.example.com" ||
		len(o.conditions) != 2 || o.conditions[0].String() != "NetworkUnavailable=False" || o.conditions[1].String() != "example.com/GPUHealthy=True" ||
		len(o.pods) != 2 || o.pods[0].String() != "kube-system/k8s-app=cilium" || o.pods[1].String() != "calico-system/app.kubernetes.io/name in (calico-node)" {
		t.Fatalf("unexpected options: %+v", o)
	}
}

// TestParseOptionsRejectsBadInput checks that every bad input fails with one line naming the flag.
func TestParseOptionsRejectsBadInput(t *testing.T) {
	node := map[string]string{"NODE_NAME": "node-a"}
	csi := "--csi-address=/csi/csi.sock"
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"empty node name", []string{csi}, nil, "--node-name: empty"},
		{"empty node name flag", []string{csi, "--node-name="}, node, "--node-name: empty"},
		{"invalid node name", []string{csi, "--node-name=Node_A"}, nil, "--node-name"},
		{"no gate", []string{"--taint=a.example.com/x"}, node, "no readiness gate"},
		{"relative socket", []string{"--csi-address=csi.sock"}, node, "--csi-address"},
		{"relative unix socket", []string{"--csi-address=unix://csi.sock"}, node, "--csi-address"},
		{"empty taint", []string{csi, "--taint="}, node, "-taint"},
		{"taint with value", []string{csi, "--taint=a.example.com/x=1:NoSchedule"}, node, "-taint"},
		{"taint bad key", []string{csi, "--taint=not a key"}, node, "-taint"},
		{"taint list with an empty item", []string{csi, "--taint=a.example.com/x,"}, node, "-taint"},
		{"taint bad effect", []string{csi, "--taint=a.example.com/x:Never"}, node, "-taint"},
		{"no taint without csi", []string{"--ready-url=http://127.0.0.1/healthz"}, node, "--taint"},
		{"ftp url", []string{"--taint=a/b", "--ready-url=ftp://127.0.0.1/x"}, node, "--ready-url"},
		{"url without host", []string{"--taint=a/b", "--ready-url=http:///healthz"}, node, "--ready-url"},
		{"url unparsable", []string{"--taint=a/b", "--ready-url=http://[::1"}, node, "--ready-url"},
		{"zero interval", []string{csi, "--probe-interval=0s"}, node, "--probe-interval"},
		{"negative interval", []string{csi, "--probe-interval=-1s"}, node, "--probe-interval"},
		{"interval not a duration", []string{csi, "--probe-interval=fast"}, node, "-probe-interval"},
		{"zero timeout", []string{csi, "--probe-timeout=0"}, node, "--probe-timeout"},
		{"bool not a bool", []string{csi, "--require-csinode=maybe"}, node, "-require-csinode"},
		{"confinement not a bool", []string{csi, "--require-confinement=maybe"}, node, "-require-confinement"},
		{"dry run with required confinement", []string{csi, "--dry-run", "--require-confinement"}, node, "--require-confinement"},
		{"container name not a name", []string{csi, "--ready-container=Driver_1"}, map[string]string{"NODE_NAME": "node-a", "POD_NAME": "p", "POD_NAMESPACE": "ns"}, "--ready-container"},
		{"container without its pod", []string{csi, "--ready-container=driver"}, node, "--ready-container: needs the agent's own Pod"},
		{"negative maximum wait", []string{csi, "--max-wait=-1m"}, node, "--max-wait: -1m0s is negative"},
		{"maximum wait not a duration", []string{csi, "--max-wait=soon"}, node, "-max-wait"},
		{"negative re-taint delay", []string{csi, "--taint=a/b", "--retaint-after=-30s"}, node, "--retaint-after: -30s is negative"},
		{"re-taint delay not a duration", []string{csi, "--taint=a/b", "--retaint-after=30"}, node, "-retaint-after"},
		{"re-taint without a taint to put back", []string{csi, "--retaint-after=30s"}, node, "--taint: required by continuous mode"},
		{"condition type not a qualified name", []string{csi, "--condition-type=agent ready"}, node, "--condition-type: \"agent ready\" is not a valid"},
		{"condition type with two slashes", []string{csi, "--condition-type=a/b/c"}, node, "--condition-type"},
		{"condition type kubelet writes", []string{csi, "--condition-type=Ready"}, node, "--condition-type: \"Ready\" is a condition kubelet writes"},
		{"condition with a dry run", []string{csi, "--dry-run", "--condition-type=example.com/AgentReady"}, node, "--condition-type: cannot be written"},
		{"resource name not a name", []string{"--taint=a/b", "--require-resource=nvidia com/gpu"}, node, "-require-resource"},
		{"resource minimum not a quantity", []string{"--taint=a/b", "--require-resource=nvidia.com/gpu=many"}, node, "-require-resource"},
		{"condition not a condition type", []string{"--taint=a/b", "--require-condition=network unavailable"}, node, "-require-condition"},
		{"condition status not a status", []string{"--taint=a/b", "--require-condition=NetworkUnavailable=no"}, node, "-require-condition"},
		{"condition the group writes itself", []string{"--taint=a/b", "--require-condition=example.com/AgentReady",
			"--condition-type=example.com/AgentReady"}, node, "--require-condition: example.com/AgentReady is the condition this group writes"},
		{"pod without a namespace", []string{"--taint=a/b", "--require-pod=k8s-app=cilium"}, node, "-require-pod: \"k8s-app=cilium\" is not NAMESPACE/LABEL_SELECTOR"},
		{"pod namespace not a name", []string{"--taint=a/b", "--require-pod=Kube_System/k8s-app=cilium"}, node, "-require-pod"},
		{"pod selector not a selector", []string{"--taint=a/b", "--require-pod=kube-system/k8s-app in cilium"}, node, "is not a label selector"},
		{"pod selector empty", []string{"--taint=a/b", "--require-pod=kube-system/"}, node, "would match every pod"},
		{"resource minimum zero", []string{"--taint=a/b", "--require-resource=nvidia.com/gpu=0"}, node, "must be positive"},
		{"resource minimum negative", []string{"--taint=a/b", "--require-resource=nvidia.com/gpu=-1"}, node, "must be positive"},
		{"ready file relative", []string{"--taint=a/b", "--ready-file=etc/cni/net.d/*.conflist"}, node, "-ready-file"},
		{"ready file bad glob", []string{"--taint=a/b", "--ready-file=/etc/cni/net.d/["}, node, "-ready-file"},
		{"ready file glob in its directory", []string{"--taint=a/b", "--ready-file=/etc/*/net.d/x"}, node, "not its directory"},
		{"DRA driver not a name", []string{"--taint=a/b", "--require-resourceslice=GPU Driver"}, node, "not a DRA driver name"},
		{"csinode without csi", []string{"--taint=a/b", "--ready-url=http://127.0.0.1/", "--require-csinode"}, node, "--require-csinode"},
		{"allocatable without csinode", []string{csi, "--require-csinode=false", "--require-allocatable"}, node, "--require-allocatable"},
		{"unknown flag", []string{csi, "--no-such-flag"}, node, "-no-such-flag"},
		{"positional argument", []string{csi, "extra"}, node, "unexpected argument"},
		{"cert names empty", []string{csi, "--metrics-cert-path=/certs", "--metrics-cert-name="}, node, "--metrics-cert-name"},
		{"cert path missing", []string{csi, "--metrics-cert-path=/does/not/exist"}, node, "--metrics-cert-path"},
		{"metrics address malformed", []string{csi, "--metrics-bind-address=8443"}, node, "--metrics-bind-address"},
		{"metrics port out of range", []string{csi, "--metrics-bind-address=:70000"}, node, "--metrics-bind-address"},
		{"health address empty", []string{csi, "--health-probe-bind-address="}, node, "--health-probe-bind-address"},
		{"health port not a number", []string{csi, "--health-probe-bind-address=:http"}, node, "--health-probe-bind-address"},
		{"taints left unrendered", []string{csi, `--taint=\TAINTS`}, node, `-taint: "\\TAINTS" is a placeholder`},
		{"re-taint delay left unrendered", []string{csi, `--retaint-after=\RETAINTAFTER`}, node, `-retaint-after: "\\RETAINTAFTER" is a placeholder`},
		{"condition type left unrendered", []string{csi, `--condition-type=\CONDITIONTYPE`}, node, `--condition-type: "\\CONDITIONTYPE" is a placeholder`},
		{"log level unknown", []string{csi, "--zap-log-level=loud"}, node, "-zap-log-level"},
		{"node agents' namespace not a name", []string{"--node-agents=all", "--taint=a.example.com/x", "--node-agent-namespaces=kube-system,Tenant_A"}, node,
			`-node-agent-namespaces: "Tenant_A" is not a namespace name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseOptions(tt.args, env(tt.env), io.Discard)
			if err == nil {
				t.Fatalf("parseOptions(%q) succeeded, want an error naming %s", tt.args, tt.want)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line containing %q", msg, tt.want)
			}
		})
	}
}

// TestParseOptionsTakesEmptyAsOff checks the values a manifest passes through an empty
// environment variable when a setting is off.
func TestParseOptionsTakesEmptyAsOff(t *testing.T) {
	o, err := parseOptions([]string{"--csi-address=/csi/csi.sock", "--retaint-after=", "--condition-type="},
		env(map[string]string{"NODE_NAME": "node-a"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.retaintAfter != 0 || o.conditionType != "" {
		t.Fatalf("want both off, got %+v", o)
	}
}

func TestParseOptionsHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseOptions([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	for _, name := range []string{"-node-name", "-taint", "-csi-address", "-require-csinode", "-require-allocatable",
		"-ready-url", "-probe-interval", "-max-wait", "-retaint-after", "-condition-type", "-dry-run", "-ready-container", "-require-condition", "-require-pod", "-metrics-bind-address", "-health-probe-bind-address", "-kubeconfig", "-zap-log-level"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("usage lacks %s", name)
		}
	}
}

func TestParseOptionsVersion(t *testing.T) {
	var out strings.Builder
	// Before any validation: no node name, no gate.
	_, err := parseOptions([]string{"--version"}, env(nil), &out)
	if !errors.Is(err, errVersionShown) || out.String() != "startup-taint-remover dev\n" {
		t.Fatalf("err = %v, output %q; want the version", err, out.String())
	}
}

func TestLoadConfig(t *testing.T) {
	if _, err := loadConfig(t.TempDir()+"/missing", ""); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("missing kubeconfig: err = %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := loadConfig("", ""); err == nil || !strings.Contains(err.Error(), "set --kubeconfig or KUBECONFIG") {
		t.Fatalf("no config: err = %v", err)
	}
}

// writeConfig writes a --config file with content and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "groups.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoGroups is a valid --config: a disk and a file CSI driver on one node.
const twoGroups = `groups:
- name: ebs
  taint: [ebs.csi.aws.com/agent-not-ready:NoExecute]
  csi-address: unix:///csi/ebs/csi.sock
  require-allocatable: true
  condition-type: ebs.csi.aws.com/AgentReady
- name: efs
  taint: efs.csi.aws.com/agent-not-ready
  csi-address: /csi/efs/csi.sock
  require-csinode: false
  require-resource: [example.com/dev, example.com/other=2]
- name: cni
  # One key with two effects, both this group's.
  taint: [node.example.com/cni-not-ready:NoSchedule, node.example.com/cni-not-ready:NoExecute]
  ready-file: /etc/cni/net.d/05-example.conflist
`

func TestParseOptionsConfigGroups(t *testing.T) {
	o, err := parseOptions([]string{"--config=" + writeConfig(t, twoGroups), "--retaint-after=1m"}, env(map[string]string{"NODE_NAME": "n"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.groups) != 3 {
		t.Fatalf("groups %+v, want 3", o.groups)
	}
	ebs, efs := o.groups[0], o.groups[1]
	if ebs.name != "ebs" || len(ebs.taints) != 1 || ebs.taints[0] != (startuptaint.TaintSpec{Key: "ebs.csi.aws.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}) ||
		ebs.csiAddress != "/csi/ebs/csi.sock" || !ebs.requireCSINode || !ebs.requireAllocatable || ebs.conditionType != "ebs.csi.aws.com/AgentReady" {
		t.Fatalf("group ebs: %+v", ebs)
	}
	if efs.name != "efs" || len(efs.taints) != 1 || efs.taints[0].Key != "efs.csi.aws.com/agent-not-ready" || efs.requireCSINode ||
		len(efs.requireResources) != 2 || efs.requireResources[1].String() != "example.com/other=2" {
		t.Fatalf("group efs: %+v", efs)
	}

	// Without --config, the command line is the one group, unnamed, as it always was.
	o, err = parseOptions([]string{"--csi-address=/csi/csi.sock"}, env(map[string]string{"NODE_NAME": "n"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.groups) != 1 || o.groups[0].name != "" || o.groups[0].csiAddress != "/csi/csi.sock" || !o.groups[0].requireCSINode {
		t.Fatalf("the command line's group: %+v", o.groups)
	}
}

// TestParseOptionsRejectsBadConfig checks that every bad --config fails with one line naming the
// file and the setting.
func TestParseOptionsRejectsBadConfig(t *testing.T) {
	group := "- name: ebs\n  taint: ebs.csi.aws.com/agent-not-ready\n  csi-address: /csi/ebs/csi.sock\n"
	tests := []struct {
		name    string
		content string
		args    []string
		want    string
	}{
		{"not YAML", "groups: [", nil, "--config"},
		{"unknown top-level key", "group:\n" + group, nil, `unknown field "group"`},
		{"a key twice", "groups:\n" + group + "  taint: a.example.com/y\n", nil, `key "taint" already set`},
		{"no groups", "groups: []\n", nil, "groups: empty"},
		{"unknown setting", "groups:\n" + group + "  probe-interval: 1s\n", nil, "groups[0].probe-interval: not a setting of a group"},
		{"a setting that is a map", "groups:\n" + group + "  ready-url: {a: b}\n", nil, "groups[0].ready-url: map[a:b] is not a string"},
		{"a bad taint", "groups:\n- name: a\n  taint: [a.example.com/x:Never]\n  ready-url: http://127.0.0.1/\n", nil, "groups[0].taint: "},
		{"a relative socket", "groups:\n" + group + "- name: efs\n  csi-address: csi.sock\n", nil,
			`groups[1].csi-address: "csi.sock" is not an absolute path`},
		{"no gate", "groups:\n- name: a\n  taint: a.example.com/x\n", nil, "no readiness gate: set groups[0].csi-address"},
		{"no name", "groups:\n- taint: a.example.com/x\n  ready-url: http://127.0.0.1/\n", nil, `groups[0].name: "" is not a DNS label`},
		{"a name that is not a string", "groups:\n- name: [a]\n  taint: a.example.com/x\n", nil, "groups[0].name: not a string"},
		{"a name twice", "groups:\n" + group + group, nil, `groups[1].name: "ebs" is another group's`},
		{"a taint in two groups", "groups:\n" + group + "- name: other\n  taint: ebs.csi.aws.com/agent-not-ready:NoSchedule\n  ready-url: http://127.0.0.1/\n",
			nil, "groups[1].taint: ebs.csi.aws.com/agent-not-ready is group ebs's too"},
		{"a condition type in two groups", "groups:\n" + group + "  condition-type: example.com/Ready\n" +
			"- name: efs\n  csi-address: /csi/efs/csi.sock\n  condition-type: example.com/Ready\n", nil,
			`groups[1].condition-type: "example.com/Ready" is group ebs's`},
		{"re-taint and a group without a taint", "groups:\n" + group + "- name: efs\n  csi-address: /csi/efs/csi.sock\n",
			[]string{"--retaint-after=1m"}, "groups[1].taint: required by continuous mode"},
		{"a group flag beside it", "groups:\n" + group, []string{"--taint=a.example.com/x"}, "--taint: set it in the groups of --config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.content)
			_, err := parseOptions(append([]string{"--config=" + path}, tt.args...), env(map[string]string{"NODE_NAME": "n"}), io.Discard)
			if err == nil {
				t.Fatalf("parseOptions succeeded, want an error naming %s", tt.want)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line containing %q", msg, tt.want)
			}
		})
	}
	if _, err := parseOptions([]string{"--config=/does/not/exist"}, env(map[string]string{"NODE_NAME": "n"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--config: open /does/not/exist") {
		t.Fatalf("a missing file: %v", err)
	}
}

// TestDryRunNeedsNoConfinementFlag checks that --dry-run alone runs: confinement is required by
// default, and a dry run, which writes nothing, has nothing to hold.
func TestDryRunNeedsNoConfinementFlag(t *testing.T) {
	if _, err := parseOptions([]string{"--csi-address=/csi.sock", "--dry-run"}, env(map[string]string{"NODE_NAME": "n"}), io.Discard); err != nil {
		t.Fatalf("--dry-run alone: %v", err)
	}
}
