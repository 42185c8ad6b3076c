// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// builtGroup is a group's configuration with, by gate, the setting that made it, so that an error
// the reconciler finds in a gate names that setting.
type builtGroup struct {
	controllers.Group
	settings []string
}

// newReconciler makes the reconciler the options describe, with its gates. No gate connects to
// anything before its first check, so this touches neither the network nor the driver.
func (o *options) newReconciler() (*controllers.NodeReconciler, []builtGroup) {
	r := &controllers.NodeReconciler{
		NodeName:            o.nodeName,
		NodeAgentNamespaces: o.nodeAgentNamespaces,
		ProbeInterval:       o.probeInterval,
		MaxWait:             o.maxWait,
		RetaintAfter:        o.retaintAfter,
		DryRun:              o.dryRun,
		ConditionsOnly:      o.conditionsOnly,
	}
	built := make([]builtGroup, 0, len(o.groups))
	for _, g := range o.groups {
		b := o.buildGroup(g)
		built = append(built, b)
		r.Groups = append(r.Groups, b.Group)
	}
	return r, built
}

// buildGroup makes the gates of one group of taints, in the order of gateKinds.
func (o *options) buildGroup(g groupOptions) builtGroup {
	b := builtGroup{Group: controllers.Group{Name: g.name, Taints: g.taints, ConditionType: g.conditionType}}
	add := func(setting string, gate gates.Gate) {
		b.Gates, b.settings = append(b.Gates, gate), append(b.settings, setting)
	}
	for _, k := range gateKinds {
		k.build(o, g, add)
	}
	return b
}

// validateReconciler builds the reconciler and validates it, so that the rules it checks are
// checked once, by it, and reports its first problem in one line that names the flag or the
// setting of --config. The reconciler it validated is the one main runs: its gates are built once.
func (o *options) validateReconciler() error {
	r, built := o.newReconciler()
	if errs := r.Validate(); len(errs) > 0 {
		return errors.New(o.describe(errs[0], built))
	}
	o.reconciler = r
	return nil
}

// fieldPath parses the reconciler's field paths: a field of the reconciler, or of a group, with
// an index into it.
var fieldPath = regexp.MustCompile(`^(?:groups\[(\d+)\]\.)?(\w+)(?:\[(\d+)\])?$`)

// groupSettings are the group flags by the name of the Group field they set.
var groupSettings = map[string]string{nameSetting: nameSetting, "taints": "taint", "conditionType": "condition-type"}

// topSettings are the flags by the name of the NodeReconciler field they set.
var topSettings = map[string]string{"nodeName": "node-name", "maxWait": "max-wait", "retaintAfter": "retaint-after",
	"groups": "config", "conditionsOnly": "conditions-only"}

// describe writes e as one line that names the flag, or the --config setting, of its field.
func (o *options) describe(e *field.Error, built []builtGroup) string {
	m := fieldPath.FindStringSubmatch(e.Field)
	detail := e.Detail
	switch e.Type {
	case field.ErrorTypeInvalid:
		detail = fmt.Sprintf("%q %s", fmt.Sprint(e.BadValue), e.Detail)
	case field.ErrorTypeDuplicate:
		detail = fmt.Sprintf("%q is another group's", fmt.Sprint(e.BadValue))
	}
	if m == nil {
		return e.Error()
	}
	if m[1] == "" {
		if name, ok := topSettings[m[2]]; ok {
			return "--" + name + ": " + detail
		}
		return e.Error()
	}
	i, _ := strconv.Atoi(m[1])
	setting := o.setting(-1)
	if o.configFile != "" {
		setting = o.setting(i)
	}
	name := groupSettings[m[2]]
	if m[2] == "gates" {
		if m[3] == "" {
			names := make([]string, len(gateFlags))
			for k, f := range gateFlags {
				names[k] = setting(f)
			}
			return o.inConfig(detail + ": set " + strings.Join(names, ", "))
		}
		j, _ := strconv.Atoi(m[3])
		name = built[i].settings[j]
	}
	if name == "" {
		return o.inConfig(e.Error())
	}
	return o.inConfig(setting(name) + ": " + detail)
}

// inConfig prefixes msg with --config and its file, when the groups come from one.
func (o *options) inConfig(msg string) string {
	if o.configFile == "" {
		return msg
	}
	return fmt.Sprintf("--config %s: %s", o.configFile, msg)
}
