// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// output formats.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
)

// report is what -o json prints.
type report struct {
	Nodes   int      `json:"nodes"`
	Rows    []Row    `json:"taints"`
	Drivers []Driver `json:"drivers"`
}

// printReport writes the rows as a table (wide adds the detail and the install) or as JSON, and, for a
// table, a one-line summary and a line per CSI driver.
func printReport(w io.Writer, rows []Row, nodes int, drivers []Driver, format string, now time.Time) error {
	slices.SortFunc(rows, func(a, b Row) int {
		return strings.Compare(a.Node+"\x00"+a.Taint, b.Node+"\x00"+b.Taint)
	})
	if format == outputJSON {
		if rows == nil {
			rows = []Row{}
		}
		if drivers == nil {
			drivers = []Driver{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(report{Nodes: nodes, Rows: rows, Drivers: drivers})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := "NODE\tTAINT\tSTATE\tSINCE\tGATE"
	if format == outputWide {
		header += "\tINSTALL\tDETAIL"
	}
	_, _ = fmt.Fprintln(tw, header) // tabwriter keeps the first error for Flush
	for _, r := range rows {
		line := strings.Join([]string{r.Node, r.Taint, r.State, since(r.Since, now), orDash(r.Gate)}, "\t")
		if format == outputWide {
			line += "\t" + r.Install + "\t" + orDash(r.Detail)
		}
		_, _ = fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w, summary(rows, nodes, now)); err != nil {
		return err
	}
	for _, line := range keptAwayLines(rows) {
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	for _, d := range drivers {
		if _, err := fmt.Fprintln(w, driverLine(d)); err != nil {
			return err
		}
	}
	return nil
}

// keptAwayLines are a line per distinct note of the pods held taints keep away
// (UntoleratedStartupTaint), with the nodes that report it: on a new node pool, every node does.
func keptAwayLines(rows []Row) []string {
	nodes := map[string][]string{}
	var notes []string
	for _, r := range rows {
		if r.KeptAway == "" || slices.Contains(nodes[r.KeptAway], r.Node) {
			continue
		}
		if nodes[r.KeptAway] == nil {
			notes = append(notes, r.KeptAway)
		}
		nodes[r.KeptAway] = append(nodes[r.KeptAway], r.Node)
	}
	lines := make([]string, 0, len(notes))
	for _, note := range notes {
		names := nodes[note]
		shown := strings.Join(names[:min(len(names), 3)], ", ")
		if len(names) > 3 {
			shown += fmt.Sprintf(" and %d more", len(names)-3)
		}
		lines = append(lines, fmt.Sprintf("Kept away on %d node(s) (%s): %s", len(names), shown, note))
	}
	return lines
}

// since is how long ago t was, as kubectl prints ages.
func since(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return duration.HumanDuration(now.Sub(*t))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// summary says how many Nodes hold a startup taint, which gates hold them, and the longest hold.
func summary(rows []Row, nodes int, now time.Time) string {
	heldNodes, doneNodes := map[string]bool{}, map[string]bool{}
	gates := map[string]int{}
	var longest time.Duration
	for _, r := range rows {
		if r.State == StateRemoved || r.State == StateForced {
			doneNodes[r.Node] = true
			continue
		}
		if !heldNodes[r.Node] {
			gate := r.Gate
			if gate == "" {
				gate = "no gate reported"
			}
			gates[gate]++
		}
		heldNodes[r.Node] = true
		if r.Since != nil && now.Sub(*r.Since) > longest {
			longest = now.Sub(*r.Since)
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "%d of %d nodes hold a startup taint", len(heldNodes), nodes)
	if len(heldNodes) > 0 {
		names := make([]string, 0, len(gates))
		for g := range gates {
			names = append(names, g)
		}
		slices.Sort(names)
		parts := make([]string, 0, len(names))
		for _, g := range names {
			parts = append(parts, fmt.Sprintf("%d on %s", gates[g], g))
		}
		fmt.Fprintf(&s, " (waiting: %s; the longest for %s)", strings.Join(parts, ", "), duration.HumanDuration(longest))
	}
	for n := range doneNodes {
		if heldNodes[n] {
			delete(doneNodes, n)
		}
	}
	if len(doneNodes) > 0 {
		fmt.Fprintf(&s, "; %d done", len(doneNodes))
	}
	return s.String() + "."
}
