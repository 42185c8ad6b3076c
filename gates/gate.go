// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package gates holds the readiness gates that hold a node's startup taints: one interface, Gate,
// and one file per kind of gate. What differs between kinds is declared through small optional
// interfaces: Probed for checks of the node itself that a prober runs on an interval, Watcher for
// those that can also tell when to check again, Cached and NodeReader for checks of API objects,
// which the reconciler runs whenever a watch event shows that what they read changed, Rechecked
// for those that also read what no watch tells about, and AfterReboot for those heeded only after
// a reboot.
package gates

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Gate is one readiness check of a node agent.
type Gate interface {
	// Name is the gate's short name in logs, events and metric labels ("csi", "csinode").
	Name() string
	// Check returns nil when the gate passes, and otherwise why not: a *NotReadyError carrying
	// its reason class, or any other error, which counts as ReasonError.
	Check(ctx context.Context, in Input) error
}

// Input is what a gate may read. A Probed gate gets none of it: it checks the node itself.
type Input struct {
	// Node is the Node as the reconcile read it from the manager's cache.
	Node *corev1.Node
	// Reader reads the manager's cache, which holds what each Cached gate declared.
	Reader client.Reader
	// APIReader reads the API server itself, for what no cache holds: the DaemonSets the node
	// agents' gate lists, from the API server's watch cache, rather than watch. It is the
	// reconciler's APIReader.
	APIReader client.Reader
}

// Probed is implemented by gates that check the node itself (a socket, an endpoint, a file), which
// no API watch tells about: a prober checks them on an interval, off the reconcile, and the
// reconcile reads its last result.
type Probed interface {
	Gate
	// Timeout bounds each check; the prober counts a check it cancels as ReasonTimeout. Zero
	// means none.
	Timeout() time.Duration
}

// Watcher is implemented by probed gates that watch a local source (inotify, for the file gate)
// and so can ask to be checked at once, sooner than the interval.
type Watcher interface {
	Probed
	// Watch calls changed whenever the gate's result may have changed, until ctx ends.
	Watch(ctx context.Context, changed func()) error
}

// Cached is implemented by gates that read API objects other than the Node: what the manager
// caches for them (as little as they read), the watch whose events cause a reconcile, and the
// kind's REST mapping, so the manager needs no API discovery. The reconciler collects these from
// its gates; it lists no kind of its own but the Node.
type Cached interface {
	Gate
	CacheEntry() (client.Object, cache.ByObject)
	// Watches returns the watched object's type, the handler, given one that enqueues this node's
	// request, and the predicates that keep other objects out.
	Watches(toNode handler.EventHandler) (client.Object, handler.EventHandler, []predicate.Predicate)
	RESTMapping() (schema.GroupVersionKind, meta.RESTScope)
}

// NodeReader is implemented by gates that read the Node itself: an update of the Node that changes
// what they read causes a reconcile, as kubelet's other status updates do not.
type NodeReader interface {
	Gate
	NodeChanged(oldNode, newNode *corev1.Node) bool
}

// Rechecked is implemented by cached gates that also read what no watch tells about (the
// DaemonSets, which the node agents' gate lists rather than watches): while such a gate holds the
// taints, the reconciler checks it again after Recheck, whatever else happens.
type Rechecked interface {
	Cached
	Recheck() time.Duration
}

// AfterReboot is implemented by gates that check what a reboot leaves stale for the other gates
// of their group (a CSINode entry from the boot before): the reconciler heeds them only on a Node
// that booted again since the group's gates last passed, so a node's first boot is never held on
// them.
type AfterReboot interface {
	Probed
	OnlyAfterReboot()
}

// DriverNamer is implemented by gates that learn the name of the driver they check. A group
// without taints of its own holds the driver's conventional taint, "<name>/agent-not-ready", once
// the name is known; the CSINode gate looks for the driver under that name.
type DriverNamer interface {
	// DriverName returns the name the driver last reported, or "" before it first answered.
	DriverName() string
}

// Titled is implemented by gates whose name, in CamelCase, is not how it is written in a Node
// condition's reason: "csi" is "CSI". See ConditionReason.
type Titled interface {
	Title() string
}

// Reason classes every kind of gate may report; each gate's file adds its own. A reason class is
// a small fixed set that labels errors in metrics and tells a changed reason for waiting from a
// repeated one, whatever details the error carries.
const (
	// ReasonNotProbed says nothing is known yet, such as before a driver's first answer: the
	// reconciler neither reports it nor forces a removal on it (MaxWait).
	ReasonNotProbed   = "not_probed"
	ReasonNotReady    = "not_ready"
	ReasonTimeout     = "timeout"
	ReasonUnavailable = "unavailable"
	ReasonError       = "error"
)

// NotReadyError is a gate's verdict that it does not pass, in a reason class.
type NotReadyError struct {
	Reason string
	Err    error
	// Holders name the node agents that keep the gate from passing, where a gate knows them
	// (the node agents' gate: DaemonSets, NAMESPACE/NAME): a bounded set, never pods.
	Holders []string
}

// NotReady returns err as a verdict of reason class reason.
func NotReady(reason string, err error) *NotReadyError {
	return &NotReadyError{Reason: reason, Err: err}
}

func (e *NotReadyError) Error() string { return e.Err.Error() }

// Unwrap returns the error the verdict wraps.
func (e *NotReadyError) Unwrap() error { return e.Err }

// Holders returns the node agents err, a gate's answer, names as keeping it from passing.
func Holders(err error) []string {
	var nr *NotReadyError
	if errors.As(err, &nr) {
		return nr.Holders
	}
	return nil
}

// Reason returns the reason class of err, a gate's answer: its NotReadyError's, ReasonTimeout for
// a check that ran out of time, or ReasonError.
func Reason(err error) string {
	var nr *NotReadyError
	switch {
	case errors.As(err, &nr):
		return nr.Reason
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	}
	return ReasonError
}

// ConditionReason is a Node condition's reason while gate does not pass: its title (Titled) or its
// name in CamelCase, followed by NotReady, such as CSINotReady or NodeConditionNotReady.
func ConditionReason(gate Gate) string {
	if t, ok := gate.(Titled); ok {
		return t.Title() + "NotReady"
	}
	name := CamelCase(gate.Name())
	if name == "" || !unicode.IsLetter(rune(name[0])) {
		return "GateNotReady"
	}
	return name + "NotReady"
}

// CamelCase writes s, words of letters and digits between other characters, in CamelCase:
// "pod_not_ready" is PodNotReady.
func CamelCase(s string) string {
	var b strings.Builder
	for _, word := range strings.FieldsFunc(s, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) }) {
		b.WriteString(strings.ToUpper(word[:1]) + word[1:])
	}
	return b.String()
}

// driverGates are the gates on a driver that registers with kubelet: a CSI driver (its Probe,
// CSINode and registrar), a DRA driver (its ResourceSlices) and a device plugin (its allocatable resources).
var driverGates = []string{CSIName, CSINodeName, RegistrationName, PluginsName, ResourceSliceName, ResourceName}

// WaitsForDriver reports whether the gate named name waits for a driver, rather than for another
// node agent (an HTTP endpoint, a file, a pod, a container, a condition).
func WaitsForDriver(name string) bool { return slices.Contains(driverGates, name) }
