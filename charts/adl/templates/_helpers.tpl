{{/* Common names and labels. */}}
{{- define "adl.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "adl.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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

{{- define "adl.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
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
