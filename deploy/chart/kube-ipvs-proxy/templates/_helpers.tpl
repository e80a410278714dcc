{{/* The chart's name, app.kubernetes.io/name of the node Pods. */}}
{{- define "kube-ipvs-proxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: the release's, with the chart's name in it unless it
already is. The API side's objects add "-api-side", so the base is kept
short enough for it.
*/}}
{{- define "kube-ipvs-proxy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kube-ipvs-proxy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries, less app.kubernetes.io/name. */}}
{{- define "kube-ipvs-proxy.commonLabels" -}}
helm.sh/chart: {{ include "kube-ipvs-proxy.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The node proxies' selector: app.kubernetes.io/name alone, as
deploy/kube-ipvs-proxy.yaml has it. A DaemonSet's selector cannot change,
so the same one lets a DaemonSet applied from that file be adopted by a
release; and only one proxy may program a node anyway.
*/}}
{{- define "kube-ipvs-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-ipvs-proxy.name" . }}
{{- end }}

{{- define "kube-ipvs-proxy.labels" -}}
{{ include "kube-ipvs-proxy.selectorLabels" . }}
{{ include "kube-ipvs-proxy.commonLabels" . }}
{{- end }}

{{- define "kube-ipvs-proxy.apiSide.fullname" -}}
{{- printf "%s-api-side" (include "kube-ipvs-proxy.fullname" .) }}
{{- end }}

{{/* As deploy/split/split.yaml names them. */}}
{{- define "kube-ipvs-proxy.apiSide.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-api-side" (include "kube-ipvs-proxy.name" .) }}
{{- end }}

{{- define "kube-ipvs-proxy.apiSide.labels" -}}
{{ include "kube-ipvs-proxy.apiSide.selectorLabels" . }}
{{ include "kube-ipvs-proxy.commonLabels" . }}
{{- end }}

{{- define "kube-ipvs-proxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-ipvs-proxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the existing ServiceAccount to run as (serviceAccount.create is false)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "kube-ipvs-proxy.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The ConfigMap mounted at /var/lib/kube-proxy. */}}
{{- define "kube-ipvs-proxy.configMapName" -}}
{{- if .Values.config.create }}
{{- include "kube-ipvs-proxy.fullname" . }}
{{- else }}
{{- required "config.existingConfigMap: the ConfigMap with config.conf and kubeconfig.conf (or config.create: true)" .Values.config.existingConfigMap }}
{{- end }}
{{- end }}

{{/* The mode, checked. */}}
{{- define "kube-ipvs-proxy.split" -}}
{{- if eq .Values.mode "split" }}
{{- if not (has .Values.split.nodeAuth (list "token" "certificate")) }}
{{- fail (printf "split.nodeAuth must be token or certificate, not %q" .Values.split.nodeAuth) }}
{{- end }}
{{- if not (hasPrefix "https://" (required "split.endpoint: how the nodes reach the API side, https://HOST:PORT" .Values.split.endpoint)) }}
{{- fail (printf "split.endpoint must be https://HOST:PORT (plain TCP is refused), not %q" .Values.split.endpoint) }}
{{- end }}
{{- "true" }}
{{- else if ne .Values.mode "direct" }}
{{- fail (printf "mode must be direct or split, not %q" .Values.mode) }}
{{- end }}
{{- end }}

{{/* Where the node proxy's API side credentials are mounted. */}}
{{- define "kube-ipvs-proxy.apiTlsDir" -}}
{{- if eq .Values.split.nodeAuth "certificate" -}}
/etc/kube-ipvs-proxy/api-side-tls
{{- else -}}
/etc/kube-ipvs-proxy/api-side-ca
{{- end }}
{{- end }}

{{/* The DaemonSet's pod affinity: affinity, plus migration.nodeLabel. */}}
{{- define "kube-ipvs-proxy.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- with .Values.migration.nodeLabel }}
{{- if hasKey $affinity "nodeAffinity" }}
{{- fail "migration.nodeLabel makes the node affinity: give affinity.nodeAffinity or migration.nodeLabel, not both" }}
{{- end }}
{{- $term := dict "matchExpressions" (list (dict "key" . "operator" "In" "values" (list "true"))) }}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list $term))) }}
{{- end }}
{{- if $affinity }}
{{- toYaml $affinity }}
{{- end }}
{{- end }}

{{/* The namespace of a monitoring object: its own value, else the release's. */}}
{{- define "kube-ipvs-proxy.monitoringNamespace" -}}
{{- default .root.Release.Namespace .namespace }}
{{- end }}
