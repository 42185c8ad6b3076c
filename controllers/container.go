package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gateContainer names the container readiness gate in logs, events and metrics.
const gateContainer = "container"

// reasonNoContainer is the reason class of a Pod that has no status for the named container.
const reasonNoContainer = "no_container"

// containerGate passes while the named container of the agent's own Pod is ready: kubelet's
// readiness probe of the driver container, in the sidecar install. It serves agents whose
// readiness is an exec or HTTP probe that only kubelet runs. It reads the manager's cache, which
// holds only this one Pod (see NodeReconciler.CacheOptions), and a Pod watch event triggers the reconcile.
type containerGate struct {
	reader    client.Reader
	pod       types.NamespacedName
	container string

	log gateLog
}

// check returns why the gate of group does not pass, or nil.
func (g *containerGate) check(ctx context.Context, group string) *gateError {
	return g.log.report(ctx, group, gateContainer, g.ready(ctx))
}

func (g *containerGate) ready(ctx context.Context) *gateError {
	pod := &corev1.Pod{}
	if err := g.reader.Get(ctx, g.pod, pod); err != nil {
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
