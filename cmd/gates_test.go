// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const chartDir = "../charts/startup-taint-remover/"

// chartFile reads one of the chart's files.
func chartFile(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(chartDir + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// The chart repeats each gate kind in its values, its schema (at the top and in a group), the
// groups file it writes (_helpers.tpl), the DaemonSet's flags, and the list of gates refused beside
// groups. Each of those must cover exactly the kinds of gateKinds the chart offers.
func TestTheChartCoversEveryGateKind(t *testing.T) {
	var offered []string
	for _, k := range gateKinds {
		if k.chartValue != "" {
			offered = append(offered, k.chartValue)
		}
	}
	slices.Sort(offered)

	var schema struct {
		Properties  map[string]json.RawMessage `json:"properties"`
		Definitions struct {
			Group struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"group"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal([]byte(chartFile(t, "values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	// A group's gates: its settings less its name, taints and condition type.
	var groupGates []string
	for key := range schema.Definitions.Group.Properties {
		if !slices.Contains([]string{"name", "taints", "conditionType"}, key) {
			groupGates = append(groupGates, key)
		}
	}
	slices.Sort(groupGates)
	if !slices.Equal(groupGates, offered) {
		t.Errorf("the schema's group has the gates %v; gateKinds offers %v", groupGates, offered)
	}

	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(chartFile(t, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	helpers, daemonSet := chartFile(t, "templates/_helpers.tpl"), chartFile(t, "templates/daemonset.yaml")
	refusedBeside := regexp.MustCompile(`fail "groups: set ([^"]*) in each group`).FindStringSubmatch(chartFile(t, "templates/groups.yaml"))
	if refusedBeside == nil {
		t.Fatal("templates/groups.yaml refuses no gate beside groups")
	}
	for _, k := range gateKinds {
		if k.chartValue == "" {
			if strings.Contains(helpers, k.flag+":") || strings.Contains(daemonSet, "--"+k.flag) {
				t.Errorf("--%s, which the chart does not offer, is in its templates", k.flag)
			}
			continue
		}
		if _, ok := schema.Properties[k.chartValue]; !ok {
			t.Errorf("%s (--%s) is no property of the schema", k.chartValue, k.flag)
		}
		value, ok := values[k.chartValue]
		if !ok {
			t.Errorf("%s (--%s) is not in values.yaml", k.chartValue, k.flag)
		}
		// Every flag of the kind reaches the agent, alone and in a group.
		fs := flag.NewFlagSet(k.flag, flag.ContinueOnError)
		k.bind(fs, &groupOptions{})
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(helpers, "  "+f.Name+":") {
				t.Errorf("--%s is not written into a group (templates/_helpers.tpl)", f.Name)
			}
			if !strings.Contains(daemonSet, "--"+f.Name) {
				t.Errorf("--%s is not passed to the agent (templates/daemonset.yaml)", f.Name)
			}
		})
		// A gate that is off by default is refused beside groups, where no group would use it; one
		// on by default (the CSI gate) is each group's own.
		off := isOff(value)
		if refused := strings.Contains(refusedBeside[1], k.chartValue); refused != off {
			t.Errorf("%s: refused beside groups %v, off by default %v", k.chartValue, refused, off)
		}
	}
}

// isOff reports whether a chart value turns its gate off: empty, or an object whose settings are
// all empty strings or false.
func isOff(value any) bool {
	switch v := value.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		for _, setting := range v {
			if s, ok := setting.(string); ok && s != "" {
				return false
			}
		}
		return true
	}
	return false
}
