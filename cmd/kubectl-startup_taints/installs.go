// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// markerGroup and markerResource are the grant by which the admission policy knows an install's
// agent: its ClusterRole may "remove" startuptaints named after the install's taints
// (config/components/taints writes them in). The plugin finds installs the same way.
const (
	markerGroup    = "startup-taint-remover.github.io"
	markerResource = "startuptaints"
)

// install is one install of the agent, as its ClusterRole names it.
type install struct {
	// name is the ClusterRole's.
	name string
	// specs are its startup taints, every group's, and the taints continuous mode puts back.
	specs []startuptaint.TaintSpec
	// retaint marks the specs only continuous mode puts on: a group's first key, NoSchedule, where
	// the group's own specs do not select it.
	retaint map[startuptaint.TaintSpec]bool
}

// findInstalls lists the ClusterRoles, a page at a time, and returns the installs they mark.
func findInstalls(ctx context.Context, c kubernetes.Interface, chunk int64) ([]install, error) {
	var out []install
	opts := metav1.ListOptions{Limit: chunk}
	for {
		list, err := c.RbacV1().ClusterRoles().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing ClusterRoles to find the installs of the startup-taint-remover: %w", err)
		}
		for i := range list.Items {
			if in, ok := installOf(&list.Items[i]); ok {
				out = append(out, in)
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	slices.SortFunc(out, func(a, b install) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// installOf reads the install a ClusterRole marks: its startuptaints grant names the taint list,
// KEY[:EFFECT] comma-separated, with a semicolon between groups.
func installOf(role *rbacv1.ClusterRole) (install, bool) {
	for _, rule := range role.Rules {
		if !slices.Contains(rule.APIGroups, markerGroup) || !slices.Contains(rule.Resources, markerResource) {
			continue
		}
		in := install{name: role.Name, retaint: map[startuptaint.TaintSpec]bool{}}
		for _, list := range rule.ResourceNames {
			for _, group := range strings.Split(list, ";") {
				var specs []startuptaint.TaintSpec
				for _, item := range strings.Split(group, ",") {
					if spec, err := startuptaint.ParseTaintSpec(strings.TrimSpace(item)); err == nil {
						specs = append(specs, spec)
					}
				}
				if len(specs) == 0 {
					continue
				}
				in.specs = append(in.specs, specs...)
				back := startuptaint.RetaintSpec(specs)
				if len(startuptaint.MatchingTaints([]corev1.Taint{{Key: back.Key, Effect: back.Effect}}, specs)) == 0 {
					in.specs = append(in.specs, back)
					in.retaint[back] = true
				}
			}
		}
		return in, len(in.specs) > 0
	}
	return install{}, false
}
