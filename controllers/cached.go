package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// cachedGate is a gate that reads API objects, from the manager's cache or the Node the reconcile
// already holds: the reconciler checks it at each reconcile, where a prober probes a Gate on an
// interval. What else such a gate needs, it declares through the optional interfaces below, and
// the reconciler collects those from its gates instead of listing kinds.
type cachedGate interface {
	// name is the gate's short name in logs, events and metrics.
	name() string
	// check returns why the gate does not pass for node, reading through reader, or nil.
	check(ctx context.Context, reader client.Reader, node *corev1.Node) *gateError
}

// watchedKind is implemented by cached gates that read objects other than the Node: what the
// manager caches for them (as little as they read), the watch that triggers a reconcile when one
// changes, and the kind's REST mapping, so the manager needs no API discovery.
type watchedKind interface {
	cacheEntry() (client.Object, cache.ByObject)
	// watch returns the watched object's type, the handler, given one that enqueues this node's
	// request, and the predicates that keep other objects out.
	watch(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate)
	restMapping() (schema.GroupVersionKind, meta.RESTScope)
}

// nodeReader is implemented by cached gates that read the Node itself: an update of the Node that
// changes what they read causes a reconcile, as kubelet's other status updates do not.
type nodeReader interface {
	nodeChanged(oldNode, newNode *corev1.Node) bool
}

// cachedCheck is a cached gate at work in a group, with the log of its verdicts.
type cachedCheck struct {
	gate cachedGate
	log  gateLog
}

// watchedKinds returns one gate of each kind the configured groups' cached gates watch.
func (r *NodeReconciler) watchedKinds() []watchedKind {
	seen := map[string]bool{}
	var out []watchedKind
	for _, cfg := range r.configuredGroups() {
		for _, gate := range r.cachedGates(cfg) {
			w, ok := gate.(watchedKind)
			if !ok {
				continue
			}
			obj, _ := w.cacheEntry()
			if kind := fmt.Sprintf("%T", obj); !seen[kind] {
				seen[kind] = true
				out = append(out, w)
			}
		}
	}
	return out
}
