{{/* The release's full name, used for every object. */}}
{{- define "looprun.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "looprun.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "looprun.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The selector labels of a shard's managers ("": the unsharded ones). */}}
{{- define "looprun.shardSelectorLabels" -}}
{{- $root := index . 0 -}}
{{- $shard := index . 1 -}}
{{- if $shard -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}-shard
app.kubernetes.io/instance: {{ $root.Release.Name }}
looprun.io/shard: {{ $shard }}
{{- else -}}
{{ include "looprun.selectorLabels" $root }}
{{- end -}}
{{- end -}}

{{- define "looprun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "looprun.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "looprun.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The model gateway is installed when enabled and it has a key: its own
(gateway.apiKeySecret) or the judge's (llm.apiKeySecret). */}}
{{- define "looprun.gatewayEnabled" -}}
{{- if and .Values.gateway.enabled (or .Values.gateway.apiKeySecret.name .Values.llm.apiKeySecret.name) -}}
true
{{- end -}}
{{- end -}}

{{- define "looprun.gatewayName" -}}
{{- printf "%s-gateway" (include "looprun.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "looprun.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* How action Pods reach the gateway. */}}
{{- define "looprun.gatewayURL" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "looprun.gatewayName" .) .Release.Namespace .Values.gateway.port) .Values.gateway.url -}}
{{- end -}}

{{/* What every manager Pod carries, shards' included: the metrics Service
selects them by it. */}}
{{- define "looprun.managerPodLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{/* Whether a Deployment gets a PodDisruptionBudget: as its
podDisruptionBudget.enabled says, or, unset, when it runs more than one
replica. (list PDB-VALUES REPLICAS) */}}
{{- define "looprun.pdbEnabled" -}}
{{- $pdb := index . 0 -}}
{{- if hasKey $pdb "enabled" -}}
{{- if $pdb.enabled }}true{{ end -}}
{{- else if gt (int (index . 1)) 1 -}}
true
{{- end -}}
{{- end -}}

{{/* A PodDisruptionBudget: (dict "root" . "name" NAME "pdb" VALUES
"selector" SELECTOR-LABELS). minAvailable, when set, replaces
maxUnavailable. */}}
{{- define "looprun.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "looprun.labels" .root | nindent 4 }}
spec:
  {{- if ne (toString .pdb.minAvailable) "" }}
  minAvailable: {{ .pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- .selector | nindent 6 }}
{{- end -}}

{{/* Refuses a price table given twice: prices (--prices) and a
--prices-file in extra args. (list ROOT EXTRA-ARGS) */}}
{{- define "looprun.checkPrices" -}}
{{- $root := index . 0 -}}
{{- range (index . 1) -}}
{{- if and $root.Values.prices (hasPrefix "--prices-file" (toString .)) -}}
{{- fail "prices and a --prices-file in extraArgs: give one price table (leave prices empty)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the operator's runner key: the values' own, else the chart's. */}}
{{- define "looprun.runnerKeySecret" -}}
{{- .Values.runnerKey.existingSecret | default (printf "%s-runner-key" (include "looprun.fullname" .)) -}}
{{- end }}
