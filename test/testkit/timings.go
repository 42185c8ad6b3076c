// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/reporters"
)

// TimingsDirEnv names the directory where each Ginkgo suite writes its JSON report when set;
// make test sets it, and make test-timings reads the reports (test/timings).
const TimingsDirEnv = "TEST_TIMINGS_DIR"

// notInName is what a report's file name leaves out of a label filter.
var notInName = regexp.MustCompile(`[^a-zA-Z0-9.]+`)

// ReportTimings is every suite's ReportAfterSuite: it writes the suite's report, with each spec's
// run time, to TEST_TIMINGS_DIR, named after the suite, the minor it ran on and its label filter.
func ReportTimings(report ginkgo.Report) {
	dir := os.Getenv(TimingsDirEnv)
	if dir == "" {
		return
	}
	name := strings.ToLower(strings.ReplaceAll(report.SuiteDescription, " ", "-"))
	if minor, ok := EnvtestMinor(); ok {
		name += fmt.Sprintf("-1.%d", minor)
	}
	// make test runs a suite as several processes, a label filter each: one file each.
	if filter := report.SuiteConfig.LabelFilter; filter != "" {
		filter = strings.NewReplacer("!", "not-", "&&", "-and-", "||", "-or-").Replace(filter)
		name += "-" + strings.Trim(notInName.ReplaceAllString(filter, "-"), "-")
	}
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = reporters.GenerateJSONReport(report, filepath.Join(dir, name+".json"))
	}
	// A report that cannot be written fails no test: it only times them.
	if err != nil {
		fmt.Fprintf(os.Stderr, "timings: %v\n", err)
	}
}
