{{/*
The name of the release's objects: the release name when it says
manifestsync already, else RELEASE-manifestsync.
*/}}
{{- define "manifestsync.fullname" -}}
{{- if contains "manifestsync" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-manifestsync" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The labels of every object (but the CRD, which Helm installs untemplated),
and those that select the operator's pods. They are the kustomize layout's.
*/}}
{{- define "manifestsync.labels" -}}
app.kubernetes.io/name: manifestsync
{{- end -}}

{{- define "manifestsync.selectorLabels" -}}
app.kubernetes.io/name: manifestsync
{{- end -}}

{{/*
The operator's image: repository@digest, else repository:tag.
*/}}
{{- define "manifestsync.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end -}}

{{/*
The ServiceAccount the operator runs as, which the bindings name.
*/}}
{{- define "manifestsync.subject" -}}
- kind: ServiceAccount
  name: {{ include "manifestsync.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/*
Whether the replicas shard (--shards auto): sharding.mode "auto" or "off"
says so; empty, they do when there is more than one.
*/}}
{{- define "manifestsync.sharded" -}}
{{- if eq .Values.sharding.mode "auto" -}}
true
{{- else if and (eq .Values.sharding.mode "") (gt (int .Values.replicas) 1) -}}
true
{{- end -}}
{{- end -}}
