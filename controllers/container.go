package controllers

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

// gateContainer names the container readiness gate in logs, events and metrics.
const gateContainer = "container"

// reasonNoContainer is the reason class of a Pod that has no status for the named container.
const reasonNoContainer = "no_container"

// containerGate passes while the named container of the agent's own Pod is ready: kubelet's
// readiness probe of the driver container, in the sidecar install. It serves agents whose
// readiness is an exec or HTTP probe that only kubelet runs. The manager caches only this one
// Pod, and a watch event of it triggers the reconcile.
type containerGate struct {
	pod       types.NamespacedName
	container string
}

func (g *containerGate) name() string { return gateContainer }

func (g *containerGate) check(ctx context.Context, reader client.Reader, _ *corev1.Node) *gateError {
	return g.ready(ctx, reader)
}

func (g *containerGate) cacheEntry() (client.Object, cache.ByObject) {
	return &corev1.Pod{}, cache.ByObject{Namespaces: map[string]cache.Config{
		g.pod.Namespace: {FieldSelector: fields.OneTermEqualSelector("metadata.name", g.pod.Name)},
	}}
}

func (g *containerGate) watch(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	thisPod := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == g.pod.Name && o.GetNamespace() == g.pod.Namespace
	})
	return &corev1.Pod{}, toNode, []predicate.Predicate{thisPod}
}

func (g *containerGate) restMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace
}

func (g *containerGate) ready(ctx context.Context, reader client.Reader) *gateError {
	pod := &corev1.Pod{}
	if err := reader.Get(ctx, g.pod, pod); err != nil {
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("pod %s not found: check POD_NAME and POD_NAMESPACE", g.pod)
		}
		return &gateError{gate: gateContainer, reason: reasonError, err: fmt.Errorf("reading pod %s: %w", g.pod, err)}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != g.container {
			continue
		}
		if !s.Ready {
			return &gateError{gate: gateContainer, reason: reasonNotReady,
				err: fmt.Errorf("container %s of pod %s is not ready: %w", g.container, g.pod, errNotReady)}
		}
		return nil
	}
	return &gateError{gate: gateContainer, reason: reasonNoContainer,
		err: fmt.Errorf("pod %s has no status for container %s yet", g.pod, g.container)}
}
