// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
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

// Recheck asks for another check soon; it never blocks.
func (c *ConfinementCheck) Recheck() {
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

// inherited is what a ConfinementCheck takes from the reconciler it serves.
type inherited struct {
	client     client.Client
	nodeName   string
	recorder   events.EventRecorder
	clock      clock.Clock
	taints     func() []startuptaint.TaintSpec
	conditions []string
	metrics    *metrics.Metrics
}

// metricsOf is the metrics of the reconciler the check serves, or the process's.
func (c *ConfinementCheck) metricsOf() *metrics.Metrics {
	if c.inherited.metrics == nil {
		return metrics.Default()
	}
	return c.inherited.metrics
}

// client is c.Client, or the reconciler's.
func (c *ConfinementCheck) client() client.Client {
	if c.Client == nil {
		return c.inherited.client
	}
	return c.Client
}

// nodeName is c.NodeName, or the reconciler's.
func (c *ConfinementCheck) nodeName() string {
	if c.NodeName == "" {
		return c.inherited.nodeName
	}
	return c.NodeName
}

// recorder is c.Recorder, or the reconciler's.
func (c *ConfinementCheck) recorder() events.EventRecorder {
	if c.Recorder == nil {
		return c.inherited.recorder
	}
	return c.Recorder
}

// taints is c.Taints, or the reconciler's.
func (c *ConfinementCheck) taints() func() []startuptaint.TaintSpec {
	if c.Taints == nil {
		return c.inherited.taints
	}
	return c.Taints
}

// conditions is c.Conditions, or, in conditions-only mode, the reconciler's condition types.
func (c *ConfinementCheck) conditions() []string {
	if c.Conditions == nil {
		return c.inherited.conditions
	}
	return c.Conditions
}

// clock is c.Clock, or the reconciler's, or the real clock.
func (c *ConfinementCheck) clock() clock.Clock {
	switch {
	case c.Clock != nil:
		return c.Clock
	case c.inherited.clock != nil:
		return c.inherited.clock
	}
	return clock.RealClock{}
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

// CheckRemoval sends, in a dry run, the patch that removes the agent's startup taints from its
// Node, as the reconciler would send it, and returns the Node and the API server's refusal (nil
// when it admitted the patch). An error means no answer: the Node is not there yet, or the API
// server did not answer.
func (c *ConfinementCheck) CheckRemoval(ctx context.Context) (node *corev1.Node, refusal error, err error) {
	node = &corev1.Node{}
	if err := c.client().Get(ctx, client.ObjectKey{Name: c.nodeName()}, node); err != nil {
		return nil, nil, fmt.Errorf("reading node %s: %w", c.nodeName(), err)
	}
	orig := node.DeepCopy()
	if len(c.conditions()) > 0 {
		return c.checkCondition(ctx, orig)
	}
	// Once its taints are gone, the patch changes nothing, and the API server judges it all the
	// same: the policy checks its rendered settings on every request of the agent, so a policy
	// the agent cannot work with refuses this one too.
	if taints := c.taints(); taints != nil {
		removeTaints(node, taints())
	}
	err = writeTaints(ctx, c.client(), orig, node, client.DryRunAll)
	switch {
	case err == nil:
		return orig, nil, nil
	case refused(err):
		return orig, err, nil
	}
	return nil, nil, fmt.Errorf("dry-run removal of the startup taints from node %s: %w", c.nodeName(), err)
}

// checkCondition sends, in a dry run, the status patch by which the reconciler writes the first
// of c.conditions() once its gates pass, and returns the API server's refusal (nil when it admitted
// it).
func (c *ConfinementCheck) checkCondition(ctx context.Context, node *corev1.Node) (*corev1.Node, error, error) {
	want := condition(c.conditions()[0], nil)
	want = stamped(want, gates.FindCondition(node.Status.Conditions, want.Type), c.clock().Now())
	err := writeCondition(ctx, c.client(), node.DeepCopy(), want, client.DryRunAll)
	switch {
	case err == nil:
		return node, nil, nil
	case refused(err):
		return node, err, nil
	}
	return nil, nil, fmt.Errorf("dry-run write of condition %s of node %s: %w", want.Type, c.nodeName(), err)
}

// Check sends the dry-run request and classifies the answer: a label on its Node, or in
// conditions-only mode a condition that is not its own. An error means no verdict (the Node
// does not exist yet, or the API server did not answer); node is the Node when it was admitted.
func (c *ConfinementCheck) Check(ctx context.Context) (outcome string, node *corev1.Node, err error) {
	node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodeName()}}
	if c.belowMinimum() {
		return NotConfined, node, nil
	}
	if len(c.conditions()) > 0 {
		// In conditions-only mode the agent may write only its Node's status: a condition that
		// is not its own is the change the policy must refuse there.
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"Unknown"}]}}`, startuptaint.ConfinementProbeLabel)
		err = c.client().Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, []byte(patch)),
			client.DryRunAll, client.FieldOwner(startuptaint.FieldManager))
	} else {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"dry-run"}}}`, startuptaint.ConfinementProbeLabel)
		err = c.client().Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch)),
			client.DryRunAll, client.FieldOwner(startuptaint.FieldManager))
	}
	switch {
	case err == nil:
		return NotConfined, node, nil
	case apierrors.IsForbidden(err) && refusedByPolicy(err):
		return Confined, nil, nil
	case apierrors.IsForbidden(err):
		return CannotWrite, nil, nil
	}
	return "", nil, fmt.Errorf("dry-run labelling of node %s: %w", c.nodeName(), err)
}

