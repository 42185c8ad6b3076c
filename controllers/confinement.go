package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// FieldManager names the agent's writes in a Node's managedFields, so an operator can tell them
// from other writers'.
const FieldManager = "startup-taint-remover"

// PolicyMessagePrefix starts every message of the shipped admission policy, so a refusal by the
// policy can be told from any other.
const PolicyMessagePrefix = "the startup-taint-remover "

// ConfinementProbeLabel is the label the confinement check asks, in a dry run, to set on its own
// Node: a change the admission policy must refuse.
const ConfinementProbeLabel = "startup-taint-remover.github.io/confinement-check"

// ReasonNotConfined is the event reason when no admission policy judges the agent.
const ReasonNotConfined = "NotConfined"

// Outcomes of a confinement check.
const (
	// Confined: the admission policy refused the dry-run change.
	Confined = "confined"
	// NotConfined: the API server would have made the change; no policy judges this agent.
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

// ConfinementCheck asks the API server whether the admission policy judges this agent: it sends a
// dry-run request (which passes through admission and writes nothing) to label its own Node, which
// the policy must refuse. Every install path that breaks the policy's match, including ones this
// project never rendered, shows at once as a gauge, a Warning event and one log line.
//
// It checks when it starts and whenever Recheck is called (NodeReconciler calls it when its
// patches change between forbidden and allowed, a sign that its permissions changed).
type ConfinementCheck struct {
	// Client sends the dry-run patch. Set by NodeReconciler.SetupWithManager when nil.
	Client client.Client
	// NodeName is the agent's own Node. Set by NodeReconciler.SetupWithManager when empty.
	NodeName string
	// Recorder records the NotConfined event. Set by NodeReconciler.SetupWithManager when nil.
	Recorder events.EventRecorder
	// Require stops the check, and with it the manager, with an error when the agent is not
	// confined, so an agent that would hold more power than intended refuses to run.
	Require bool
	// Clock times the retries; the real clock when nil.
	Clock clock.Clock

	recheck chan struct{}
	last    string
}

// NewConfinementCheck returns a check; Require makes an unconfined agent stop.
func NewConfinementCheck(require bool) *ConfinementCheck {
	return &ConfinementCheck{Require: require, recheck: make(chan struct{}, 1)}
}

// Recheck asks for another check soon; it never blocks.
func (c *ConfinementCheck) Recheck() {
	select {
	case c.recheck <- struct{}{}:
	default:
	}
}

// NeedLeaderElection is false: every agent checks itself.
func (c *ConfinementCheck) NeedLeaderElection() bool { return false }

// Start checks, reports, and checks again when asked, until ctx ends. It returns an error only
// when Require is set and the agent is not confined.
func (c *ConfinementCheck) Start(ctx context.Context) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	logger := log.FromContext(ctx).WithValues("node", c.NodeName)
	ctx = log.IntoContext(ctx, logger)
	retry := time.Duration(0)
	for {
		outcome, node, err := c.Check(ctx)
		if err != nil {
			logger.V(4).Info("confinement check reached no verdict; retrying", "error", err.Error())
		} else {
			c.report(ctx, outcome, node)
			if outcome == NotConfined && c.Require {
				return errors.New("no admission policy confines this agent to its own Node, and confinement is required: " +
					"install the policy (config/policy) and bind the agent's ClusterRole to the pod's service account")
			}
		}
		if err == nil && outcome != CannotWrite {
			retry = 0
			select {
			case <-ctx.Done():
				return nil
			case <-c.recheck:
			}
			continue
		}
		retry = min(max(2*retry, confinementRetry.initial), confinementRetry.limit)
		timer := c.Clock.NewTimer(retry)
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

// Check sends the dry-run request and classifies the answer. An error means no verdict (the Node
// does not exist yet, or the API server did not answer); node is the Node when it was admitted.
func (c *ConfinementCheck) Check(ctx context.Context) (outcome string, node *corev1.Node, err error) {
	node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.NodeName}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"dry-run"}}}`, ConfinementProbeLabel)
	err = c.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch)),
		client.DryRunAll, client.FieldOwner(FieldManager))
	switch {
	case err == nil:
		return NotConfined, node, nil
	case apierrors.IsForbidden(err) && refusedByPolicy(err):
		return Confined, nil, nil
	case apierrors.IsForbidden(err):
		return CannotWrite, nil, nil
	}
	return "", nil, fmt.Errorf("dry-run labelling of node %s: %w", c.NodeName, err)
}

// refusedByPolicy tells the shipped policy's refusal from RBAC's or another policy's.
func refusedByPolicy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy") && strings.Contains(msg, PolicyMessagePrefix)
}

// report sets the gauge on every verdict and logs, and warns, only when the verdict changes.
func (c *ConfinementCheck) report(ctx context.Context, outcome string, node *corev1.Node) {
	metrics.Confined.Set(boolToFloat(outcome == Confined))
	if outcome == c.last {
		return
	}
	c.last = outcome
	logger := log.FromContext(ctx)
	switch outcome {
	case Confined:
		logger.Info("the admission policy confines this agent to its own Node and startup taints")
	case CannotWrite:
		logger.Info("this agent may not write its Node at all, so whether the admission policy confines it is unknown; checking again later")
	case NotConfined:
		if !c.Require { // with Require, Start returns the error instead
			logger.Error(nil, "no admission policy judges this agent: it could change any Node it may patch, "+
				"not only remove its own startup taints")
		}
		c.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonNotConfined, "CheckConfinement",
			"No admission policy judges this agent (a dry-run change of this Node's labels was admitted): "+
				"it could change any Node its RBAC allows. Install the own-node policy and bind the agent's ClusterRole to its service account.")
	}
}
