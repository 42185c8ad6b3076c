// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

const startupKey = "example.com/agent-not-ready"

// daemonSet is a DaemonSet in kube-system whose pods tolerate the startup taint, changed by opts.
func daemonSet(name string, opts ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID("uid-" + name)}}
	ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: startupKey, Operator: corev1.TolerationOpExists}}
	for _, o := range opts {
		o(ds)
	}
	return ds
}

// daemonPodOn is ds's pod on node, Ready or not, with the template's volumes.
func daemonPodOn(ds *appsv1.DaemonSet, node string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-x", Namespace: ds.Namespace, UID: types.UID("pod-" + ds.Name),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Spec: *ds.Spec.Template.Spec.DeepCopy()}
	p.Spec.NodeName = node
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func hostPath(name, path string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
}

func TestTheNodeAgentsGateWaitsForEveryDaemonSetThatShouldRunHereAndToleratesTheStartupTaint(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "pool": "a"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup,
			// kubelet's until the node is Ready: every daemon pod tolerates it.
			{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}}}
	gpuNode := node.DeepCopy()
	gpuNode.Spec.Taints = append(gpuNode.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	notReady := node.DeepCopy()
	notReady.Spec.Taints = append(notReady.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule})
	released := node.DeepCopy()
	released.Spec.Taints = released.Spec.Taints[1:]
	withoutToleration := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Tolerations = nil }
	selecting := func(k, v string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{k: v} }
	}
	affinity := func(op corev1.NodeSelectorOperator, values ...string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: op, Values: values}}}}}}}
		}
	}
	tolerating := func(tol corev1.Toleration) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, tol)
		}
	}
	labelled := func(v string) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) { ds.Labels = map[string]string{NodeAgentLabel: v} }
	}
	cni := daemonSet("cni")
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		choose NodeAgents
		self   string // the agent's own pod's DaemonSet
		// anyEffect configures the startup taint without an effect, as --taint=KEY does.
		anyEffect bool
		objects   []client.Object
		want      string // reason class; "" passes
		names     []string
	}{
		{name: "no DaemonSets", want: ""},
		{name: "a node agent the DaemonSet controller has not made a pod of here yet", objects: []client.Object{cni},
			want: ReasonNoDaemonPod, names: []string{"kube-system/cni"}},
		{name: "its pod not Ready", objects: []client.Object{cni, daemonPodOn(cni, "n1", false)},
			want: ReasonDaemonPodNotReady, names: []string{"kube-system/cni"}},
		{name: "its pod Ready", objects: []client.Object{cni, daemonPodOn(cni, "n1", true)}},
		{name: "its pod Ready on another node only", objects: []client.Object{cni, daemonPodOn(cni, "n2", true)},
			want: ReasonNoDaemonPod},
		{name: "a DaemonSet that does not tolerate the startup taint cannot be waited for",
			objects: []client.Object{daemonSet("app", withoutToleration)}},
		{name: "tolerating every taint", want: ReasonNoDaemonPod,
			objects: []client.Object{daemonSet("all", withoutToleration, tolerating(corev1.Toleration{Operator: corev1.TolerationOpExists}))}},
		{name: "tolerating another effect only", objects: []client.Object{daemonSet("other", withoutToleration,
			tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}))}},
		{name: "configured without an effect: tolerating the effect the taint has on the node", anyEffect: true, want: ReasonNoDaemonPod,
			objects: []client.Object{daemonSet("ns", withoutToleration,
				tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}))}},
		{name: "configured without an effect: tolerating another effect than the node's", anyEffect: true,
			objects: []client.Object{daemonSet("ne", withoutToleration,
				tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}))}},
		{name: "configured without an effect, the taint gone: tolerating either effect", anyEffect: true, node: released, want: ReasonNoDaemonPod,
			objects: []client.Object{daemonSet("ne", withoutToleration,
				tolerating(corev1.Toleration{Key: startupKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}))}},
		{name: "a node selector of other nodes", objects: []client.Object{daemonSet("win", selecting("kubernetes.io/os", "windows"))}},
		{name: "a node selector of this node", objects: []client.Object{daemonSet("linux", selecting("kubernetes.io/os", "linux"))},
			want: ReasonNoDaemonPod},
		{name: "a required node affinity of other nodes", objects: []client.Object{daemonSet("b", affinity(corev1.NodeSelectorOpIn, "b"))}},
		{name: "a required node affinity of this node", objects: []client.Object{daemonSet("a", affinity(corev1.NodeSelectorOpIn, "a", "c"))},
			want: ReasonNoDaemonPod},
		{name: "another taint it does not tolerate", node: gpuNode, objects: []client.Object{cni}},
		{name: "another taint it tolerates", node: gpuNode, want: ReasonNoDaemonPod, objects: []client.Object{daemonSet("gpu",
			tolerating(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu"}))}},
		{name: "not Ready yet, before the DaemonSet controller makes pods of those that do not tolerate that", want: ReasonNoDaemonPod,
			node: notReady, objects: []client.Object{cni}},
		{name: "a template for another node", objects: []client.Object{daemonSet("pinned", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.NodeName = "n2"
		})}},
		{name: "labelled out", objects: []client.Object{daemonSet("noisy", labelled("false"))}},
		{name: "labelled in, when only those labelled count", choose: NodeAgentsLabelled,
			objects: []client.Object{cni, daemonSet("csi", labelled("true"))}, want: ReasonNoDaemonPod, names: []string{"kube-system/csi"}},
		{name: "the agent's own DaemonSet", self: "agent", objects: []client.Object{daemonSet("agent"), daemonPodOn(daemonSet("agent"), "n1", false)}},
		{name: "several, each named under its reason", objects: []client.Object{cni, daemonSet("logs"), daemonSet("dns"),
			daemonPodOn(daemonSet("dns"), "n1", false)}, want: ReasonNoDaemonPod, names: []string{"kube-system/cni", "kube-system/logs", "kube-system/dns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(tc.objects...).Build()
			n := tc.node
			if n == nil {
				n = node
			}
			configured := startup
			if tc.anyEffect {
				configured.Effect = ""
			}
			o := NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{configured}, Choose: tc.choose,
				Clock: clocktesting.NewFakePassiveClock(time.Now())}
			if tc.self != "" {
				o.Self = types.NamespacedName{Namespace: "kube-system", Name: tc.self + "-x"}
			}
			err := NewNodeAgentsGate(o).Check(context.Background(), Input{Node: n, Reader: c, Lister: c})
			got := ""
			if err != nil {
				got = Reason(err)
			}
			if got != tc.want {
				t.Fatalf("reason %q, want %q (%v)", got, tc.want, err)
			}
			for _, name := range tc.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("%q does not name %s", err, name)
				}
			}
		})
	}
}

