// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// flagReference turns the binary's -h output (flag.PrintDefaults) into docs/flags.md.
func flagReference(usage string) string {
	var b strings.Builder
	b.WriteString("# Flag reference\n\n")
	b.WriteString("Generated from the binary's own flag set by `make docs`; a test fails when it is stale.\n")
	b.WriteString("[Configuration](configuration.md) explains the flags and the groups file.\n\n")
	b.WriteString("| flag | value | description |\n|---|---|---|\n")
	var name, value string
	var text []string
	flush := func() {
		if name != "" {
			desc := strings.Join(text, " ")
			desc = strings.ReplaceAll(desc, "|", `\|`)
			if value != "" {
				value = "`" + value + "`"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", name, value, desc)
		}
		name, value, text = "", "", nil
	}
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			flush()
			name, value, _ = strings.Cut(strings.TrimPrefix(line, "  -"), " ")
		case strings.HasPrefix(line, "    \t"):
			text = append(text, strings.TrimSpace(line))
		}
	}
	flush()
	return b.String()
}

func TestTheFlagReferenceIsCurrent(t *testing.T) {
	var usage bytes.Buffer
	if _, err := parseOptions([]string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	got := flagReference(usage.String())
	if !strings.Contains(got, "| `--taint` |") || !strings.Contains(got, "| `--conditions-only` |") {
		t.Fatalf("the reference misses flags:\n%s", got)
	}
	const path = "../docs/flags.md"
	if os.Getenv("UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil || string(want) != got {
		t.Fatalf("docs/flags.md is stale (%v): run `make docs`", err)
	}
}
