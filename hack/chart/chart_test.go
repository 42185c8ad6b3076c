// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const chartDir = "../../charts/startup-taint-remover"

func init() {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// valueFiles are the chart's default values (none) and one file per driver in the README's table.
func valueFiles(t *testing.T) [][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) < 6 {
		t.Fatalf("want a values file per driver in %s/ci, got %v (%v)", chartDir, files, err)
	}
	out := make([][]string, 0, 1+len(files))
	out = append(out, nil)
	for _, f := range files {
		out = append(out, []string{f})
	}
	return out
}

// placeholder matches what config/policy holds until the settings are written in (STARTUP_TAINTS,
// an environment variable's name, is not one).
var placeholder = regexp.MustCompile(`(^|[^_A-Z])TAINTS|RETAINTAFTER|CONDITIONTYPE`)

func TestTheChartLintsAndRendersWithEachDriversValues(t *testing.T) {
	for _, files := range valueFiles(t) {
		t.Run(strings.Join(append([]string{"defaults"}, files...), "+"), func(t *testing.T) {
			if err := Lint(chartDir, files, nil); err != nil {
				t.Fatal(err)
			}
			out, err := Template(chartDir, "str", "kube-system", files, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"kind: DaemonSet", "kind: ValidatingAdmissionPolicy\n", "kind: ValidatingAdmissionPolicyBinding"} {
				if !strings.Contains(out, want) {
					t.Errorf("the rendered chart lacks %q", want)
				}
			}
			if left := placeholder.FindString(out); left != "" {
				t.Errorf("a placeholder is left: %s", left)
			}
		})
	}
}

// TestBadValuesFailAtInstallTime checks that each bad value fails the install with a message
// naming the value, before anything is rendered.
func TestBadValuesFailAtInstallTime(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  []string
		want string
	}{
		{"no taint", []string{"taints=null"}, "taints"},
		{"a taint with a value", []string{"taints[0]=example.com/x=1"}, "/taints/0"},
		{"a taint with an unknown effect", []string{"taints[0]=example.com/x:Never"}, "/taints/0"},
		{"an unknown key", []string{"replicas=3"}, "replicas"},
		{"no gate", []string{"csi.socketDir="}, "anyOf"},
		{"a relative socket directory", []string{"csi.socketDir=plugins/x"}, "/csi/socketDir"},
		{"a duration that is not one", []string{"retaintAfter=soon"}, "/retaintAfter"},
		{"a condition kubelet writes", []string{"conditionType=Ready"}, "/conditionType"},
		{"a condition type that is not a name", []string{"conditionType=agent ready"}, "/conditionType"},
		{"a condition in a dry run", []string{"dryRun=true", "conditionType=example.com/AgentReady"}, "allOf"},
		{"a port out of range", []string{"metrics.port=70000"}, "/metrics/port"},
		{"a resource that is not a name", []string{"requireResources[0]=nvidia com/gpu"}, "/requireResources/0"},
		{"a resource minimum of zero", []string{"requireResources[0]=nvidia.com/gpu=0"}, "/requireResources/0"},
		{"a resource minimum that is not a quantity", []string{"requireResources[0]=nvidia.com/gpu=many"}, "/requireResources/0"},
		{"a relative ready file", []string{"readyFiles[0]=etc/cni/net.d/x"}, "/readyFiles/0"},
		{"a ready file with a glob in its directory", []string{"readyFiles[0]=/etc/*/net.d/x"}, "/readyFiles/0"},
		{"a DRA driver that is not a name", []string{"requireResourceSlices[0]=GPU Driver"}, "/requireResourceSlices/0"},
		{"a condition that is not a name", []string{"requireConditions[0]=network unavailable"}, "/requireConditions/0"},
		{"a condition status that is not one", []string{"requireConditions[0]=NetworkUnavailable=false"}, "/requireConditions/0"},
		{"a pod without a namespace", []string{"requirePods[0]=k8s-app=cilium"}, "/requirePods/0"},
		{"a pod namespace that is not a name", []string{"requirePods[0]=Kube_System/k8s-app=cilium"}, "/requirePods/0"},
		{"an unknown pull policy", []string{"image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
		{"a group without a name", []string{"groups[0].taints[0]=a.example.com/x", "groups[0].readyURL=http://127.0.0.1/"}, "/groups/0"},
		{"a group name that is not a DNS label", []string{"groups[0].name=A_B", "groups[0].taints[0]=a.example.com/x",
			"groups[0].readyURL=http://127.0.0.1/"}, "/groups/0/name"},
		{"a group without a taint", []string{"groups[0].name=a", "groups[0].readyURL=http://127.0.0.1/"}, "/groups/0"},
		{"a group without a gate", []string{"groups[0].name=a", "groups[0].taints[0]=a.example.com/x"}, "/groups/0"},
		{"a group with a taint value", []string{"groups[0].name=a", "groups[0].taints[0]=a.example.com/x=1",
			"groups[0].readyURL=http://127.0.0.1/"}, "/groups/0/taints/0"},
		{"a group with a setting of the whole agent", []string{"groups[0].name=a", "groups[0].taints[0]=a.example.com/x",
			"groups[0].readyURL=http://127.0.0.1/", "groups[0].maxWait=1m"}, "/groups/0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Template(chartDir, "str", "kube-system", nil, tt.set)
			if err == nil {
				t.Fatalf("--set %v rendered; want it refused", tt.set)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q: want the schema's refusal naming %s", err, tt.want)
			}
		})
	}
}

