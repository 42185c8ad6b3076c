// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package docs checks the documentation as a reader meets it: every relative link and anchor in
// README.md and docs/ leads somewhere, and the runbook answers every alert the install ships.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	"sigs.k8s.io/yaml"
)

const repo = "../.."

// pages are README.md and every Markdown file under docs/.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{filepath.Join(repo, "README.md")}
	err := filepath.WalkDir(filepath.Join(repo, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			out = append(out, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	link    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.+)$`)
	// notInSlug is what GitHub drops from a heading to make its anchor.
	notInSlug = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// prose returns a page's lines outside code fences.
func prose(data string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(data, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors are the anchors GitHub gives a page's headings.
func anchors(data string) map[string]bool {
	out := map[string]bool{}
	for _, line := range prose(data) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		anchor := slug
		for n := 1; out[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", slug, n)
		}
		out[anchor] = true
	}
	return out
}

func TestEveryRelativeLinkAndAnchorLeadsSomewhere(t *testing.T) {
	var broken []string
	checked := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range prose(string(data)) {
			// Inline code is not a link.
			line = regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "")
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				file := page
				if path != "" {
					file = filepath.Join(filepath.Dir(page), path)
				}
				rel, _ := filepath.Rel(repo, page)
				info, err := os.Stat(file)
				if err != nil {
					broken = append(broken, fmt.Sprintf("%s: %s: no such file", rel, target))
					continue
				}
				if anchor == "" || info.IsDir() {
					continue
				}
				content, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(content))[anchor] {
					broken = append(broken, fmt.Sprintf("%s: %s: no such heading", rel, m[1]))
				}
			}
		}
	}
	if len(broken) > 0 {
		t.Fatalf("%d of %d relative links are broken:\n%s", len(broken), checked, strings.Join(broken, "\n"))
	}
	t.Logf("%d relative links and anchors in %d pages lead somewhere", checked, len(pages(t)))
}

func TestTheREADMEIsAFrontPage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 300 {
		t.Fatalf("README.md has %d lines: move the detail into docs/", n)
	}
}

func TestTheRunbookAnswersEveryAlert(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "config/prometheus/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile(filepath.Join(repo, "docs/runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(string(runbook), "\n## ")
	var alerts []string
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			i := slices.IndexFunc(sections, func(s string) bool { return strings.HasPrefix(s, "`"+r.Alert+"`") })
			if i < 0 {
				t.Errorf("docs/runbook.md has no section ## `%s`", r.Alert)
				continue
			}
			for _, part := range []string{"**What it means.**", "**Check first.**", "**What to do.**", "```sh"} {
				if !strings.Contains(sections[i], part) {
					t.Errorf("docs/runbook.md, %s: no %s", r.Alert, part)
				}
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alert in config/prometheus/rules.yaml")
	}
}

func TestTheObservabilityPageShowsEachDashboardPanelsQueries(t *testing.T) {
	panels, err := testkit.DashboardPanels(filepath.Join(repo, "config/grafana/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(repo, "docs/observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(panels) == 0 {
		t.Fatal("the dashboard has no panel")
	}
	for _, p := range panels {
		i := strings.Index(string(page), "\n### "+p.Title+"\n")
		if i < 0 {
			t.Errorf("docs/observability.md describes no panel %q", p.Title)
			continue
		}
		section := string(page)[i:]
		for _, target := range p.Targets {
			if !strings.Contains(section, "\n"+target.Expr+"\n") {
				t.Errorf("docs/observability.md, panel %q: the query %s is not shown as the dashboard has it", p.Title, target.Expr)
			}
		}
	}
}

// TestTheStatedMinimumIsTheTestedOne checks that the oldest supported minor of Kubernetes is one
// number: the agent's (startuptaint.MinKubernetesMinor), the oldest make test-minors runs on a
// build of its own, and the one below it where the agent must refuse, and the one the install
// page states; and that the page states each feature's own minimum as the code declares it.
func TestTheStatedMinimumIsTheTestedOne(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	setting := func(variable string) string {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(variable) + ` \??= (.+)$`).FindSubmatch(makefile)
		if m == nil {
			t.Errorf("the Makefile sets no %s", variable)
			return ""
		}
		return string(m[1])
	}
	below := fmt.Sprintf("1.%d", startuptaint.MinKubernetesMinor-1)
	oldest := fmt.Sprintf("1.%d", startuptaint.MinKubernetesMinor)
	if got := setting("K8S_BELOW_MINIMUM"); got != below {
		t.Errorf("the Makefile's K8S_BELOW_MINIMUM is %s, want %s", got, below)
	}
	minors := strings.Fields(setting("K8S_MINORS"))
	if len(minors) < 2 || minors[0] != below || minors[1] != oldest {
		t.Errorf("the Makefile's K8S_MINORS is %v, want %s and %s first", minors, below, oldest)
	}
	for _, minor := range []string{below, oldest} {
		if got, ok := startuptaint.ServerMinor(setting("K8S_RELEASE_" + minor)); !ok || fmt.Sprintf("1.%d", got) != minor {
			t.Errorf("the Makefile's K8S_RELEASE_%s is not a release of %s: both run on a build of their own", minor, minor)
		}
	}
	install, err := os.ReadFile(filepath.Join(repo, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("The cluster must run Kubernetes 1.%d or later", startuptaint.MinKubernetesMinor),
		fmt.Sprintf("| taint at registration | 1.%d |", startuptaint.TaintAtRegistrationMinor),
		fmt.Sprintf("| `--require-resourceslice` (DRA drivers) | 1.%d |", startuptaint.ResourceSliceMinor),
	} {
		if !strings.Contains(string(install), want) {
			t.Errorf("docs/install.md does not say %q", want)
		}
	}
}
