// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

type report struct {
	machine  string
	config   benchConfig
	reaction []reactionResult
	memory   []memResult
	idle     []idleResult
	fleet    fleetResult
	elapsed  time.Duration
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func verbs(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func (r *report) find(design string, nodes int) (memResult, bool) {
	for _, m := range r.memory {
		if m.design == design && m.nodes == nodes {
			return m, true
		}
	}
	return memResult{}, false
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# startup-taint-remover benchmark")
	p("")
	p("Machine: %s. Control plane: envtest (kube-apiserver v1.37.2 and etcd built from source) on the same machine. "+
		"Whole run: %s (`make bench`).", r.machine, r.elapsed.Round(time.Second))
	p("")
	p("## Reaction time (%d trials each)", r.config.trials)
	p("")
	p("Measured from the trigger to the watch event that shows the taint gone. Nodes side by side: trials that")
	p("mostly wait for a probe run on several nodes at once.")
	p("")
	p("| scenario | nodes side by side | p50 | p95 | p99 | target | |")
	p("|---|---|---|---|---|---|---|")
	for _, x := range r.reaction {
		p("| %s | %d | %s | %s | %s | %s | %s |", x.name, x.lanes, ms(x.percentile(0.5)), ms(x.percentile(0.95)),
			ms(x.percentile(0.99)), x.target, verdict(x.percentile(0.99) < x.limit))
	}
	p("")
	p("## Memory and API requests of one agent process against cluster size (median of %d starts)", r.config.repeats)
	p("")
	p("| design | Nodes | VmRSS | RssAnon | Go heap | requests at start |")
	p("|---|---|---|---|---|---|")
	for _, m := range r.memory {
		p("| %s | %d | %.1f MiB | %.1f MiB | %.1f MiB | %d (%s) |", m.design, m.nodes, m.vmRSS/mib, m.rssAnon/mib, m.heap/mib,
			total(m.requests), verbs(m.requests))
	}
	p("")
	ours := designOurs
	small, okSmall := r.find(ours, slices.Min(r.config.sizes))
	large, okLarge := r.find(ours, slices.Max(r.config.sizes))
	base, okBase := r.find(designBaseline, slices.Max(r.config.sizes))
	if okSmall && okLarge && okBase {
		growth := (large.vmRSS - small.vmRSS) / small.vmRSS * 100
		var maxAnon float64
		for _, m := range r.memory {
			if m.design == ours {
				maxAnon = max(maxAnon, m.rssAnon)
			}
		}
		p("| target | measured | |")
		p("|---|---|---|")
		p("| VmRSS grows < 10%% from %d to %d Nodes | %+.1f%% | %s |", small.nodes, large.nodes, growth, verdict(growth < 10))
		p("| RssAnon < 16 MiB | at most %.1f MiB | %s |", maxAnon/mib, verdict(maxAnon < 16*mib))
		p("| baseline / ours at %d Nodes | VmRSS %.1fx, RssAnon %.1fx, heap %.1fx | |", large.nodes,
			base.vmRSS/large.vmRSS, base.rssAnon/large.rssAnon, base.heap/large.heap)
		if floor, ok := r.find(designFloor, slices.Max(r.config.sizes)); ok {
			p("| ours / floor at %d Nodes | VmRSS %.2fx (%+.1f MiB), RssAnon %.2fx (%+.1f MiB) | |", large.nodes,
				large.vmRSS/floor.vmRSS, (large.vmRSS-floor.vmRSS)/mib, large.rssAnon/floor.rssAnon, (large.rssAnon-floor.rssAnon)/mib)
		}
	}
	for _, i := range r.idle {
		periodic := total(i.requests)
		p("| %s idle %s at %d Nodes: zero periodic requests | %d (%s); VmRSS %.1f → %.1f MiB, RssAnon %.1f → %.1f MiB | %s |",
			i.design, i.period, i.nodes, periodic, verbs(i.requests), i.rssStart/mib, i.rssEnd/mib, i.anonStart/mib, i.anonEnd/mib,
			verdict(periodic == 0))
		if i.design == designOurs {
			p("| idle, secure metrics on: VmRSS ≤ 36 MiB and RssAnon ≤ 8 MiB | %.1f and %.1f MiB | %s |",
				i.rssEnd/mib, i.anonEnd/mib, verdict(i.rssEnd <= 36*mib && i.anonEnd <= 8*mib))
		}
	}
	p("")
	f := r.fleet
	pct := func(q float64) time.Duration { return percentile(f.patchLatency, q) }
	p("## Fleet start: %d agents at once against %d tainted Nodes whose drivers are ready (median of %d runs)",
		f.agents, f.agents, r.config.repeats)
	p("")
	p("| untainted | time until all untainted | target | requests by verb | patch latency p50 / p99 |")
	p("|---|---|---|---|---|")
	reqs := map[string]int{}
	for k, v := range f.requests {
		reqs[k] = int(v)
	}
	p("| %d / %d | %s | < 30 s: %s | %s | %s / %s |", f.untainted, f.agents, f.elapsed.Round(time.Millisecond),
		verdict(f.untainted == f.agents && f.elapsed < 30*time.Second), verbs(reqs), ms(pct(0.5)), ms(pct(0.99)))
	return b.String()
}

// writeChart draws VmRSS and RssAnon of each design against cluster size as grouped bars.
func writeChart(path string, r *report) error {
	const w, h, left, bottom, top = 900, 480, 70, 60, 50
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	text := func(x, y int, s string) {
		d := &font.Drawer{Dst: img, Src: image.NewUniform(color.Black), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
		d.DrawString(s)
	}
	var peak float64
	for _, m := range r.memory {
		peak = max(peak, m.vmRSS)
	}
	if peak == 0 {
		return nil
	}
	scale := float64(h-bottom-top) / (peak * 1.1)
	axis := color.RGBA{80, 80, 80, 255}
	draw.Draw(img, image.Rect(left, top, left+1, h-bottom), image.NewUniform(axis), image.Point{}, draw.Src)
	draw.Draw(img, image.Rect(left, h-bottom, w-20, h-bottom+1), image.NewUniform(axis), image.Point{}, draw.Src)
	for mb := 0.0; mb <= peak*1.1/mib; mb += 25 {
		y := h - bottom - int(mb*mib*scale)
		text(10, y+4, fmt.Sprintf("%4.0f MiB", mb))
	}
	text(left, 25, "VmRSS (light) and RssAnon (dark) of one agent process vs Nodes in the cluster")
	colors := map[string][2]color.RGBA{
		designOurs:     {{120, 170, 230, 255}, {30, 90, 170, 255}},
		designBaseline: {{240, 170, 120, 255}, {190, 90, 30, 255}},
		designFloor:    {{190, 190, 190, 255}, {110, 110, 110, 255}},
	}
	designs := []string{designOurs, designBaseline, designFloor}
	groupW := (w - left - 40) / len(r.config.sizes)
	for gi, n := range r.config.sizes {
		x0 := left + 20 + gi*groupW
		text(x0+groupW/4, h-bottom+20, fmt.Sprintf("%d Nodes", n))
		bi := 0
		for _, design := range designs {
			m, ok := r.find(design, n)
			if !ok {
				continue
			}
			bx := x0 + bi*(groupW/4)
			for k, v := range []float64{m.vmRSS, m.rssAnon} {
				top := h - bottom - int(v*scale)
				bar := image.Rect(bx+k*(groupW/8), top, bx+(k+1)*(groupW/8)-3, h-bottom)
				draw.Draw(img, bar, image.NewUniform(colors[design][k]), image.Point{}, draw.Src)
				text(bar.Min.X, top-4, fmt.Sprintf("%.0f", v/mib))
			}
			bi++
		}
	}
	legendY := h - 15
	for i, design := range designs {
		x := left + i*270
		draw.Draw(img, image.Rect(x, legendY-10, x+12, legendY), image.NewUniform(colors[design][1]), image.Point{}, draw.Src)
		text(x+18, legendY, design)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
