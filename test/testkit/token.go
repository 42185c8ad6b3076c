// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"context"
	"os"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodTokenExtra is what the API server puts beside the user of a service-account token bound to a
// pod on node (Kubernetes 1.32 and later): the node's name, its UID when the Node exists, and the
// pod's name. A pod's host name is its name, and the event recorder names its instance after the
// host name, so the pod here is named after this process's host; reader reads the Node as an
// admin.
func PodTokenExtra(ctx context.Context, reader client.Reader, node string) map[string][]string {
	extra := map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	n := &corev1.Node{}
	if reader != nil && reader.Get(ctx, client.ObjectKey{Name: node}, n) == nil {
		extra["authentication.kubernetes.io/node-uid"] = []string{string(n.UID)}
	}
	if host, err := os.Hostname(); err == nil {
		extra["authentication.kubernetes.io/pod-name"] = []string{host}
	}
	return extra
}
