// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The agent's two writes to its Node, each built here once: the reconciler sends them, and the
// confinement check sends the same bytes as a dry run, so the check asks about exactly what the
// agent does.

// writeTaints sends node's taints, changed from orig, as a merge patch locked to orig's
// resourceVersion: a merge patch replaces the whole list, and the lock makes it fail instead of
// dropping a taint another writer added since orig was read.
func writeTaints(ctx context.Context, c client.Client, orig, node *corev1.Node, opts ...client.PatchOption) error {
	return c.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		append([]client.PatchOption{client.FieldOwner(startuptaint.FieldManager)}, opts...)...)
}

// writeCondition sends want into node's status as a strategic merge patch that carries only
// want: conditions merge by type, so it cannot undo a concurrent write of kubelet's own
// conditions, and needs no resourceVersion lock.
func writeCondition(ctx context.Context, c client.Client, node *corev1.Node, want corev1.NodeCondition,
	opts ...client.SubResourcePatchOption) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{want}}})
	if err != nil {
		return fmt.Errorf("encoding condition %s: %w", want.Type, err)
	}
	return c.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch),
		append([]client.SubResourcePatchOption{client.FieldOwner(startuptaint.FieldManager)}, opts...)...)
}