// TestGroupsRefuseTheGatesBesideThem checks that a gate set beside groups, which no group would
// use, fails the install instead of being ignored.
func TestGroupsRefuseTheGatesBesideThem(t *testing.T) {
	group := []string{"groups[0].name=a", "groups[0].taints[0]=a.example.com/x", "groups[0].readyURL=http://127.0.0.1/"}
	if _, err := Template(chartDir, "str", "kube-system", nil, group); err != nil {
		t.Fatalf("a group alone: %v", err)
	}
	for _, beside := range []string{"readyURL=http://127.0.0.1/", "nodeAgents=all"} {
		_, err := Template(chartDir, "str", "kube-system", nil, append(group, beside))
		if err == nil || !strings.Contains(err.Error(),
			"set readyURL, readyFiles, requireResources, requireResourceSlices, requireConditions, requirePods, nodeAgents and conditionType in each group") {
			t.Fatalf("%s beside groups: err = %v", beside, err)
		}
	}
	// A taint key in two groups, which the agent would refuse to start with, and the crash policy
	// would add twice (issue 57, F11); a group may still hold one key with both effects.
	two := append(slices.Clone(group), "groups[1].name=b", "groups[1].taints[0]=b.example.com/y", "groups[1].readyURL=http://127.0.0.1/")
	if _, err := Template(chartDir, "str", "kube-system", nil, append(two, "groups[0].taints[1]=a.example.com/x:NoExecute")); err != nil {
		t.Fatalf("one key with two effects in one group: %v", err)
	}
	_, err := Template(chartDir, "str", "kube-system", nil, append(two, "groups[1].taints[1]=a.example.com/x:NoExecute"))
	if err == nil || !strings.Contains(err.Error(), "groups: the taint key a.example.com/x is in groups a and b; give each key to one group") {
		t.Fatalf("one key in two groups: err = %v", err)
	}
	// A group's nodeAgents gets the grant and kubelet's plugins registry, as the top-level one does.
	out, err := Template(chartDir, "str", "kube-system", nil, append(group, "groups[0].nodeAgents=labelled"))
	if err != nil {
		t.Fatalf("a group with nodeAgents: %v", err)
	}
	for _, want := range []string{"node-agents: labelled", "name: str-startup-taint-remover-node-agents", "mountPath: /var/lib/kubelet/plugins_registry"} {
		if !strings.Contains(out, want) {
			t.Errorf("a group with nodeAgents renders no %q", want)
		}
	}
}

// TestReadyFilesInOneDirectoryMountItOnce checks that ready files sharing a directory, of one
// agent or of two groups, do not make a pod with the same mount path twice, which the API server
// refuses.
func TestReadyFilesInOneDirectoryMountItOnce(t *testing.T) {
	for name, tt := range map[string]struct {
		sets []string
		want []string
	}{
		"one agent": {[]string{"readyURL=", "csi.socketDir=", "taints[0]=a.example.com/x",
			"readyFiles[0]=/etc/cni/net.d/a.conf", "readyFiles[1]=/etc/cni/net.d/b.conf", "readyFiles[2]=/run/x/ready"},
			[]string{"--ready-file=/etc/cni/net.d/a.conf", "--ready-file=/etc/cni/net.d/b.conf", "mountPath: /run/x\n"}},
		"two groups": {[]string{
			"groups[0].name=a", "groups[0].taints[0]=a.example.com/x", "groups[0].readyFiles[0]=/etc/cni/net.d/a.conf",
			"groups[1].name=b", "groups[1].taints[0]=b.example.com/x", "groups[1].readyFiles[0]=/etc/cni/net.d/b.conf",
			"groups[1].readyURL=http://127.0.0.1:9808/healthz#x"},
			[]string{`ready-file: ["/etc/cni/net.d/a.conf"]`, `ready-file: ["/etc/cni/net.d/b.conf"]`,
				`ready-url: "http://127.0.0.1:9808/healthz#x"`}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Template(chartDir, "str", "kube-system", nil, tt.sets)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(out, "mountPath: /etc/cni/net.d\n"); n != 1 {
				t.Fatalf("/etc/cni/net.d mounted %d times, want once:\n%s", n, out)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Fatalf("the render lacks %s:\n%s", want, out)
				}
			}
		})
	}
}

