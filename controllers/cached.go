package controllers

import (
	"fmt"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// cachedKinds returns one gate of each kind of API object the groups' gates read (gates.Cached):
// the manager's cache entries, watches and REST mappings are collected from these, each kind
// once however many groups read it.
func (r *NodeReconciler) cachedKinds() []gates.Cached {
	seen := map[string]bool{}
	var out []gates.Cached
	for _, g := range r.Groups {
		for _, gate := range g.Gates {
			c, ok := gate.(gates.Cached)
			if !ok {
				continue
			}
			obj, _ := c.CacheEntry()
			if kind := fmt.Sprintf("%T", obj); !seen[kind] {
				seen[kind] = true
				out = append(out, c)
			}
		}
	}
	return out
}