// report sets the gauge on every verdict and logs, and warns, only when the verdict changes.
func (c *ConfinementCheck) report(ctx context.Context, outcome string, node *corev1.Node) {
	c.metricsOf().Confined.Set(metrics.Bool(outcome == Confined))
	c.mu.Lock()
	c.verdict = outcome
	c.mu.Unlock()
	if outcome == c.last {
		return
	}
	c.last = outcome
	logger := log.FromContext(ctx)
	switch outcome {
	case Confined:
		logger.Info("the admission policy confines this agent to its own Node and startup taints")
		// Wakes the reconciler, whose writes waited for this verdict; it never blocks.
		select {
		case c.confined <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodeName()}}}:
		default:
		}
	case CannotWrite:
		logger.Info("this agent may not write its Node at all, so whether the admission policy confines it is unknown; checking again later")
	case NotConfined:
		// One sentence for the log and, capitalised, for the event.
		what := "no admission policy judges this agent"
		sentence := "No admission policy judges this agent (a dry-run change it must never make was admitted)"
		if c.belowMinimum() {
			what = fmt.Sprintf("the API server runs %s, older than Kubernetes 1.%d, the oldest minor this release supports",
				startuptaint.DescribeServer(c.Server), startuptaint.MinKubernetesMinor)
			sentence = "T" + what[1:]
		}
		if c.Require {
			logger.Error(nil, what+", and confinement is required: it removes nothing and writes nothing until "+c.notConfinedUntil())
			c.recorder().Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonNotConfined, "CheckConfinement",
				"%s, and confinement is required: it removes no startup taint and writes nothing until %s", sentence, c.notConfinedUntil())
			return
		}
		logger.Info(what + "; confinement is not required (--require-confinement=false), so this agent runs anyway")
		c.recorder().Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonNotConfined, "CheckConfinement",
			"%s, and it runs anyway (--require-confinement=false): it could change any Node its RBAC allows.", sentence)
	}
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

// notConfinedUntil says what ends a missing confinement: on an API server older than the
// minimum, an upgrade; otherwise the policy, installed.
func (c *ConfinementCheck) notConfinedUntil() string {
	if c.belowMinimum() {
		return fmt.Sprintf("the control plane runs Kubernetes 1.%d or later: upgrade it, then restart the agent's pods.",
			startuptaint.MinKubernetesMinor)
	}
	return "one does: install the own-node policy (config/policy, or the chart's admissionPolicy) and bind the agent's " +
		"ClusterRole to its service account."
}

// reportRemoval sets the gauge on every answer, and logs and records an event only when the
// answer changes: refused, refused for another reason, or admitted after a refusal.
func (c *ConfinementCheck) reportRemoval(ctx context.Context, node *corev1.Node, refusal error) {
	c.metricsOf().RemovalRefused.Set(metrics.Bool(refusal != nil))
	c.mu.Lock()
	wasRefused, wasAnswered := c.refusal != nil, c.answered
	same := wasAnswered && (refusal == nil && !wasRefused || refusal != nil && wasRefused && refusal.Error() == c.refusal.Error())
	c.answered, c.refusal = true, refusal
	c.mu.Unlock()
	if same {
		return
	}
	logger := log.FromContext(ctx)
	if refusal == nil {
		if wasRefused {
			logger.Info("the API server admits this agent's removal of its startup taints again; the agent is ready")
			c.recorder().Eventf(node, nil, corev1.EventTypeNormal, startuptaint.EventReasonRemovalAdmitted, "CheckRemoval",
				"The API server admits this agent's removal of its startup taints again (a dry run of its patch); the agent is ready")
		}
		return
	}
	advice := refusalAdvice(refusal)
	logger.Error(refusal, "the API server refuses this agent's removal of its startup taints; the agent is not ready until it is admitted",
		"check", advice)
	const format = "The API server refuses this agent's removal of its startup taints (a dry run of its patch), " +
		"so it is not ready: %s. Check %s"
	// A policy's refusal quotes its CEL expression over several lines; one line reads better.
	quoted := elide(strings.Join(strings.Fields(refusal.Error()), " "), maxNote-len(format)-len(advice))
	c.recorder().Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonRemovalRefused, "CheckRemoval", format, quoted, advice)
}
