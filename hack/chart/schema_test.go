// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// taintCorpus reads the corpus of --taint items the main module's tests share
// (startuptaint/testdata/taint-specs.txt: one Go-quoted string per line). This module cannot import
// that module's reader (test/testkit), so it reads the same format here.
func taintCorpus(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../startuptaint/testdata/taint-specs.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	for scanner := bufio.NewScanner(f); scanner.Scan(); {
		if line := scanner.Text(); line != "" && !strings.HasPrefix(line, "#") {
			s, err := strconv.Unquote(line)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			out = append(out, s)
		}
	}
	return out
}

// kubernetesAccepts is Kubernetes' own answer for a taint KEY[:EFFECT]: a qualified name, as
// k8s.io/apimachinery validates a taint's key, and one of the three effects.
func kubernetesAccepts(spec string) bool {
	key, effect, hasEffect := strings.Cut(spec, ":")
	return len(validation.IsQualifiedName(key)) == 0 &&
		(!hasEffect || slices.Contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, effect))
}

// schemaAccepts renders the chart with values, from a file as a user would write them, and
// reports whether the schema let them through.
func schemaAccepts(t *testing.T, values map[string]any) bool {
	t.Helper()
	raw, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Template(chartDir, "str", "kube-system", []string{file}, nil)
	if err != nil && !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
		t.Fatalf("%v: not the schema's refusal: %v", values, err)
	}
	return err == nil
}

// The chart's schema is the one place a qualified name is written as a regular expression; it must
// answer as Kubernetes' own validation does, for taint keys and for the agent's condition type,
// over the parser's corpus. (A list item is trimmed before it is parsed, so items padded with
// whitespace, which the schema refuses, are left out.)
func TestTheSchemaAgreesWithKubernetesOnTaintKeysAndConditionTypes(t *testing.T) {
	kubelets := []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}
	checked := 0
	for _, spec := range taintCorpus(t) {
		if spec != strings.TrimSpace(spec) || strings.ContainsAny(spec, ",;") {
			continue
		}
		if got, want := schemaAccepts(t, map[string]any{"taints": []string{spec}}), kubernetesAccepts(spec); got != want {
			t.Errorf("taints: [%q]: the schema accepts it: %t; Kubernetes: %t", spec, got, want)
		}
		key, _, _ := strings.Cut(spec, ":")
		want := key != "" && len(validation.IsQualifiedName(key)) == 0 && !slices.Contains(kubelets, key)
		if got := schemaAccepts(t, map[string]any{"conditionType": key}); got != want && key != "" {
			t.Errorf("conditionType: %q: the schema accepts it: %t; Kubernetes and the agent: %t", key, got, want)
		}
		checked++
	}
	for _, kubelet := range kubelets {
		if schemaAccepts(t, map[string]any{"conditionType": kubelet}) {
			t.Errorf("conditionType: %s, a condition kubelet or the node lifecycle controller writes, is accepted", kubelet)
		}
	}
	if checked < 40 {
		t.Fatalf("checked %d items of the corpus; want at least 40", checked)
	}
}
