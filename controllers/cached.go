// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// cachedGates returns the groups' gates that read API objects (gates.Cached): the manager's cache
// entries, watches and REST mappings are collected from these instead of listed by kind.
func (r *NodeReconciler) cachedGates() []gates.Cached {
	var out []gates.Cached
	for _, g := range r.Groups {
		for _, gate := range g.Gates {
			if c, ok := gate.(gates.Cached); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// cacheEntries returns one cache entry per kind the gates read, each gate's entry for a kind
// merged with the others' (gates.MergeCacheEntries), however many groups read it.
func (r *NodeReconciler) cacheEntries() map[client.Object]cache.ByObject {
	objects, entries := map[string]client.Object{}, map[string]cache.ByObject{}
	for _, c := range r.cachedGates() {
		obj, entry := c.CacheEntry()
		kind := fmt.Sprintf("%T", obj)
		if have, ok := entries[kind]; ok {
			entry = gates.MergeCacheEntries(have, entry)
		} else {
			objects[kind] = obj
		}
		entries[kind] = entry
	}
	out := make(map[client.Object]cache.ByObject, len(entries))
	for kind, entry := range entries {
		out[objects[kind]] = entry
	}
	return out
}
