// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestTheKrewManifestListsEveryPlatformTheReleaseBuilds checks hack/krew/startup-taints.yaml
// against the Makefile's PLUGIN_PLATFORMS, which `make release` archives and writes the sums of.
func TestTheKrewManifestListsEveryPlatformTheReleaseBuilds(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PLUGIN_PLATFORMS = (.+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no PLUGIN_PLATFORMS")
	}
	template, err := os.ReadFile("../../hack/krew/startup-taints.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(template), "{{VERSION}}", "v1.2.3")
	for _, platform := range strings.Fields(string(m[1])) {
		goos, arch, _ := strings.Cut(platform, "/")
		text = strings.ReplaceAll(text, "{{SHA256_"+goos+"_"+arch+"}}", strings.Repeat("0", 64))
	}
	if strings.Contains(text, "{{") {
		t.Fatalf("a placeholder the release does not write: %s", text)
	}
	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   struct{ Name string }
		Spec       struct {
			Version          string
			Homepage         string
			ShortDescription string `json:"shortDescription"`
			Description      string
			Platforms        []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string                                  `json:"uri"`
				SHA256   string                                  `json:"sha256"`
				Bin      string                                  `json:"bin"`
			}
		}
	}
	if err := yaml.UnmarshalStrict([]byte(text), &plugin); err != nil {
		t.Fatal(err)
	}
	if plugin.Kind != "Plugin" || plugin.Metadata.Name != "startup-taints" || plugin.Spec.Version != "v1.2.3" {
		t.Fatalf("%+v", plugin)
	}
	platforms := strings.Fields(string(m[1]))
	if len(plugin.Spec.Platforms) != len(platforms) {
		t.Fatalf("%d platforms in the manifest, %d in PLUGIN_PLATFORMS", len(plugin.Spec.Platforms), len(platforms))
	}
	for i, p := range plugin.Spec.Platforms {
		want := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		archive := "/v1.2.3/kubectl-startup_taints-" + strings.ReplaceAll(want, "/", "-") + ".tar.gz"
		if want != platforms[i] || !strings.HasSuffix(p.URI, archive) || p.Bin != "kubectl-startup_taints" {
			t.Fatalf("platform %d: %+v, want %s from %s", i, p, platforms[i], archive)
		}
	}
}
