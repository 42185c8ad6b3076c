// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command timings prints the slowest test packages (and lanes) and Ginkgo specs of a test run: the
// packages from go test's own summary lines in DIR/*.log and the lanes from the lines
// hack/lanes.sh adds there, the specs from the suites' JSON reports in DIR/*.json (written where
// TEST_TIMINGS_DIR points). make test-timings runs it after make test.
//
// Usage: timings [-n 10] DIR
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// timed is one package or spec and how long it ran.
type timed struct {
	name string
	took time.Duration
}

// packageLine is go test's summary of a package that ran, "ok  \tPATH\t12.345s", or the line
// hack/lanes.sh adds to a lane's log, "lane NAME took 12s".
var packageLine = regexp.MustCompile(`^(?:(?:ok|FAIL)\s+(\S+)\s+|lane (\S+) took )([0-9.]+)s`)

func main() {
	n := flag.Int("n", 10, "how many of each to print")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: timings [-n 10] DIR")
		os.Exit(2)
	}
	packages, specs, err := read(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "timings: %v\n", err)
		os.Exit(1)
	}
	show("packages and lanes", packages, *n)
	show("specs", specs, *n)
}

// read collects every package and spec time under dir.
func read(dir string) (packages, specs []timed, err error) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			if m := packageLine.FindStringSubmatch(scanner.Text()); m != nil {
				d, _ := time.ParseDuration(m[3] + "s")
				name := m[1]
				if name == "" {
					name = "lane " + m[2]
				}
				packages = append(packages, timed{strings.TrimSuffix(filepath.Base(path), ".log") + ": " + name, d})
			}
		}
		_ = f.Close()
		if err := scanner.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	reports, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, path := range reports {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		var suites []types.Report
		if err := json.Unmarshal(data, &suites); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		suite := strings.TrimSuffix(filepath.Base(path), ".json")
		for _, s := range suites {
			for _, spec := range s.SpecReports {
				// A lane's report lists the specs its label filter left out too, as skipped.
				if spec.LeafNodeType != types.NodeTypeIt || spec.State == types.SpecStateSkipped {
					continue
				}
				// The innermost container and the spec: enough to find it, short enough to read.
				name := spec.LeafNodeText
				if texts := spec.ContainerHierarchyTexts; len(texts) > 0 {
					name = texts[len(texts)-1] + " / " + name
				}
				specs = append(specs, timed{suite + ": " + name, spec.RunTime})
			}
		}
	}
	return packages, specs, nil
}

// show writes the n slowest of what, with their total.
func show(what string, all []timed, n int) {
	slices.SortFunc(all, func(a, b timed) int { return int(b.took - a.took) })
	var total time.Duration
	for _, t := range all {
		total += t.took
	}
	fmt.Printf("The %d slowest %s of %d (%s in all):\n", min(n, len(all)), what, len(all), total.Round(time.Second))
	for _, t := range all[:min(n, len(all))] {
		name := t.name
		if len(name) > 200 {
			name = name[:197] + "..."
		}
		fmt.Printf("%9s  %s\n", t.took.Round(100*time.Millisecond), name)
	}
}
