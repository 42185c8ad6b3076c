// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The gates' tests' shared fixtures.

// startupKey is the startup taint of the node agents' tests.
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

// nodeAgentsClient is a fake client holding objs, that lists pods by spec.nodeName as the API
// server does: the node agents' gate looks for the pods the scheduler has not placed yet.
func nodeAgentsClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
}

// registryDir is an empty plugins registry of the test's, under a short path: a unix socket's path
// must fit in 108 bytes, which t.TempDir's may not.
func registryDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "str-reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// hostPath is a volume of the host's path.
func hostPath(name, path string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
}

// named is a gate of a driver's own, known only by its name.
type named string

func (n named) Name() string                       { return string(n) }
func (n named) Check(context.Context, Input) error { return nil }

// namer is a DriverNamer that has learnt name.
type namer string

func (n namer) DriverName() string { return string(n) }

// rewritten is a Reregistration: whether kubelet wrote the driver into CSINode again.
type rewritten bool

func (r rewritten) RegisteredAgain() bool { return bool(r) }
