// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The --config file: the groups of taints and gates one agent serves.

// configFile is what --config holds: groups, each a map from the name of a group flag (groupFlags)
// to its value (a list for a repeatable flag), and the group's name.
type configFile struct {
	Groups []map[string]any `json:"groups"`
}

// readGroups reads the groups of --config, each parsed by the group flags' own parsers and
// checked as the command line's group is. A group flag on the command line as well is refused:
// which would win?
func (o *options) readGroups(explicit map[string]bool) error {
	for _, name := range groupFlags {
		if explicit[name] {
			return fmt.Errorf("--%s: set it in the groups of --config, not on the command line", name)
		}
	}
	data, err := os.ReadFile(o.configFile)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var file configFile
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		// The YAML library lists several problems on lines of their own; the caller prints one.
		return fmt.Errorf("--config %s: %s", o.configFile, strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
	}
	if len(file.Groups) == 0 {
		return fmt.Errorf("--config %s: groups: empty; list at least one group", o.configFile)
	}
	for i, settings := range file.Groups {
		g, explicit, err := parseGroup(settings, o.setting(i))
		switch {
		case err != nil:
		case g.name == "":
			// The reconciler lets a lone group go unnamed; a group of a file is always named.
			err = fmt.Errorf(`%s: "" is not a DNS label: every group of --config needs a name`, o.setting(i)("name"))
		default:
			err = o.validateGroup(&g, explicit, o.setting(i))
		}
		if err != nil {
			return fmt.Errorf("--config %s: %w", o.configFile, err)
		}
		o.groups = append(o.groups, g)
	}
	return nil
}

// parseGroup parses one group of --config with the group flags' own parsers, and returns it with
// the flags it set.
func parseGroup(settings map[string]any, setting func(string) string) (groupOptions, map[string]bool, error) {
	var g groupOptions
	fs := flag.NewFlagSet("group", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindGroupFlags(fs, &g)
	explicit := map[string]bool{}
	keys := make([]string, 0, len(settings))
	for key := range settings {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		value := settings[key]
		if key == nameSetting {
			name, ok := value.(string)
			if !ok {
				return g, nil, fmt.Errorf("%s: not a string", setting("name"))
			}
			g.name = name
			continue
		}
		if fs.Lookup(key) == nil {
			return g, nil, fmt.Errorf("%s: not a setting of a group; those are name, %s", setting(key), strings.Join(groupFlags, ", "))
		}
		values, ok := value.([]any)
		if !ok {
			values = []any{value}
		}
		for _, v := range values {
			switch v.(type) {
			case string, bool, float64:
			default:
				return g, nil, fmt.Errorf("%s: %v is not a string, a boolean or a number", setting(key), v)
			}
			if err := fs.Set(key, fmt.Sprint(v)); err != nil {
				return g, nil, fmt.Errorf("%s: %w", setting(key), err)
			}
		}
		explicit[key] = true
	}
	return g, explicit, nil
}
