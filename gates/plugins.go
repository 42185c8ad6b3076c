// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/startup-taint-remover/startup-taint-remover/internal/csi"
)

// PluginsName names the gate on the plugins in kubelet's plugins registry in logs, events and
// metrics.
const PluginsName = "plugins"

// The plugin types kubelet's plugin watcher registers (pluginregistration/v1).
const (
	CSIPluginType    = "CSIPlugin"
	DevicePluginType = "DevicePlugin"
	DRAPluginType    = "DRAPlugin"
)

// registryDirName is the name kubelet gives its plugins registry under its root directory,
// whatever the root (/var/lib/kubelet, or a distribution's own).
const registryDirName = "plugins_registry"

// getInfoTimeout bounds a whole look at the registry, every socket in it asked at once: a
// registration server answers at once, and sockets that accept and never answer cost it once, not
// once each.
const getInfoTimeout = time.Second

// maxAsked bounds the sockets asked at once; the registry holds a few, one per plugin, and a
// socket left over waits for a slot within the same bound.
const maxAsked = 16

// A socket whose GetInfo failed is asked again only after a backoff, from firstRetry doubling to
// maxRetry, so that one that accepts and never answers costs getInfoTimeout that often, not at every
// check; a registrar that bound its socket before it serves is still seen within maxRetry.
const (
	firstRetry = time.Second
	maxRetry   = 30 * time.Second
)

// Plugin is a plugin whose registration server in kubelet's plugins registry serves now.
type Plugin struct {
	csi.PluginInfo
	// Socket is the registration server's socket.
	Socket string
}

// String names the plugin as messages do: "CSI driver NAME", "device plugin NAME".
func (p Plugin) String() string {
	switch p.Type {
	case CSIPluginType:
		return "CSI driver " + p.Name
	case DevicePluginType:
		return "device plugin " + p.Name
	case DRAPluginType:
		return "DRA driver " + p.Name
	}
	return p.Type + " " + p.Name
}

// PluginRegistry reads kubelet's plugins registry as kubelet's plugin watcher does: each socket
// in it is a plugin's registration server, which GetInfo asks for the plugin's type, name and
// endpoint. It asks each socket once, and again only when the socket is bound anew; a socket
// that refuses connections is one a crash left behind, and serves no plugin. A socket that does
// not answer is asked again on a backoff (firstRetry to maxRetry).
type PluginRegistry struct {
	dir   string
	clock clock.PassiveClock

	mu    sync.Mutex
	known map[string]knownSocket // by socket path
}

type knownSocket struct {
	bound time.Time // the socket's modification time: when its server bound it
	info  csi.PluginInfo
	// For a socket whose GetInfo failed: when to ask it again, and the backoff after that.
	retryAt time.Time
	backoff time.Duration
}

// NewPluginRegistry returns a reader of the plugins registry dir, as the agent sees it.
func NewPluginRegistry(dir string) *PluginRegistry {
	return &PluginRegistry{dir: filepath.Clean(dir), clock: clock.RealClock{}, known: map[string]knownSocket{}}
}

// Root is kubelet's root directory, which holds the registry: plugins' endpoints are read
// relative to it, so that a pod's host paths and the agent's view of them compare.
func (r *PluginRegistry) Root() string { return filepath.Dir(r.dir) }

// Serving returns the plugins whose registration servers answer now, in the order of their
// sockets' names, asking the sockets side by side within getInfoTimeout in all. A registry that
// does not exist has none.
func (r *PluginRegistry) Serving(ctx context.Context) ([]Plugin, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading kubelet's plugins registry: %w", err)
	}
	var paths []string
	seen := map[string]bool{}
	for _, e := range entries {
		if e.Type()&fs.ModeSocket != 0 {
			path := filepath.Join(r.dir, e.Name())
			paths = append(paths, path)
			seen[path] = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	defer cancel()
	found := make([]*csi.PluginInfo, len(paths))
	slots := make(chan struct{}, maxAsked)
	var wg sync.WaitGroup
	for i, path := range paths {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if info, ok := r.serving(ctx, path); ok {
				found[i] = &info
			}
		})
	}
	wg.Wait()
	var out []Plugin
	for i, info := range found {
		if info != nil {
			out = append(out, Plugin{PluginInfo: *info, Socket: paths[i]})
		}
	}
	r.mu.Lock()
	for path := range r.known {
		if !seen[path] {
			delete(r.known, path)
		}
	}
	r.mu.Unlock()
	return out, nil
}

