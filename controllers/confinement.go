// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Outcomes of a confinement check.
const (
	// Confined: the admission policy refused the dry-run change.
	Confined = "confined"
	// NotConfined: the API server would have made the change, so no policy judges this agent; or
	// the API server is older than startuptaint.MinKubernetesMinor, where the agent counts on no
	// policy and sends no dry run.
	NotConfined = "not_confined"
	// CannotWrite: RBAC (or another authorizer) refused the request before admission, so the agent
	// can write nothing and the policy's verdict is unknown.
	CannotWrite = "cannot_write"
)

// confinementRetry spaces the checks that did not reach a verdict: the Node not there yet, the API
// server unreachable, or no permission to write at all.
var confinementRetry = struct{ initial, limit time.Duration }{time.Second, MaxRetryInterval}

// The admission policy knows the agent by this grant: its ClusterRole names the install's taints
// here, when the manifests are rendered (config/components/taints), and grants nothing real.
// +kubebuilder:rbac:groups=startup-taint-remover.github.io,resources=startuptaints,resourceNames=TAINTS,verbs=remove

// ConfinementCheck asks the API server, with requests that pass through admission and write
// nothing (server-side dry runs), whether the agent's install lets it do its job and nothing more.
// It checks both directions:
//
//   - Its job: the patch that removes the startup taints it serves from its own Node, as the
//     reconciler sends it, must be admitted. Until the API server has said so, and while it refuses,
//     Ready fails, so a DaemonSet rollout of a broken install stops at its first pods instead of
//     leaving every new node tainted; a refusal shows as the startup_taint_removal_refused gauge, a
//     RemovalRefused Warning event that quotes the API server, and one log line.
//   - Nothing more: labelling its own Node must be refused by the admission policy. Every install
//     path that breaks the policy's match, including ones this project never rendered, shows at
//     once as the startup_taint_confined gauge, a NotConfined Warning event and one log line.
//
// It checks when it starts, again on a backoff while an answer is missing or the removal is
// refused, and whenever Recheck is called (NodeReconciler calls it when its patches change between
// forbidden and allowed, a sign that its permissions changed).
type ConfinementCheck struct {
	// Client sends the dry-run patches. The reconciler's when nil.
	Client client.Client
	// NodeName is the agent's own Node. The reconciler's when empty.
	NodeName string
	// Taints returns the startup taints the agent serves, whose removal the check asks about: the
	// dry run removes the ones on the Node and lists them all in its removed record. The
	// reconciler's when nil.
	Taints func() []startuptaint.TaintSpec
	// Conditions, when set, are the condition types of an agent in conditions-only mode
	// (NodeReconciler.ConditionsOnly), whose job is writing the first of them in its Node's status:
	// the dry run writes that condition instead of removing taints. The reconciler's when nil and
	// it is in that mode.
	Conditions []string
	// Recorder records the NotConfined and RemovalRefused events. The reconciler's when nil.
	Recorder events.EventRecorder
	// Require holds every write of the agent until the admission policy is seen to confine it:
	// an agent that nothing judges removes nothing, is not ready, and says why, and goes on
	// checking, so it starts working once a policy judges it.
	Require bool
	// Server, when set, is the API server's version (its /version), quoted when the agent is not
	// confined on a server older than startuptaint.MinKubernetesMinor.
	Server *version.Info
	// Clock times the retries; the real clock when nil.
	Clock clock.Clock

	init sync.Once
	// inherited are the reconciler's settings for the fields left empty, and its metrics: set by
	// NodeReconciler.SetupWithManager, which leaves the exported fields as their owner set them.
	inherited inherited
	recheck   chan struct{}
	// confined tells the reconciler, once, that the agent was first found confined: the writes
	// it held can go now.
	confined chan event.GenericEvent
	last     string

	mu sync.Mutex
	// answered is set once the API server has answered the dry-run removal; refusal is its
	// refusal, nil when it admitted it.
	answered bool
	refusal  error
	// verdict is the last outcome of Check: Confined, NotConfined, CannotWrite, or "" before one.
	verdict string
}

