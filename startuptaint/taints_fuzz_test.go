// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// FuzzParseTaintSpec checks that the --taint parser never panics, accepts only valid keys and
// effects, and that what it accepts prints back to an equal spec. It starts from the corpus the
// differential tests share (testdata/taint-specs.txt).
func FuzzParseTaintSpec(f *testing.F) {
	seeds, err := testkit.TaintSpecCorpus("testdata/taint-specs.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range seeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		spec, err := ParseTaintSpec(in)
		if err != nil {
			return
		}
		if errs := validation.IsQualifiedName(spec.Key); len(errs) > 0 {
			t.Fatalf("accepted %q with invalid key %q: %v", in, spec.Key, errs)
		}
		switch spec.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			t.Fatalf("accepted %q with effect %q", in, spec.Effect)
		}
		again, err := ParseTaintSpec(spec.String())
		if err != nil || again != spec {
			t.Fatalf("%q parsed to %+v, which prints as %q and parses to %+v, %v", in, spec, spec.String(), again, err)
		}
	})
}

// FuzzWithoutTaints checks the filter that decides the patch: it removes exactly the taints a spec
// selects, keeps every other taint in its order, and never touches its input.
func FuzzWithoutTaints(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5}, byte(1), byte(0))
	f.Add([]byte{}, byte(0), byte(3))
	f.Add([]byte{7, 7, 7}, byte(7), byte(2))
	keys := []string{"a.example.com/agent-not-ready", "b.example.com/x", "c", "a.example.com/agent-not-ready-2"}
	effects := []corev1.TaintEffect{"", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	f.Fuzz(func(t *testing.T, raw []byte, specKey, specEffect byte) {
		taints := make([]corev1.Taint, 0, len(raw))
		for i, b := range raw {
			taints = append(taints, corev1.Taint{Key: keys[int(b)%len(keys)], Effect: effects[1+int(b>>2)%3], Value: string(rune('a' + i%26))})
		}
		before := append([]corev1.Taint(nil), taints...)
		spec := TaintSpec{Key: keys[int(specKey)%len(keys)], Effect: effects[int(specEffect)%len(effects)]}
		specs := []TaintSpec{spec}

		kept := WithoutTaints(taints, specs)
		removed := MatchingTaints(taints, specs)
		if len(kept)+len(removed) != len(taints) {
			t.Fatalf("kept %d + removed %d != %d taints", len(kept), len(removed), len(taints))
		}
		i := 0
		for _, tt := range taints {
			if spec.Matches(tt) {
				continue
			}
			if kept[i] != tt {
				t.Fatalf("kept[%d] = %+v, want %+v (order or content changed)", i, kept[i], tt)
			}
			i++
		}
		for _, tt := range kept {
			if spec.Matches(tt) {
				t.Fatalf("kept %+v, which %+v selects", tt, spec)
			}
		}
		for j := range taints {
			if taints[j] != before[j] {
				t.Fatalf("input changed at %d", j)
			}
		}
	})
}

// TestMakeFuzzNamesExistingTargets fails when make fuzz names a package other than this one, or a
// fuzz target this package no longer has: make fuzz would then fuzz nothing and still pass.
func TestMakeFuzzNamesExistingTargets(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	setting := func(name string) []string {
		m := regexp.MustCompile(`(?m)^` + name + ` = (.*)$`).FindSubmatch(makefile)
		if m == nil {
			t.Fatalf("the Makefile sets no %s", name)
		}
		return strings.Fields(string(m[1]))
	}
	if pkg := setting("FUZZ_PACKAGE"); !slices.Equal(pkg, []string{"./startuptaint"}) {
		t.Errorf("FUZZ_PACKAGE is %v; the fuzz targets are in ./startuptaint", pkg)
	}
	tests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	for _, path := range tests {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fuzzFunc.FindAllSubmatch(src, -1) {
			declared[string(m[1])] = true
		}
	}
	targets := setting("FUZZ_TARGETS")
	for _, target := range targets {
		if !declared[target] {
			t.Errorf("make fuzz names %s, which this package does not declare", target)
		}
	}
	for target := range declared {
		if !slices.Contains(targets, target) {
			t.Errorf("%s is not in the Makefile's FUZZ_TARGETS: make fuzz never runs it", target)
		}
	}
}
