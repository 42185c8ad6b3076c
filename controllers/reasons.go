package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/internal/csi"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// Reason classes: a small fixed set that labels probe errors in metrics and tells a changed
// reason for waiting from a repeated one, whatever details the underlying error carries.
const (
	reasonNotProbed     = "not_probed"
	reasonNotReady      = "not_ready"
	reasonTimeout       = "timeout"
	reasonUnavailable   = "unavailable"
	reasonUnimplemented = "unimplemented"
	reasonHTTPStatus    = "http_status"
	reasonNotRegistered = "not_registered"
	reasonNoAllocatable = "no_allocatable"
	reasonNoFile        = "no_file"
	reasonError         = "error"
)

// gateError says which gate does not pass, in which reason class, and why.
type gateError struct {
	gate   string
	reason string
	err    error
	// group is the name of the gate's group, when it has one.
	group string
}

func (e *gateError) Error() string {
	if e.group != "" {
		return fmt.Sprintf("%s gate of group %s: %v", e.gate, e.group, e.err)
	}
	return fmt.Sprintf("%s gate: %v", e.gate, e.err)
}
func (e *gateError) Unwrap() error { return e.err }

// inGroup returns the error as group's; the gates share their results, so it is a copy.
func (e *gateError) inGroup(group string) *gateError {
	out := *e
	out.group = group
	return &out
}

// gateLabel is a gate's metric label: its name, after its group's when it has one ("efs/csi"),
// so two groups' CSI gates are two series and a lone group's are as they always were.
func gateLabel(group, gate string) string {
	if group == "" {
		return gate
	}
	return group + "/" + gate
}

// key identifies the state for deduplicating logs and events.
func (e *gateError) key() string { return e.gate + "/" + e.reason }

// gateLog logs a gate's result when it changes: when the gate starts or stops passing or its
// reason class changes, never for a repeated result, so a probe every second writes no lines.
type gateLog struct {
	known  bool
	reason string // "" while the gate passes
}

// update records gerr (nil when the gate passes), logs it if it differs from the last result, and
// reports whether it did.
func (l *gateLog) update(logger logr.Logger, gate string, gerr *gateError) bool {
	reason := ""
	if gerr != nil {
		reason = gerr.reason
	}
	if l.known && reason == l.reason {
		logger.V(4).Info("readiness gate unchanged", "gate", gate, "ready", gerr == nil)
		return false
	}
	l.known, l.reason = true, reason
	if gerr == nil {
		logger.Info("readiness gate passes", "gate", gate)
	} else {
		logger.Info("readiness gate does not pass", "gate", gate, "reason", reason, "detail", gerr.err.Error())
	}
	return true
}

// report records the result of a gate of group that the reconcile checks itself: it logs a
// change (update) and sets the gate's metric, and returns gerr.
func (l *gateLog) report(ctx context.Context, group, gate string, gerr *gateError) *gateError {
	l.update(log.FromContext(ctx), gate, gerr)
	metrics.GateReady.WithLabelValues(gateLabel(group, gate)).Set(boolToFloat(gerr == nil))
	return gerr
}

// httpStatusError is a health endpoint's non-2xx answer.
type httpStatusError struct {
	url    string
	status string
}

func (e *httpStatusError) Error() string { return fmt.Sprintf("GET %s: %s", e.url, e.status) }

// reasonClass sorts a probe error into one of the reason classes.
func reasonClass(err error) string {
	var statusErr *httpStatusError
	var netErr net.Error
	switch {
	case errors.Is(err, errNotReady):
		return reasonNotReady
	case errors.Is(err, errNoFile):
		return reasonNoFile
	case errors.Is(err, context.DeadlineExceeded):
		return reasonTimeout
	case errors.As(err, &statusErr):
		return reasonHTTPStatus
	case errors.As(err, &netErr) && netErr.Timeout():
		return reasonTimeout
	}
	var rpcErr *csi.RPCError
	if errors.As(err, &rpcErr) {
		switch rpcErr.Code {
		case csi.DeadlineExceeded, csi.Canceled:
			return reasonTimeout
		case csi.Unavailable:
			return reasonUnavailable
		case csi.Unimplemented:
			return reasonUnimplemented
		}
		return reasonError
	}
	if errors.As(err, &netErr) {
		return reasonUnavailable
	}
	return reasonError
}
