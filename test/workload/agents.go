// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"context"
	"fmt"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AgentReady is the readiness gate of the node agents' pods that Agent gates: such a pod is Ready
// only once SetAgentReady has set it, as a real agent turns Ready once its readiness probe passes.
const AgentReady corev1.PodConditionType = "startup-taint-remover.github.io/agent-ready"

// Agent is the DaemonSet of a node agent in namespace: a pod on every node, that tolerates
// tolerate (nothing when it is nil), is Ready only once SetAgentReady says so when gated, and
// mounts each of hostPaths from the host. The DaemonSet controller runs it on hollow nodes.
func Agent(namespace, name string, tolerate *corev1.Taint, gated bool, hostPaths ...string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "example.com/" + name}}}}}}
	spec := &ds.Spec.Template.Spec
	if tolerate != nil {
		spec.Tolerations = []corev1.Toleration{{Key: tolerate.Key, Operator: corev1.TolerationOpExists, Effect: tolerate.Effect}}
	}
	if gated {
		spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: AgentReady}}
	}
	for i, path := range hostPaths {
		name := fmt.Sprintf("host-%d", i)
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
	}
	return ds
}

// CSIAgent is Agent for driver's node plugin with its node-driver-registrar, ungated: the host
// paths a CSI driver's DaemonSet mounts, kubelet's plugins registry and the driver's plugin
// directory (see DriverSocket).
func CSIAgent(namespace, name, driver string, tolerate *corev1.Taint) *appsv1.DaemonSet {
	return Agent(namespace, name, tolerate, false, "/var/lib/kubelet/plugins_registry/", "/var/lib/kubelet/plugins/"+driver+"/")
}

// DriverSocket is where driver's socket is under a kubelet's root directory, in the plugin
// directory CSIAgent mounts.
func DriverSocket(kubeletRoot, driver string) string {
	return filepath.Join(kubeletRoot, "plugins", driver, "csi.sock")
}

// AgentPod returns ds's pod on node, or an error while there is none.
func AgentPod(ctx context.Context, c client.Reader, ds *appsv1.DaemonSet, node string) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ds.Namespace), client.MatchingLabels(ds.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == node {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no pod of DaemonSet %s/%s on node %s yet", ds.Namespace, ds.Name, node)
}

// SetAgentReady sets the AgentReady gate of ds's pod on node, so that kubelet reports it Ready.
func SetAgentReady(ctx context.Context, c client.Client, ds *appsv1.DaemonSet, node string) error {
	pod, err := AgentPod(ctx, c, ds, node)
	if err != nil {
		return err
	}
	orig := pod.DeepCopy()
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: AgentReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.Now()})
	// A strategic merge adds the one condition, whatever kubelet writes meanwhile.
	return c.Status().Patch(ctx, pod, client.StrategicMergeFrom(orig))
}

// Deployment is what a node agent needs before it turns Ready, as calico-node needs its Typha: one
// replica in namespace, with no toleration of its own.
func Deployment(namespace, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "example.com/" + name}}}}}}
}

// RunningOn returns the nodes where a pod of d runs.
func RunningOn(ctx context.Context, c client.Reader, d *appsv1.Deployment) ([]string, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	var nodes []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	return nodes, nil
}