// NewConfinementCheck returns a check; with require, the agent writes nothing until it is
// confined.
func NewConfinementCheck(require bool) *ConfinementCheck {
	return &ConfinementCheck{Require: require}
}

// channels makes the check's channels, so a literal ConfinementCheck works as one from
// NewConfinementCheck does.
func (c *ConfinementCheck) channels() {
	c.init.Do(func() {
		c.recheck = make(chan struct{}, 1)
		c.confined = make(chan event.GenericEvent, 1)
	})
}

// CheckAgain asks for another check soon; it never blocks.
func (c *ConfinementCheck) CheckAgain() {
	c.channels()
	select {
	case c.recheck <- struct{}{}:
	default:
	}
}

// Permits reports whether the agent may write to its Node: always when confinement is not
// required, and otherwise only while the admission policy is seen to confine it.
func (c *ConfinementCheck) Permits() bool {
	if c == nil || !c.Require {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.verdict == Confined
}

// NeedLeaderElection is false: every agent checks itself.
func (c *ConfinementCheck) NeedLeaderElection() bool { return false }

// Start checks, reports, and checks again when asked, until ctx ends. While no verdict is
// reached, the removal is refused, or a required confinement is missing, it checks again on a
// backoff.
func (c *ConfinementCheck) Start(ctx context.Context) error {
	c.channels()
	logger := log.FromContext(ctx).WithValues("node", c.nodeName())
	ctx = log.IntoContext(ctx, logger)
	retry := time.Duration(0)
	for {
		settled := false // the removal was admitted
		if node, refusal, err := c.CheckRemoval(ctx); err != nil {
			logger.V(4).Info("the dry-run removal reached no answer; retrying", "error", err.Error())
		} else {
			c.reportRemoval(ctx, node, refusal)
			settled = refusal == nil
		}
		outcome, node, err := c.Check(ctx)
		if err != nil {
			logger.V(4).Info("confinement check reached no verdict; retrying", "error", err.Error())
		} else {
			c.report(ctx, outcome, node)
		}
		// Settled: the removal admitted, and a verdict to keep until asked again.
		if settled && err == nil && (outcome == Confined || outcome == NotConfined && !c.Require) {
			retry = 0
			select {
			case <-ctx.Done():
				return nil
			case <-c.recheck:
			}
			continue
		}
		retry = min(max(2*retry, confinementRetry.initial), confinementRetry.limit)
		timer := c.clock().NewTimer(retry)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-c.recheck:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// Ready fails until the API server has admitted the dry-run removal, and while it refuses it: an
// agent that cannot remove its startup taints must not count as ready. NodeReconciler.SetupWithManager
// adds it to the manager's readiness checks (/readyz).
func (c *ConfinementCheck) Ready(*http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.answered:
		return errors.New("the API server has not answered the dry-run removal of the startup taints yet")
	case c.refusal != nil:
		return fmt.Errorf("the API server refuses the removal of the startup taints: %w", c.refusal)
	case c.Require && c.belowMinimum():
		return fmt.Errorf("confinement is required, and the API server runs %s, older than Kubernetes 1.%d, the oldest minor "+
			"this release supports: it writes nothing", startuptaint.DescribeServer(c.Server), startuptaint.MinKubernetesMinor)
	case c.Require && c.verdict != Confined:
		return errors.New("confinement is required, and no admission policy is seen to judge this agent yet: it writes nothing")
	}
	return nil
}

// belowMinimum reports whether the API server acts as a minor older than
// startuptaint.MinKubernetesMinor. The admission policy compiles there too and judges the agent's
// token as on every minor, but nothing else of the agent is tested there, so it counts on no
// confinement: with confinement required (the default) it writes nothing.
func (c *ConfinementCheck) belowMinimum() bool {
	if c.Server == nil {
		return false
	}
	minor, ok := startuptaint.ActsAs(c.Server)
	return ok && minor < startuptaint.MinKubernetesMinor
}
