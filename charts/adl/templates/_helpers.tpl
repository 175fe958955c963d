{{/* Common names and labels. */}}
{{/* The app name (nameOverride or the chart's), a label value: at most 63 characters. */}}
{{- define "adl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the release's objects: fullnameOverride as given, else RELEASE-NAME unless the
release name already contains NAME. At most 63 characters, never ending in "-". */}}
{{- define "adl.fullname" -}}
{{- $full := .Values.fullnameOverride -}}
{{- if not $full -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- $full = ternary .Release.Name (printf "%s-%s" .Release.Name $name) (contains $name .Release.Name) -}}
{{- end -}}
{{- $full | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "adl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "adl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: adl
{{- end -}}

{{- define "adl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "adl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "adl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "adl.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: with serviceAccount.create=false, name the account to bind the operator's role to (never the namespace's default)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository@digest when image.digest is set (the tag is then ignored), else repository:tag. */}}
{{- define "adl.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "adl.apiURL" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "adl.fullname" .) .Release.Namespace .Values.service.port) .Values.api.externalURL -}}
{{- end -}}

{{/* Namespaces a namespaced install watches: the release's own plus watchNamespaces. */}}
{{- define "adl.watchNamespaces" -}}
{{- $all := list .Release.Namespace -}}
{{- range .Values.watchNamespaces -}}{{- $all = append $all . -}}{{- end -}}
{{- join "," (uniq $all) -}}
{{- end -}}
