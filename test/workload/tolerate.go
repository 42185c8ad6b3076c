// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InstallTolerationPolicies creates config/components/tolerate-startup-taints' two
// MutatingAdmissionPolicies, their taints rendered as taints (the --taint string), and their
// bindings, as the install does, and returns what deletes them. The API server applies a new
// policy a moment after it is created: a caller waits for it.
func InstallTolerationPolicies(ctx context.Context, c client.Client, taints string) (func(context.Context) error, error) {
	var objs []client.Object
	remove := func(ctx context.Context) error {
		for i := len(objs) - 1; i >= 0; i-- {
			if err := client.IgnoreNotFound(c.Delete(ctx, objs[i])); err != nil {
				return err
			}
		}
		return nil
	}
	for _, kind := range []string{"pods", "daemonsets"} {
		policy, err := componentPolicy("tolerate-startup-taints", "policy-"+kind+".yaml", taints)
		if err != nil {
			return nil, err
		}
		binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: policy.ObjectMeta,
			Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy.Name}}
		for _, o := range []client.Object{policy, binding} {
			if err := c.Create(ctx, o); err != nil {
				return nil, fmt.Errorf("installing the toleration policies: %w (removing: %w)", err, remove(ctx))
			}
			objs = append(objs, o)
		}
	}
	return remove, nil
}