// TestRequiredPodsGrantReadsInTheirNamespacesOnly checks that requirePods, of the agent or of its
// groups, passes each to --require-pod and grants pod reads in each namespace once, with a Role.
func TestRequiredPodsGrantReadsInTheirNamespacesOnly(t *testing.T) {
	out, err := Template(chartDir, "str", "storage", nil, []string{
		"groups[0].name=net", "groups[0].taints[0]=node.cilium.io/agent-not-ready",
		"groups[0].requirePods[0]=kube-system/k8s-app=cilium", "groups[0].requirePods[1]=kube-system/k8s-app=kube-proxy",
		"groups[1].name=gpu", "groups[1].taints[0]=gpu.example.com/agent-not-ready",
		"groups[1].requirePods[0]=gpu-operator/app=nvidia-device-plugin-daemonset"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`require-pod: ["kube-system/k8s-app=cilium","kube-system/k8s-app=kube-proxy"]`,
		`require-pod: ["gpu-operator/app=nvidia-device-plugin-daemonset"]`,
		"kind: Role\nmetadata:\n  name: str-startup-taint-remover-pods\n  namespace: kube-system\n",
		"kind: Role\nmetadata:\n  name: str-startup-taint-remover-pods\n  namespace: gpu-operator\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the render lacks %q", want)
		}
	}
	if n := strings.Count(out, "\nkind: Role\n"); n != 2 {
		t.Errorf("%d Roles, want one per namespace:\n%s", n, out)
	}
	if n := strings.Count(out, "resources: [pods]"); n != 2 {
		t.Errorf("%d rules on pods, want the two Roles' only", n)
	}
	one, err := Template(chartDir, "str", "kube-system", nil, []string{"csi.socketDir=", "taints[0]=node.cilium.io/agent-not-ready",
		"requirePods[0]=kube-system/k8s-app=cilium"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(one, "- --require-pod=kube-system/k8s-app=cilium\n") || strings.Count(one, "\nkind: Role\n") != 1 {
		t.Errorf("one agent's requirePods: no flag or not one Role:\n%s", one)
	}
}

// A release in default (helm install without -n) leaves default out of the node agents'
// namespaces, where anyone's pods land; another release's namespace counts, beside kube-system.
func TestTheNodeAgentsNamespacesLeaveDefaultOut(t *testing.T) {
	for namespace, want := range map[string]string{"default": "kube-system", "storage": "kube-system,storage",
		"kube-system": "kube-system"} {
		out, err := Template(chartDir, "str", namespace, nil, []string{"nodeAgents=all"})
		if err != nil {
			t.Fatal(err)
		}
		if flag := "- --node-agent-namespaces=" + want + "\n"; !strings.Contains(out, flag) {
			t.Errorf("in %s: the render lacks %q", namespace, flag)
		}
	}
}

// The crash policy comes with every release on a Kubernetes that serves MutatingAdmissionPolicy
// v1 (1.36 on), bound to every Node, and never where the API server would refuse its kind, nor in
// conditions-only mode, which writes no taint.
func TestTheCrashPolicyComesWhereItIsServed(t *testing.T) {
	for _, tc := range []struct {
		kube string
		sets []string
		want bool
	}{
		{KubeVersion, nil, true},
		{"v1.36.0", nil, true},
		{"v1.35.4", nil, false},
		{"v1.33.13", nil, false},
		{KubeVersion, []string{"conditionsOnly=true", "conditionType=example.com/Ready"}, false},
	} {
		out, err := TemplateFor(tc.kube, chartDir, "str", "kube-system", nil, tc.sets)
		if err != nil {
			t.Fatalf("%s %v: %v", tc.kube, tc.sets, err)
		}
		has := strings.Contains(out, "\nkind: MutatingAdmissionPolicy\n") &&
			strings.Contains(out, "  name: str-startup-taint-remover-taint-after-crash\nspec:\n  failurePolicy: Ignore\n")
		bound := strings.Contains(out, "policyName: str-startup-taint-remover-taint-after-crash\n"+
			"  # The agent's DaemonSet: the policy adds a taint only on a Node it still selects.\n"+
			"  paramRef:\n    name: str-startup-taint-remover\n    namespace: kube-system\n")
		if has != tc.want || bound != tc.want {
			t.Errorf("%s %v: the policy rendered %v, bound %v; want %v", tc.kube, tc.sets, has, bound, tc.want)
		}
		if tc.want && (strings.Contains(out, `\\TAINTS`) || !strings.Contains(out, "ebs.csi.aws.com/agent-not-ready")) {
			t.Errorf("%s: the policy's taints are not written in", tc.kube)
		}
	}
}

// The toleration policies come, with the install's taints written in, wherever MutatingAdmissionPolicy
// v1 is served, conditions-only mode included (they touch pods, never a Node), unless
// tolerateStartupTaints is false.
func TestTheTolerationPoliciesComeWhereTheyAreServed(t *testing.T) {
	for _, tc := range []struct {
		kube string
		sets []string
		want bool
	}{
		{KubeVersion, nil, true},
		{"v1.36.0", nil, true},
		{"v1.35.4", nil, false},
		{KubeVersion, []string{"conditionsOnly=true", "conditionType=example.com/Ready"}, true},
		{KubeVersion, []string{"tolerateStartupTaints=false"}, false},
	} {
		out, err := TemplateFor(tc.kube, chartDir, "str", "kube-system", nil, tc.sets)
		if err != nil {
			t.Fatalf("%s %v: %v", tc.kube, tc.sets, err)
		}
		for _, kind := range []string{"pods", "daemonsets"} {
			name := "str-startup-taint-remover-tolerate-startup-taints-" + kind
			has := strings.Contains(out, "  name: "+name+"\nspec:\n  failurePolicy: Ignore\n")
			bound := strings.Contains(out, "  policyName: "+name+"\n")
			if has != tc.want || bound != tc.want {
				t.Errorf("%s %v: the %s policy rendered %v, bound %v; want %v", tc.kube, tc.sets, kind, has, bound, tc.want)
			}
		}
		if tc.want && !strings.Contains(out, "- expression: '''ebs.csi.aws.com/agent-not-ready'''\n    name: taintList\n") {
			t.Errorf("%s: the policies' taints are not written in", tc.kube)
		}
	}
}

func TestPackageWritesAVersionedArchivePointingAtTheReleasedImage(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tt := range []struct{ digest, image string }{
		{"", `image: "registry.example.com/str:v1.2.3"`},
		{digest, `image: "registry.example.com/str:v1.2.3@` + digest + `"`},
	} {
		path, err := Package(chartDir, "v1.2.3", "registry.example.com/str", tt.digest, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) != "startup-taint-remover-1.2.3.tgz" {
			t.Fatalf("package written to %s", path)
		}
		out, err := Template(path, "str", "kube-system", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, tt.image) {
			t.Fatalf("the packaged chart with digest %q does not run the released image, %s", tt.digest, tt.image)
		}
	}
	if _, err := Template(chartDir, "str", "kube-system", nil, []string{"image.digest=latest"}); err == nil ||
		!strings.Contains(err.Error(), "/image/digest") {
		t.Fatalf("a digest that is not sha256: was taken: %v", err)
	}
	if _, err := Package(chartDir, "latest", "", "", t.TempDir()); err == nil {
		t.Fatal("packaged with a version that is not semver")
	}
}

func TestTheCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, exitBadInput},
		{[]string{"render", chartDir}, exitBadInput},
		{[]string{"template", chartDir, "-nope"}, exitBadInput},
		{[]string{"package", chartDir}, exitBadInput},
		{[]string{"package", chartDir, "-version", "v1.2.3", "-digest", "v1.2.3"}, exitBadInput},
		{[]string{"lint", chartDir, "-set", "taints=null"}, exitFailure},
		{[]string{"lint", chartDir}, 0},
	} {
		if got := run(tt.args, io.Discard, io.Discard); got != tt.want {
			t.Errorf("chart %v: exit %d, want %d", tt.args, got, tt.want)
		}
	}
}
