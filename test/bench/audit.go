// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
)

// auditLog has the API server log every request at the Metadata level, so the benchmark can
// count the requests each agent made, by user and verb, without touching the agent.
type auditLog struct {
	policyPath, logPath string
}

func newAuditLog(dir string) (*auditLog, error) {
	a := &auditLog{policyPath: filepath.Join(dir, "audit-policy.yaml"), logPath: filepath.Join(dir, "audit.log")}
	policy := `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`
	return a, os.WriteFile(a.policyPath, []byte(policy), 0o600)
}

// counts returns, for user, how many requests of each verb the API server has logged.
func (a *auditLog) counts(user string) (map[string]int, error) {
	byUser, err := a.byUser(user)
	return byUser[user], err
}

// byUser returns, for each of users, how many requests of each verb the API server has logged,
// reading the log once. A request (a watch spans two stages) is counted once.
func (a *auditLog) byUser(users ...string) (map[string]map[string]int, error) {
	f, err := os.Open(a.logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]map[string]int{}
	for _, u := range users {
		out[u] = map[string]int{}
	}
	seen := map[string]bool{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<24)
	for s.Scan() {
		var ev struct {
			AuditID string `json:"auditID"`
			Verb    string `json:"verb"`
			User    struct {
				Username string `json:"username"`
			} `json:"user"`
		}
		if err := json.Unmarshal(s.Bytes(), &ev); err != nil || out[ev.User.Username] == nil || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		out[ev.User.Username][ev.Verb]++
	}
	return out, s.Err()
}

// total sums counts by key: requests by verb, watch events by resource.
func total[N int | float64](m map[string]N) N {
	var n N
	for _, v := range m {
		n += v
	}
	return n
}
