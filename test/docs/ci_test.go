// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// makeCommand is a make invocation on a line of its own in a shell script or a workflow step.
var makeCommand = regexp.MustCompile(`(?m)^\s*(?:step\s+)?make ([^\n#]+?)\s*$`)

// TestThePresubmitWorkflowRunsWhatCIRuns checks that the pull-request workflow and .ci/run run the
// same make targets, so that a contributor's pull request gets the checks CI gives main: make
// test-minors in .ci/run is the workflow's matrix of make test-minor, one job per minor of the
// Makefile's K8S_MINORS.
func TestThePresubmitWorkflowRunsWhatCIRuns(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(repo, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	m := regexp.MustCompile(`(?m)^K8S_MINORS \?= (.+)$`).FindStringSubmatch(read("Makefile"))
	if m == nil {
		t.Fatal("the Makefile sets no K8S_MINORS")
	}
	minors := strings.Fields(m[1])

	var ci []string
	for _, cmd := range makeCommand.FindAllStringSubmatch(read(".ci/run"), -1) {
		if cmd[1] == "test-minors" {
			for _, minor := range minors {
				ci = append(ci, "test-minor MINOR="+minor)
			}
			continue
		}
		ci = append(ci, cmd[1])
	}

	var workflow struct {
		Jobs map[string]struct {
			Strategy struct {
				Matrix map[string][]string `json:"matrix"`
			} `json:"strategy"`
			Steps []struct {
				Run string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal([]byte(read(".github/workflows/presubmit.yaml")), &workflow); err != nil {
		t.Fatal(err)
	}
	var presubmit []string
	for _, job := range workflow.Jobs {
		for _, step := range job.Steps {
			for _, cmd := range makeCommand.FindAllStringSubmatch(step.Run, -1) {
				if !strings.Contains(cmd[1], "${{ matrix.minor }}") {
					presubmit = append(presubmit, cmd[1])
					continue
				}
				for _, minor := range job.Strategy.Matrix["minor"] {
					if slices.Contains(minors, minor) {
						presubmit = append(presubmit, strings.ReplaceAll(cmd[1], "${{ matrix.minor }}", minor))
					}
				}
			}
		}
	}
	slices.Sort(ci)
	slices.Sort(presubmit)
	if len(ci) == 0 || !slices.Equal(ci, presubmit) {
		t.Errorf("the presubmit workflow runs\n  %s\nbut .ci/run runs\n  %s", strings.Join(presubmit, "\n  "), strings.Join(ci, "\n  "))
	}
	if !slices.Contains(ci, "test") {
		t.Error(".ci/run does not run make test, the README's test command")
	}
}
