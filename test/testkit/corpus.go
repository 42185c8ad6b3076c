// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TaintSpecCorpus reads the corpus of --taint items at path (startuptaint/testdata/taint-specs.txt):
// one Go-quoted string per line, lines starting with # left out.
func TaintSpecCorpus(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the taint corpus: %w", err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := strconv.Unquote(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, s)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading the taint corpus: %w", err)
	}
	return out, nil
}
