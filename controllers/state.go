// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The Node's remembered state, and every change to it: the state machine in one place. Each stage
// calls the transitions it makes and hands on what they return; report says it (events.go).
//   - observe: observe (an episode begins with a taint seen, and ends when it goes);
//   - check: judge (the gates' verdict over time);
//   - decide: firstWait, firstWouldRemove, firstWouldRetaint (what is said once per episode);
//   - lookUntolerated: lookDue, recordUntolerated, recordLookFailed, forgetUntolerated;
//   - publishCondition: recordCondition;
//   - outcome: recordRemoval (which ends the episode), recordFailure, recordPutBack.

// nodeState is what the reconciler remembers about its Node between reconciles: one episode at a
// time, from a startup taint appearing to its removal. Only the controller's single worker
// touches it.
type nodeState struct {
	uid types.UID
	// present is, by spec, whether it was on the node at the last observation.
	present map[string]bool
	// removedBefore holds the specs (of this state's group) removed from this Node at least once,
	// by this process or, through startuptaint.RemovedAnnotation, by an earlier one.
	removedBefore map[string]bool
	// cameBack holds the specs that came back since their last removal.
	cameBack map[string]bool

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
	// wouldPutBack is set once a dry run has reported the taint it would have put back, until the
	// gates pass again.
	wouldPutBack bool
	// condition is the Node condition this process last wrote, so that a cache which has not seen
	// the write yet does not cause it twice.
	condition *corev1.NodeCondition

	// The pods the startup taints keep away (untolerated.go), while the gates hold them: when the
	// agent last looked, what it found, and whether a look was refused, which is logged once.
	lookedAt         time.Time
	untolerated      []untoleratedPod
	untoleratedTotal int
	lookRefused      bool
	// untoleratedSaid is when the pods were last reported.
	untoleratedSaid time.Time
}

// observe records the Node's taints, as specs select them: one group's. A Node with a new UID
// (re-created under the same name) starts a new history; startuptaint.RemovedAnnotation tells which
// of specs were removed before this process (another group's entries are that group's history).
// putBack is the spec continuous mode puts back (empty when it is off): only an agent puts it on a
// Node, so once any of specs has been removed, finding it means it came back.
func (s *nodeState) observe(node *corev1.Node, specs []startuptaint.TaintSpec, putBack string, now time.Time) observation {
	first := s.uid != node.UID || s.present == nil
	if first {
		*s = nodeState{uid: node.UID, present: map[string]bool{}, removedBefore: map[string]bool{},
			cameBack: map[string]bool{}, waitEvents: map[string]bool{}}
	}
	for _, removed := range startuptaint.RemovedRecord(node) {
		if slices.ContainsFunc(specs, func(spec startuptaint.TaintSpec) bool { return spec.String() == removed }) {
			s.removedBefore[removed] = true
		}
	}
	obs := observation{held: startuptaint.MatchingTaints(node.Spec.Taints, specs), present: map[string]bool{}}
	for _, spec := range specs {
		key := spec.String()
		present := len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{spec})) > 0
		removedBefore := s.removedBefore[key] || key == putBack && len(s.removedBefore) > 0
		if present && !s.present[key] && removedBefore {
			obs.cameBack = append(obs.cameBack, key)
			s.cameBack[key] = true
		}
		s.present[key], obs.present[key] = present, present
		obs.heldCameBack = obs.heldCameBack || present && s.cameBack[key]
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

// judge records the gates' verdict: notReady is the first gate that does not pass, readySince
// when the gates reported to have all started passing. Continuous mode acts on a verdict held
// longer than --retaint-after.
func (s *nodeState) judge(notReady *gateError, readySince, now time.Time) verdict {
	// The taint's reaction time counts from when every gate passes, or from when it appeared if
	// later.
	readyFrom := maxTime(readySince, s.heldSince)
	switch {
	case notReady == nil:
		s.failingSince, s.wouldPutBack = time.Time{}, false
		if s.passingSince.IsZero() {
			s.passingSince = now
		}
		return verdict{passingFor: now.Sub(maxTime(readySince, s.passingSince)), readyFrom: readyFrom}
	case notReady.reason == gates.ReasonNotProbed:
		return verdict{notReady: notReady, readyFrom: readyFrom}
	default:
		s.passingSince = time.Time{}
		if s.failingSince.IsZero() {
			s.failingSince = now
		}
		return verdict{notReady: notReady, failingFor: now.Sub(s.failingSince), readyFrom: readyFrom}
	}
}

