// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Which pod a plugin that kubelet's plugins registry lists belongs to, by the host paths the pods
// mount: the node agents' gate waits for the registrar of a pod that registers with kubelet.

// mountsRegistry reports whether pod mounts kubelet's plugins registry from the host so that it
// can write there: it registers a plugin with kubelet, as node-driver-registrar does, which must
// create its socket. A read-only mount only reads the registry (this agent's own installs do).
func mountsRegistry(pod *corev1.Pod) bool {
	_, ok := registryMount(pod)
	return ok
}

// registryMount returns kubelet's root directory as pod sees the host: the directory that holds
// the plugins registry it mounts.
func registryMount(pod *corev1.Pod) (string, bool) {
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && filepath.Base(filepath.Clean(v.HostPath.Path)) == registryDirName && writes(pod, v.Name) {
			return filepath.Dir(filepath.Clean(v.HostPath.Path)), true
		}
	}
	return "", false
}

// writes reports whether a container of pod mounts the volume named volume read-write.
func writes(pod *corev1.Pod, volume string) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume && !m.ReadOnly })
	})
}

// owns reports whether plugin p is pod's: of the pods among pods that mount kubelet's plugins
// registry, pod has the host path that holds p's endpoint most closely. Paths under kubelet's root
// compare relative to it, as pod's root and the agent's may differ (a distribution's, a test's).
func (g *NodeAgentsGate) owns(pod *corev1.Pod, p Plugin, pods []corev1.Pod) bool {
	endpoint := relativeTo(g.registry.Root(), p.Endpoint)
	best, mine := -1, -1
	for i := range pods {
		depth := holds(&pods[i], endpoint)
		if pods[i].UID == pod.UID && pods[i].Namespace == pod.Namespace && pods[i].Name == pod.Name {
			mine = depth
		}
		best = max(best, depth)
	}
	return mine >= 0 && mine == best
}

// holds returns how deep the deepest of pod's host paths that holds endpoint is, relative to
// kubelet's root as pod sees it, or -1 when none does or pod does not mount the registry.
func holds(pod *corev1.Pod, endpoint string) int {
	root, ok := registryMount(pod)
	if !ok {
		return -1
	}
	best := -1
	for _, v := range pod.Spec.Volumes {
		if v.HostPath == nil || filepath.Base(filepath.Clean(v.HostPath.Path)) == registryDirName {
			continue
		}
		dir := relativeTo(root, v.HostPath.Path)
		if dir != "." && endpoint != dir && !strings.HasPrefix(endpoint, dir+"/") {
			continue
		}
		depth := 0
		if dir != "." {
			depth = strings.Count(strings.Trim(dir, "/"), "/") + 1
		}
		best = max(best, depth)
	}
	return best
}

// relativeTo returns path relative to root when it is under root, and path, cleaned, otherwise.
func relativeTo(root, path string) string {
	path = filepath.Clean(path)
	if rel, err := filepath.Rel(root, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return rel
	}
	return path
}