// A DaemonSet created after the gate listed them counts as soon as its pod shows here, or at
// the latest when the gate is about to pass: never after the taint went.
func TestTheNodeAgentsGateCountsADaemonSetAddedWhileTheNodeWaits(t *testing.T) {
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	cni := daemonSet("cni")
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cni).Build()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup}, Clock: clk})
	ctx := context.Background()
	check := func() string {
		err := g.Check(ctx, Input{Node: node, Reader: c, Lister: c})
		if err == nil {
			return ""
		}
		return err.Error()
	}
	if got := check(); !strings.Contains(got, "kube-system/cni") {
		t.Fatalf("first check: %q", got)
	}
	logs := daemonSet("logs")
	for _, o := range []client.Object{logs, daemonPodOn(cni, "n1", true)} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The list is fresh, but passing asks for a list of now once it is older than a second.
	clk.SetTime(clk.Now().Add(confirmAfter + time.Millisecond))
	if got := check(); !strings.Contains(got, "kube-system/logs") {
		t.Fatalf("after a DaemonSet was added: %q, want it named", got)
	}
	dns := daemonSet("dns")
	if err := c.Create(ctx, dns); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, daemonPodOn(dns, "n1", false)); err != nil {
		t.Fatal(err)
	}
	// A pod of a DaemonSet the list lacks lists again, however fresh the list.
	if got := check(); !strings.Contains(got, "kube-system/dns") {
		t.Fatalf("after a pod of a new DaemonSet showed: %q, want it named", got)
	}
}

