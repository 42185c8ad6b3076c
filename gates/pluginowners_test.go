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
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

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
	c := nodeAgentsClient(ebs, efs, reader, daemonPodOn(ebs, "n1", true), daemonPodOn(efs, "n1", true),
		daemonPodOn(reader, "n1", true))
	g := NewNodeAgentsGate(NodeAgentsOptions{Node: "n1", Startup: []corev1.Taint{startup},
		Registry: NewPluginRegistry(registry), Clock: clocktesting.NewFakePassiveClock(time.Now())})
	check := func() error { return g.Check(context.Background(), Input{Node: node, Reader: c, APIReader: c}) }

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