// serving returns what the registration server on path registers, when it answers. Once ctx is
// done, a socket is not asked, and not held to have failed.
func (r *PluginRegistry) serving(ctx context.Context, path string) (csi.PluginInfo, bool) {
	if ctx.Err() != nil {
		return csi.PluginInfo{}, false
	}
	st, err := os.Stat(path)
	if err != nil {
		return csi.PluginInfo{}, false
	}
	r.mu.Lock()
	k, ok := r.known[path]
	r.mu.Unlock()
	sameBind := ok && k.bound.Equal(st.ModTime())
	if sameBind && k.backoff > 0 && r.clock.Now().Before(k.retryAt) {
		return csi.PluginInfo{}, false // failed, and not due again yet
	}
	if sameBind && k.backoff == 0 {
		// Known: only whether it still serves can have changed.
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return csi.PluginInfo{}, false
		}
		_ = conn.Close()
		return k.info, true
	}
	c := csi.NewIdentityClient(path)
	defer c.Close()
	info, err := c.GetInfo(ctx)
	if err != nil || info.Name == "" {
		backoff := firstRetry
		if sameBind {
			backoff = min(2*k.backoff, maxRetry)
		}
		r.mu.Lock()
		r.known[path] = knownSocket{bound: st.ModTime(), retryAt: r.clock.Now().Add(backoff), backoff: backoff}
		r.mu.Unlock()
		return csi.PluginInfo{}, false
	}
	r.mu.Lock()
	r.known[path] = knownSocket{bound: st.ModTime(), info: info}
	r.mu.Unlock()
	return info, true
}

// PluginsGate passes while kubelet has registered every plugin whose registration server serves
// in its plugins registry: a CSI driver is listed in this node's CSINode, a device plugin's
// resource is in the Node's allocatable. A DRA driver passes once it serves; its ResourceSlices
// are the ResourceSlice gate's. It reads this node's CSINode from the manager's cache, and a
// CSINode watch event, or a change of the Node's allocatable, causes the reconcile.
type PluginsGate struct {
	node     string
	registry *PluginRegistry
}

// NewPluginsGate returns a gate on the plugins registry registers on node.
func NewPluginsGate(node string, registry *PluginRegistry) *PluginsGate {
	return &PluginsGate{node: node, registry: registry}
}

// Name implements Gate.
func (g *PluginsGate) Name() string { return PluginsName }

// CacheEntry implements Cached: this node's CSINode only, as the CSINode gate's.
func (g *PluginsGate) CacheEntry() (client.Object, cache.ByObject) {
	return &storagev1.CSINode{}, cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", g.node)}
}

// Watches implements Cached.
func (g *PluginsGate) Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate) {
	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == g.node })
	return &storagev1.CSINode{}, toNode, []predicate.Predicate{thisNode}
}

// RESTMapping implements Cached.
func (g *PluginsGate) RESTMapping() (schema.GroupVersionKind, meta.RESTScope) {
	return storagev1.SchemeGroupVersion.WithKind("CSINode"), meta.RESTScopeRoot
}

// NodeChanged implements NodeReader: a device plugin's resource shows in the allocatable.
func (g *PluginsGate) NodeChanged(oldNode, newNode *corev1.Node) bool {
	return !equality.Semantic.DeepEqual(oldNode.Status.Allocatable, newNode.Status.Allocatable)
}

// Check implements Gate.
func (g *PluginsGate) Check(ctx context.Context, in Input) error {
	plugins, err := g.registry.Serving(ctx)
	if err != nil {
		return err
	}
	var drivers []string
	if slices.ContainsFunc(plugins, func(p Plugin) bool { return p.Type == CSIPluginType }) {
		csiNode := &storagev1.CSINode{}
		err := in.Reader.Get(ctx, types.NamespacedName{Name: g.node}, csiNode)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading CSINode %s: %w", g.node, err)
		}
		for _, d := range csiNode.Spec.Drivers {
			drivers = append(drivers, d.Name)
		}
	}
	for _, p := range plugins {
		registered := true
		switch p.Type {
		case CSIPluginType:
			registered = slices.Contains(drivers, p.Name)
		case DevicePluginType:
			q := in.Node.Status.Allocatable[corev1.ResourceName(p.Name)]
			registered = q.Sign() > 0
		}
		if !registered {
			return NotReady(ReasonNotRegistered, fmt.Errorf("kubelet has not registered the %s, whose registrar serves %s, yet", p, p.Socket))
		}
	}
	return nil
}