// A pod that mounts kubelet's plugins registry registers a plugin: it counts once a registration
// server there serves a plugin whose endpoint is in its host paths, read relative to kubelet's
// root, which differs between the pod's view (/var/lib/kubelet) and the agent's (a test's).
func TestTheNodeAgentsGateWaitsForTheRegistrarOfAPodThatRegistersWithKubelet(t *testing.T) {
	root, err := os.MkdirTemp("", "str-root")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	registry := filepath.Join(root, "plugins_registry")
	if err := os.MkdirAll(registry, 0o755); err != nil {
		t.Fatal(err)
	}
	startup := corev1.Taint{Key: startupKey, Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup}}}
	csiDriver := func(name, driver string, readOnly bool) *appsv1.DaemonSet {
		return daemonSet(name, func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Volumes = []corev1.Volume{hostPath("registration-dir", "/var/lib/kubelet/plugins_registry/"),
				hostPath("kubelet-dir", "/var/lib/kubelet"), hostPath("plugin-dir", "/var/lib/kubelet/plugins/"+driver+"/")}
			ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "node", Image: "driver"}, {Name: "registrar", Image: "registrar",
				VolumeMounts: []corev1.VolumeMount{{Name: "registration-dir", MountPath: "/registration", ReadOnly: readOnly}}}}
		})
	}
	ebs, efs := csiDriver("ebs", "ebs.csi.aws.com", false), csiDriver("efs", "efs.csi.aws.com", false)
	// Another agent that reads the registry (this agent's own installs): no registrar.
	reader := csiDriver("reader", "reader.example.com", true)
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ebs, efs, reader, daemonPodOn(ebs, "n1", true), daemonPodOn(efs, "n1", true),
		daemonPodOn(reader, "n1", true)).Build()
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup},
		Registry: NewPluginRegistry(registry), Clock: clocktesting.NewFakePassiveClock(time.Now())})
	check := func() error { return g.Check(context.Background(), Input{Node: node, Reader: c, Lister: c}) }

	err = check()
	if Reason(err) != ReasonRegistrarNotServing || !strings.Contains(err.Error(), "kube-system/ebs, kube-system/efs") ||
		strings.Contains(err.Error(), "kube-system/reader") {
		t.Fatalf("before any registrar: %v, want EBS and EFS named, not the reader", err)
	}
	if err := fakecsi.LeaveStaleRegistration(registry, "ebs.csi.aws.com"); err != nil {
		t.Fatal(err)
	}
	if err = check(); Reason(err) != ReasonRegistrarNotServing {
		t.Fatalf("with the boot before's socket, which serves nothing: %v", err)
	}
	r, err := fakecsi.Register(registry, "ebs.csi.aws.com", filepath.Join(root, "plugins/ebs.csi.aws.com/csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Unregister)
	// EBS's endpoint is in both pods' kubelet-dir, but in EBS's plugin-dir, which holds it closer.
	if err = check(); Reason(err) != ReasonRegistrarNotServing || strings.Contains(err.Error(), "kube-system/ebs") ||
		!strings.Contains(err.Error(), "kube-system/efs") {
		t.Fatalf("with EBS's registrar serving: %v, want EFS only named", err)
	}
	r2, err := fakecsi.Register(registry, "efs.csi.aws.com", "unix://"+filepath.Join(root, "plugins/efs.csi.aws.com/csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Unregister)
	if err = check(); err != nil {
		t.Fatalf("with both registrars serving: %v", err)
	}
	r.Unregister()
	if err = check(); Reason(err) != ReasonRegistrarNotServing || !strings.Contains(err.Error(), "kube-system/ebs") {
		t.Fatalf("after EBS's registrar stopped: %v", err)
	}
}
