// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// RegistrationWindow is how young a Node must be, when the agent first sees it without a group's
// startup taints and with no record of their removal, for that to be reported as a Node that
// registered without them (startuptaint.EventReasonRegisteredWithoutTaint). An older Node is one the agent was
// installed on, or restarted on, long after its registration: reporting those would raise one
// event per node of a fleet at every rollout.
const RegistrationWindow = 10 * time.Minute

// nodeState is what the reconciler remembers about its Node between reconciles: one episode at a
// time, from a startup taint appearing to its removal. Its methods are the transitions; each
// returns what happened, and the reconciler reports it (events.go). Only the controller's single
// worker touches it.
type nodeState struct {
	uid types.UID
	// present is, by spec, whether it was on the node at the last observation.
	present map[string]bool
	// removedBefore holds the specs (of this state's group) removed from this Node at least once,
	// by this process or, through startuptaint.RemovedAnnotation, by an earlier one.
	removedBefore map[string]bool
	// readded holds the specs that came back since their last removal.
	readded map[string]bool

	// The current episode: when a startup taint was first seen, the gate and reason classes
	// already reported while waiting, and the last failure class and its backoff.
	heldSince  time.Time
	waitEvents map[string]bool
	failure    string
	retryAfter time.Duration
	// wouldRemove is set once a dry run has reported the removal it would have made.
	wouldRemove bool

	// The gates' verdict over time, across episodes: since when every gate has passed, or since
	// when one has not. Both are zero before the first probe, when nothing is known.
	passingSince time.Time
	failingSince time.Time
	// wouldRetaint is set once a dry run has reported the taint it would have put back, until the
	// gates pass again.
	wouldRetaint bool
	// condition is the Node condition this process last wrote, so that a cache which has not seen
	// the write yet does not cause it twice.
	condition *corev1.NodeCondition
}

// observation is what observing the Node's taints found.
type observation struct {
	// held are the node's taints that the specs select.
	held []corev1.Taint
	// present is, by spec, whether it is on the node.
	present map[string]bool
	// cameBack are the specs that are back since their last removal.
	cameBack []string
	// ended is set when the taints went without this agent removing them: another writer did.
	ended bool
	// again is set when a held taint came back after an earlier removal.
	again bool
	// registeredWithout is set at the first observation of a Node younger than
	// RegistrationWindow that carries none of the specs and whose startuptaint.RemovedAnnotation names none of
	// them: it registered without the group's startup taints.
	registeredWithout bool
}

// observe records the Node's taints, as specs select them: one group's. A Node with a new UID
// (re-created under the same name) starts a new history; startuptaint.RemovedAnnotation tells which of specs
// were removed before this process (another group's entries are that group's history). retaint
// is the spec continuous mode puts back (empty when it is off): only an agent puts it on a Node,
// so once any of specs has been removed, finding it means it came back.
func (s *nodeState) observe(node *corev1.Node, specs []startuptaint.TaintSpec, retaint string, now time.Time) observation {
	first := s.uid != node.UID || s.present == nil
	if first {
		*s = nodeState{uid: node.UID, present: map[string]bool{}, removedBefore: map[string]bool{},
			readded: map[string]bool{}, waitEvents: map[string]bool{}}
	}
	for _, removed := range removedSpecs(node) {
		if slices.ContainsFunc(specs, func(spec startuptaint.TaintSpec) bool { return spec.String() == removed }) {
			s.removedBefore[removed] = true
		}
	}
	obs := observation{held: startuptaint.MatchingTaints(node.Spec.Taints, specs), present: map[string]bool{}}
	for _, spec := range specs {
		key := spec.String()
		present := len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{spec})) > 0
		removedBefore := s.removedBefore[key] || key == retaint && len(s.removedBefore) > 0
		if present && !s.present[key] && removedBefore {
			obs.cameBack = append(obs.cameBack, key)
			s.readded[key] = true
		}
		s.present[key], obs.present[key] = present, present
		obs.again = obs.again || present && s.readded[key]
	}
	obs.registeredWithout = first && len(obs.held) == 0 && len(s.removedBefore) == 0 &&
		now.Sub(node.CreationTimestamp.Time) < RegistrationWindow
	switch {
	case len(obs.held) == 0 && !s.heldSince.IsZero():
		s.endEpisode()
		obs.ended = true
	case len(obs.held) > 0 && s.heldSince.IsZero():
		s.heldSince = now
	}
	return obs
}

// endEpisode forgets the episode: the next taint starts a new one, with its own wait reports and
// failure backoff.
func (s *nodeState) endEpisode() {
	s.heldSince = time.Time{}
	clear(s.waitEvents)
	s.failure, s.retryAfter = "", 0
	s.wouldRemove = false
}

// firstWouldRemove reports whether this is the episode's first removal a dry run would make.
func (s *nodeState) firstWouldRemove() bool {
	first := !s.wouldRemove
	s.wouldRemove = true
	return first
}

// firstWait reports whether gerr is the first time its gate and reason class hold the taint in
// this episode, so a flapping driver cannot cause an event storm.
func (s *nodeState) firstWait(gerr *gateError) bool {
	if gerr.reason == gates.ReasonNotProbed || s.waitEvents[gerr.key()] {
		return false
	}
	s.waitEvents[gerr.key()] = true
	return true
}

