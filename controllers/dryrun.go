// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The confinement check's dry runs: the agent's own removal, which the admission policy must
// admit, and a change beyond its Node, which it must refuse.

// CheckRemoval sends, in a dry run, the patch that removes the agent's startup taints from its
// Node, as the reconciler would send it, and returns the Node and the API server's refusal (nil
// when it admitted the patch). An error means no answer: the Node is not there yet, or the API
// server did not answer.
func (c *ConfinementCheck) CheckRemoval(ctx context.Context) (node *corev1.Node, refusal error, err error) {
	node = &corev1.Node{}
	if err := c.client().Get(ctx, client.ObjectKey{Name: c.nodeName()}, node); err != nil {
		return nil, nil, fmt.Errorf("reading node %s: %w", c.nodeName(), err)
	}
	orig := node.DeepCopy()
	if len(c.conditions()) > 0 {
		return c.checkCondition(ctx, orig)
	}
	// Once its taints are gone, the patch changes nothing, and the API server judges it all the
	// same: the policy checks its rendered settings on every request of the agent, so a policy
	// the agent cannot work with refuses this one too.
	if taints := c.taints(); taints != nil {
		removeTaints(node, taints())
	}
	err = writeTaints(ctx, c.client(), orig, node, client.DryRunAll)
	switch {
	case err == nil:
		return orig, nil, nil
	case refused(err):
		return orig, err, nil
	}
	return nil, nil, fmt.Errorf("dry-run removal of the startup taints from node %s: %w", c.nodeName(), err)
}

// checkCondition sends, in a dry run, the status patch by which the reconciler writes the first
// of c.conditions() once its gates pass, and returns the API server's refusal (nil when it admitted
// it).
func (c *ConfinementCheck) checkCondition(ctx context.Context, node *corev1.Node) (*corev1.Node, error, error) {
	want := condition(c.conditions()[0], nil, untolerated{})
	want = stamped(want, gates.FindCondition(node.Status.Conditions, want.Type), c.clock().Now())
	err := writeCondition(ctx, c.client(), node.DeepCopy(), want, client.DryRunAll)
	switch {
	case err == nil:
		return node, nil, nil
	case refused(err):
		return node, err, nil
	}
	return nil, nil, fmt.Errorf("dry-run write of condition %s of node %s: %w", want.Type, c.nodeName(), err)
}

// Check sends the dry-run request and classifies the answer: a label on its Node, or in
// conditions-only mode a condition that is not its own. An error means no verdict (the Node
// does not exist yet, or the API server did not answer); node is the Node when it was admitted.
func (c *ConfinementCheck) Check(ctx context.Context) (outcome string, node *corev1.Node, err error) {
	node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodeName()}}
	if c.belowMinimum() {
		return NotConfined, node, nil
	}
	if len(c.conditions()) > 0 {
		// In conditions-only mode the agent may write only its Node's status: a condition that
		// is not its own is the change the policy must refuse there.
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"Unknown"}]}}`, startuptaint.ConfinementProbeLabel)
		err = c.client().Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, []byte(patch)),
			client.DryRunAll, client.FieldOwner(startuptaint.FieldManager))
	} else {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"dry-run"}}}`, startuptaint.ConfinementProbeLabel)
		err = c.client().Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch)),
			client.DryRunAll, client.FieldOwner(startuptaint.FieldManager))
	}
	switch {
	case err == nil:
		return NotConfined, node, nil
	case apierrors.IsForbidden(err) && refusedByPolicy(err):
		return Confined, nil, nil
	case apierrors.IsForbidden(err):
		return CannotWrite, nil, nil
	}
	return "", nil, fmt.Errorf("dry-run labelling of node %s: %w", c.nodeName(), err)
}
