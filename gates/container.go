// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ContainerName names the container readiness gate in logs, events and metrics.
const ContainerName = "container"

// ReasonNoContainer is the reason class of a Pod that has no status for the named container.
const ReasonNoContainer = "no_container"

// ContainerGate passes while the named container of the agent's own Pod is ready: kubelet's
// readiness probe of the driver container, in the sidecar install. It serves agents whose
// readiness is an exec or HTTP probe that only kubelet runs. The manager caches only this one
// Pod, and a watch event of it causes the reconcile.
type ContainerGate struct {
	node      string
	pod       types.NamespacedName
	container string
}

// NewContainerGate returns a gate for the container of that name in pod, the agent's own, on node.
func NewContainerGate(node string, pod types.NamespacedName, container string) *ContainerGate {
	return &ContainerGate{node: node, pod: pod, container: container}
}

// Name implements Gate.
func (g *ContainerGate) Name() string { return ContainerName }

// CacheEntry implements Cached: the one Pod. It is on this node, which the selector says too, so
// that merged with the pod gate's entry for the same namespace the cache still holds only this
// node's pods.
func (g *ContainerGate) CacheEntry() (client.Object, cache.ByObject) {
	return &corev1.Pod{}, cache.ByObject{Namespaces: map[string]cache.Config{
		g.pod.Namespace: {FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("metadata.name", g.pod.Name),
			fields.OneTermEqualSelector("spec.nodeName", g.node))},
	}}
}

// Watches implements Cached.
func (g *ContainerGate) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	thisPod := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == g.pod.Name && o.GetNamespace() == g.pod.Namespace
	})
	return &corev1.Pod{}, toNode, []predicate.Predicate{thisPod}
}

// RESTMapping implements Cached.
func (g *ContainerGate) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace
}

// Check implements Gate.
func (g *ContainerGate) Check(ctx context.Context, in Input) error {
	pod := &corev1.Pod{}
	if err := in.Reader.Get(ctx, g.pod, pod); err != nil {
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("pod %s not found: check POD_NAME and POD_NAMESPACE", g.pod)
		}
		return fmt.Errorf("reading pod %s: %w", g.pod, err)
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != g.container {
			continue
		}
		if !s.Ready {
			return NotReady(ReasonNotReady, fmt.Errorf("container %s of pod %s is not ready", g.container, g.pod))
		}
		return nil
	}
	return NotReady(ReasonNoContainer, fmt.Errorf("pod %s has no status for container %s yet", g.pod, g.container))
}
