// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// FileName names the ready-file gate in logs, events and metrics.
const FileName = "file"

// ReasonNoFile is the reason class of a ready-file pattern that matches no non-empty file yet.
const ReasonNoFile = "no_file"

// watchRetry is how often a gate retries watching a directory that does not exist yet; the
// prober's interval probes the gate meanwhile.
const watchRetry = time.Second

// FileGate passes while every one of its patterns matches a regular file that is not empty. CNI
// agents (Cilium, Calico, the AWS VPC CNI) tell they are ready by writing their configuration into
// /etc/cni/net.d/. It watches the patterns' directories (inotify), so a file that appears is
// seen at once, and is probed every interval as well.
type FileGate struct {
	patterns []string
}

// NewFileGate returns a gate for the patterns: absolute paths whose last element may be a glob
// (filepath.Match syntax), such as /etc/cni/net.d/*.conflist.
func NewFileGate(patterns ...string) (*FileGate, error) {
	if len(patterns) == 0 {
		return nil, errors.New("no file pattern")
	}
	for _, p := range patterns {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%q is not an absolute path", p)
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("%q is not a valid pattern: %w", p, err)
		}
		if strings.ContainsAny(filepath.Dir(p), `*?[\`) {
			return nil, fmt.Errorf("%q: only the file name may be a pattern, not its directory", p)
		}
	}
	return &FileGate{patterns: patterns}, nil
}

// Name implements Gate.
func (g *FileGate) Name() string { return FileName }

// Timeout implements Probed: a look at a local directory needs none.
func (g *FileGate) Timeout() time.Duration { return 0 }

// Check implements Gate.
func (g *FileGate) Check(context.Context, Input) error {
	for _, p := range g.patterns {
		if !hasNonEmptyFile(p) {
			return NotReady(ReasonNoFile, fmt.Errorf("no non-empty file matches %s", p))
		}
	}
	return nil
}

func hasNonEmptyFile(pattern string) bool {
	matches, _ := filepath.Glob(pattern) // the pattern was checked in NewFileGate
	for _, m := range matches {
		if info, err := os.Stat(m); err == nil && info.Mode().IsRegular() && info.Size() > 0 {
			return true
		}
	}
	return false
}

// Watch implements Watcher. It calls changed whenever something changes in a pattern's directory, until ctx ends. A
// directory that does not exist yet, or is removed, is watched again once it is there.
func (g *FileGate) Watch(ctx context.Context, changed func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %v: %w", g.patterns, err)
	}
	defer func() { _ = w.Close() }()
	retry := time.NewTicker(watchRetry)
	defer retry.Stop()
	watching := map[string]bool{}
	for {
		added := false
		for _, p := range g.patterns {
			dir := filepath.Dir(p)
			if !watching[dir] && w.Add(dir) == nil {
				watching[dir], added = true, true
			}
		}
		if added {
			changed() // a file may have appeared before the watch began
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if watching[ev.Name] && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				watching[ev.Name] = false // the directory itself went: watch its successor
			}
			changed()
		case _, ok := <-w.Errors:
			if !ok {
				return nil
			}
			changed() // events may have been lost: probe now
		case <-retry.C:
		}
	}
}