// verdict is the gates' verdict at one reconcile, with how long it has held.
type verdict struct {
	// notReady is the first gate that does not pass; nil when every gate passes.
	notReady *gateError
	// failingFor is how long a gate has not passed, passingFor how long every gate has; each is
	// zero while the other runs, and both before the first probe.
	failingFor, passingFor time.Duration
}

// judge records the gates' verdict: notReady is the first gate that does not pass, readySince
// when the gates reported to have all started passing. Continuous mode acts on a verdict held
// longer than --retaint-after.
func (s *nodeState) judge(notReady *gateError, readySince, now time.Time) verdict {
	switch {
	case notReady == nil:
		s.failingSince, s.wouldRetaint = time.Time{}, false
		if s.passingSince.IsZero() {
			s.passingSince = now
		}
		return verdict{passingFor: now.Sub(maxTime(readySince, s.passingSince))}
	case notReady.reason == gates.ReasonNotProbed:
		return verdict{notReady: notReady}
	default:
		s.passingSince = time.Time{}
		if s.failingSince.IsZero() {
			s.failingSince = now
		}
		return verdict{notReady: notReady, failingFor: now.Sub(s.failingSince)}
	}
}

// recordRetaint records that continuous mode put spec back: it starts an episode whose removal
// is reported as the taint's return, without reporting the agent's own write as a taint that
// came back.
func (s *nodeState) recordRetaint(spec startuptaint.TaintSpec, gerr *gateError, now time.Time) {
	key := spec.String()
	s.present[key], s.readded[key] = true, true
	s.heldSince = now
	// The event that reported the taint's return said why; no second one for the same gate.
	if gerr != nil {
		s.waitEvents[gerr.key()] = true
	}
}

// firstWouldRetaint reports whether this is the first time, since the gates last passed, that a
// dry run would have put the taint back.
func (s *nodeState) firstWouldRetaint() bool {
	first := !s.wouldRetaint
	s.wouldRetaint = true
	return first
}

// conditionWritten reports whether c is the condition this process wrote last.
func (s *nodeState) conditionWritten(c *corev1.NodeCondition) bool {
	return sameCondition(s.condition, c)
}

// recordCondition records the condition this process wrote.
func (s *nodeState) recordCondition(c *corev1.NodeCondition) {
	s.condition = c
}

// removal is what a successful removal reports.
type removal struct {
	taints []string // the removed taints, as KEY[=VALUE]:EFFECT
	specs  []string // the specs that selected them
	// again is set when one of them came back after an earlier removal.
	again   bool
	heldFor time.Duration
	// sinceCreation is the time from the Node's creation; first is set for the first removal of
	// the group's taints from the Node, the one the fleet's removal histogram counts.
	sinceCreation time.Duration
	first         bool
	// readyFor is the time from all gates passing (or the taint appearing, if later).
	readyFor time.Duration
	// permissionsChanged is set when the patch before this one was forbidden.
	permissionsChanged bool
	// unready is the gate that still did not pass when MaxWait forced the removal; nil otherwise.
	unready *gateError
}

// recordRemoval records that the taints specs selected were removed, and ends the episode.
func (s *nodeState) recordRemoval(node *corev1.Node, removed []corev1.Taint, specs []startuptaint.TaintSpec,
	readySince, now time.Time) removal {
	rem := removal{
		taints:             taintStrings(removed),
		heldFor:            now.Sub(s.heldSince),
		sinceCreation:      now.Sub(node.CreationTimestamp.Time),
		first:              len(s.removedBefore) == 0,
		readyFor:           now.Sub(maxTime(readySince, s.heldSince)),
		permissionsChanged: s.failure == metrics.ResultForbidden,
	}
	for _, spec := range specs {
		key := spec.String()
		rem.specs = append(rem.specs, key)
		rem.again = rem.again || s.readded[key]
		s.present[key], s.removedBefore[key], s.readded[key] = false, true, false
	}
	s.endEpisode()
	return rem
}

// failure is what a failed removal reports.
type failure struct {
	result string // a metrics.Result* class
	// changed is set when the class differs from the last failure's: only then is it reported.
	changed bool
	// retryAfter is the backoff for a forbidden patch, which a retry does not cure by itself;
	// zero for failures the workqueue retries.
	retryAfter time.Duration
	// permissionsChanged is set when the patch became forbidden.
	permissionsChanged bool
}

// recordFailure records a failed removal of class result.
func (s *nodeState) recordFailure(result string) failure {
	f := failure{result: result, changed: s.failure != result}
	f.permissionsChanged = f.changed && result == metrics.ResultForbidden
	s.failure = result
	if result == metrics.ResultForbidden {
		s.retryAfter = min(max(2*s.retryAfter, time.Second), MaxRetryInterval)
		f.retryAfter = s.retryAfter
	}
	return f
}

// removedSpecs reads startuptaint.RemovedAnnotation.
func removedSpecs(node *corev1.Node) []string {
	v := node.Annotations[startuptaint.RemovedAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// withRemoved returns startuptaint.RemovedAnnotation's value with the specs it does not list yet appended,
// each once. The value is only ever appended to: the admission policy checks an addition by its
// prefix, at a cost that does not grow with what other writers put before it.
func withRemoved(node *corev1.Node, specs []startuptaint.TaintSpec) string {
	all := removedSpecs(node)
	value := node.Annotations[startuptaint.RemovedAnnotation]
	for _, spec := range specs {
		s := spec.String()
		switch {
		case slices.Contains(all, s):
		case value == "":
			value = s
		default:
			value += "," + s
		}
		all = append(all, s)
	}
	return value
}