// endEpisode forgets the episode: the next taint starts a new one, with its own wait reports and
// failure backoff.
func (s *nodeState) endEpisode() {
	s.heldSince = time.Time{}
	clear(s.waitEvents)
	s.failure, s.retryAfter = "", 0
	s.wouldRemove = false
}

// recordRemoval records that the taints specs selected were removed, and ends the episode.
func (s *nodeState) recordRemoval(node *corev1.Node, removed []corev1.Taint, specs []startuptaint.TaintSpec,
	readyFrom, now time.Time) removal {
	rem := removal{
		taints:             startuptaint.TaintStrings(removed),
		heldFor:            now.Sub(s.heldSince),
		sinceCreation:      now.Sub(node.CreationTimestamp.Time),
		first:              len(s.removedBefore) == 0,
		readyFor:           now.Sub(readyFrom),
		permissionsChanged: s.failure == metrics.ResultForbidden,
	}
	for _, spec := range specs {
		key := spec.String()
		rem.specs = append(rem.specs, key)
		rem.cameBack = rem.cameBack || s.cameBack[key]
		s.present[key], s.removedBefore[key], s.cameBack[key] = false, true, false
	}
	s.endEpisode()
	return rem
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

// recordPutBack records that continuous mode put spec back: it starts an episode whose removal
// is reported as the taint's return, without reporting the agent's own write as a taint that
// came back.
func (s *nodeState) recordPutBack(spec startuptaint.TaintSpec, gerr *gateError, now time.Time) {
	key := spec.String()
	s.present[key], s.cameBack[key] = true, true
	s.heldSince = now
	// The event that reported the taint's return said why; no second one for the same gate.
	if gerr != nil {
		s.waitEvents[gerr.key()] = true
	}
}

// conditionWritten reports whether c is the condition this process wrote last.
func (s *nodeState) conditionWritten(c *corev1.NodeCondition) bool {
	return sameCondition(s.condition, c)
}

// recordCondition records the condition this process wrote.
func (s *nodeState) recordCondition(c *corev1.NodeCondition) {
	s.condition = c
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

// firstWouldRemove reports whether this is the episode's first removal a dry run would make.
func (s *nodeState) firstWouldRemove() bool {
	first := !s.wouldRemove
	s.wouldRemove = true
	return first
}

// firstWouldPutBack reports whether this is the first time, since the gates last passed, that a
// dry run would have put the taint back.
func (s *nodeState) firstWouldPutBack() bool {
	first := !s.wouldPutBack
	s.wouldPutBack = true
	return first
}

// lookDue reports whether the pods the startup taints keep away are looked for now: the episode
// is lookAfter old and the last look as old; else how long until it is.
func (s *nodeState) lookDue(now time.Time) (bool, time.Duration) {
	at := s.heldSince.Add(lookAfter)
	if !s.lookedAt.IsZero() {
		at = maxTime(at, s.lookedAt.Add(lookAfter))
	}
	if wait := at.Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}

// untoleratedFound returns the last look's findings, unchanged.
func (s *nodeState) untoleratedFound() untolerated {
	return untolerated{pods: s.untolerated, total: s.untoleratedTotal}
}

// recordUntolerated records a look's findings at now, and returns them, changed when they differ
// from the last, or when pods found have not been reported for sayAgainAfter.
func (s *nodeState) recordUntolerated(pods []untoleratedPod, total int, now time.Time) untolerated {
	changed := total != s.untoleratedTotal || !slices.Equal(pods, s.untolerated) || total > 0 && now.Sub(s.untoleratedSaid) >= sayAgainAfter
	s.lookedAt, s.untolerated, s.untoleratedTotal = now, pods, total
	if changed && total > 0 {
		s.untoleratedSaid = now
	}
	return untolerated{pods: pods, total: total, changed: changed}
}

// recordLookFailed records a look that failed at now: the next is a lookAfter later.
func (s *nodeState) recordLookFailed(now time.Time) {
	s.lookedAt = now
}

// firstLookRefused reports whether this is the first refused look of this process.
func (s *nodeState) firstLookRefused() bool {
	first := !s.lookRefused
	s.lookRefused = true
	return first
}

// forgetUntolerated forgets the looks once the gates pass or the taints go: a later hold looks
// afresh, a minute into it.
func (s *nodeState) forgetUntolerated() {
	s.lookedAt, s.untolerated, s.untoleratedTotal, s.untoleratedSaid = time.Time{}, nil, 0, time.Time{}
}
