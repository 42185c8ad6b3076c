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

{{/* The startup taints as one KEY[:EFFECT] list, the value of --taint. */}}
{{- define "str.taints" -}}
{{- join "," .Values.taints -}}
{{- end -}}

{{/*
str.render writes a manifest shared with the kustomize tree (files/, links into config/), with
the settings written in where kustomize's config/components/taints writes them: the taints, the
re-taint delay and the condition type replace their placeholders, and the object gets this
release's name and labels. Call it with (list $ "files/NAME.yaml" "name-suffix").
*/}}
{{- define "str.render" -}}
{{- $root := index . 0 -}}
{{- $text := $root.Files.Get (index . 1) -}}
{{- $text = $text | replace "'TAINTS'" (printf "'%s'" (include "str.taints" $root)) -}}
{{- $text = $text | replace "'RETAINTAFTER'" (printf "'%s'" $root.Values.retaintAfter) -}}
{{- $text = $text | replace "'CONDITIONTYPE'" (printf "'%s'" $root.Values.conditionType) -}}
{{- $obj := fromYaml $text -}}
{{- $_ := set $obj "metadata" (dict "name" (printf "%s-%s" (include "str.fullname" $root) (index . 2)) "labels" (fromYaml (include "str.labels" $root))) -}}
{{- toYaml $obj -}}
{{- end -}}
