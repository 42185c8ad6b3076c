{{/* The release's name, with the chart's unless the release already carries it. */}}
{{- define "str.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "str.labels" -}}
app.kubernetes.io/name: startup-taint-remover
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "str.selector" -}}
app.kubernetes.io/name: startup-taint-remover
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The startup taints as one KEY[:EFFECT] list, the value of --taint; with groups, each group's list,
separated by semicolons, as the admission policy reads them.
*/}}
{{- define "str.taints" -}}
{{- if .Values.groups -}}
{{- $lists := list -}}
{{- range .Values.groups }}{{ $lists = append $lists (join "," .taints) }}{{ end -}}
{{- join ";" $lists -}}
{{- else -}}
{{- join "," .Values.taints -}}
{{- end -}}
{{- end -}}

{{/* The Node conditions the agent writes: conditionType, or each group's, comma-separated. */}}
{{- define "str.conditionTypes" -}}
{{- if .Values.groups -}}
{{- $types := list -}}
{{- range .Values.groups }}{{ with .conditionType }}{{ $types = append $types . }}{{ end }}{{ end -}}
{{- join "," $types -}}
{{- else -}}
{{- .Values.conditionType -}}
{{- end -}}
{{- end -}}

{{/*
str.groups is the --config file for groups: each group with the flags' names (see the README),
its CSI socket directory mounted at /csi/NAME.
*/}}
{{- define "str.groups" -}}
groups:
{{- range .Values.groups }}
- name: {{ .name }}
  taint: {{ toJson .taints }}
  {{- if and .csi .csi.socketDir }}
  csi-address: /csi/{{ .name }}/csi.sock
  require-csinode: {{ ne .csi.requireCSINode false }}
  require-allocatable: {{ .csi.requireAllocatable | default false }}
  {{- end }}
  {{- with .readyURL }}
  ready-url: {{ toJson . }}
  {{- end }}
  {{- with .readyFiles }}
  ready-file: {{ toJson . }}
  {{- end }}
  {{- with .requireResources }}
  require-resource: {{ toJson . }}
  {{- end }}
  {{- with .requireResourceSlices }}
  require-resourceslice: {{ toJson . }}
  {{- end }}
  {{- with .requireConditions }}
  require-condition: {{ toJson . }}
  {{- end }}
  {{- with .requirePods }}
  require-pod: {{ toJson . }}
  {{- end }}
  {{- with .nodeAgents }}
  node-agents: {{ . }}
  {{- end }}
  {{- with .conditionType }}
  condition-type: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
str.render writes a manifest shared with the kustomize tree (files/, links into config/), with
the settings written in where kustomize's config/components/taints writes them: the taints, the
re-taint delay and the condition type replace their placeholders, conditions-only mode is turned
on as config/components/conditions-only turns it on (with the grant's verb "report"), and the object gets this release's name and
labels. Call it with (list $ "files/NAME.yaml" "name-suffix").
*/}}
{{- define "str.render" -}}
{{- $root := index . 0 -}}
{{- $text := $root.Files.Get (index . 1) -}}
{{- $text = $text | replace `'\\TAINTS'` (printf "'%s'" (include "str.taints" $root)) -}}
{{- $text = $text | replace `'\\RETAINTAFTER'` (printf "'%s'" $root.Values.retaintAfter) -}}
{{- $text = $text | replace `'\\CONDITIONTYPE'` (printf "'%s'" (include "str.conditionTypes" $root)) -}}
{{- if $root.Values.conditionsOnly -}}
{{- $text = $text | replace `check('remove')` `check('report')` -}}
{{- end -}}
{{- $obj := fromYaml $text -}}
{{- if $root.Values.conditionsOnly -}}
{{- range $obj.spec.variables -}}
{{- if eq .name "conditionsOnly" }}{{ $_ := set . "expression" "true" }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $obj "metadata" (dict "name" (printf "%s-%s" (include "str.fullname" $root) (index . 2)) "labels" (fromYaml (include "str.labels" $root))) -}}
{{- toYaml $obj -}}
{{- end -}}

{{/*
str.mounts lists the pod's volumes, each with where the container mounts it: the CSI socket
directory at /csi (with groups, the groups file, and each group's socket directory at /csi/NAME),
kubelet's plugins registry read-only at the agent's default --plugins-registry when a CSI gate or
the node agents' gate is on, and each ready file's directory read-only at the same path as on the host, once however many
files (of however many groups) it holds.
*/}}
{{- define "str.mounts" -}}
{{- $mounts := list -}}
{{- $files := .Values.readyFiles -}}
{{- if .Values.groups -}}
{{- $mounts = append $mounts (dict "name" "groups" "mountPath" "/etc/startup-taint-remover" "readOnly" true "configMap" (printf "%s-groups" (include "str.fullname" .))) -}}
{{- $files = list -}}
{{- range .Values.groups -}}
{{- if and .csi .csi.socketDir -}}
{{- $mounts = append $mounts (dict "name" (printf "plugin-dir-%s" .name) "mountPath" (printf "/csi/%s" .name) "hostPath" .csi.socketDir) -}}
{{- end -}}
{{- $files = concat $files (.readyFiles | default list) -}}
{{- end -}}
{{- else if .Values.csi.socketDir -}}
{{- $mounts = append $mounts (dict "name" "plugin-dir" "mountPath" "/csi" "hostPath" .Values.csi.socketDir) -}}
{{- end -}}
{{- if and .Values.pluginsRegistry (or (include "str.csi" .) (include "str.nodeAgents" .)) -}}
{{- $mounts = append $mounts (dict "name" "plugins-registry" "mountPath" "/var/lib/kubelet/plugins_registry" "readOnly" true "hostPath" .Values.pluginsRegistry) -}}
{{- end -}}
{{- $dirs := list -}}
{{- range $files -}}
{{- if not (has (dir .) $dirs) -}}
{{- $mounts = append $mounts (dict "name" (printf "ready-file-%d" (len $dirs)) "mountPath" (dir .) "readOnly" true "hostPath" (dir .)) -}}
{{- $dirs = append $dirs (dir .) -}}
{{- end -}}
{{- end -}}
{{- toYaml $mounts -}}
{{- end -}}

{{/*
str.csi is "true" when a CSI gate is on: the top-level one, or a group's.
*/}}
{{- define "str.csi" -}}
{{- if .Values.groups -}}
{{- range .Values.groups -}}
{{- if and .csi .csi.socketDir -}}true{{- end -}}
{{- end -}}
{{- else if .Values.csi.socketDir -}}true
{{- end -}}
{{- end -}}

{{/*
str.nodeAgents is "true" when the node agents' gate is on: the top-level one, or a group's.
*/}}
{{- define "str.nodeAgents" -}}
{{- if .Values.groups -}}
{{- range .Values.groups -}}
{{- if .nodeAgents -}}true{{- end -}}
{{- end -}}
{{- else if .Values.nodeAgents -}}true
{{- end -}}
{{- end -}}

{{- /*
str.nodeAgentNamespaces is --node-agent-namespaces, comma-separated: nodeAgentNamespaces, or
kube-system and the release's namespace, as the agent's own default: the release's namespace left
out when it is default (helm install without -n), where anyone's pods land.
*/ -}}
{{- define "str.nodeAgentNamespaces" -}}
{{- $namespaces := .Values.nodeAgentNamespaces | default (without (list "kube-system" .Release.Namespace) "default") -}}
{{- $namespaces | uniq | join "," -}}
{{- end }}
