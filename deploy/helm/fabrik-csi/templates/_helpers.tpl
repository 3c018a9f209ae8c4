{{/* The CSI driver name: fabrik-csi reports it (GetPluginInfo), so it is not a value. */}}
{{- define "fabrik-csi.driverName" -}}csi.fabrik.io{{- end }}

{{/* The topology key of racks (NodeGetInfo, CreateVolume's accessibility requirements). */}}
{{- define "fabrik-csi.rackKey" -}}topology.fabrik.io/rack{{- end }}

{{- define "fabrik-csi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* fabrik-csi for a release named fabrik-csi (or any name holding it), else RELEASE-fabrik-csi. */}}
{{- define "fabrik-csi.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fabrik-csi.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "fabrik-csi.labels" -}}
helm.sh/chart: {{ include "fabrik-csi.chart" . }}
app.kubernetes.io/name: {{ include "fabrik-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fabrik
{{- end }}

{{/* Selector labels of a component: (dict "root" $ "component" "controller"|"node"). */}}
{{- define "fabrik-csi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fabrik-csi.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "fabrik-csi.controllerServiceAccount" -}}{{ include "fabrik-csi.fullname" . }}-controller{{- end }}
{{- define "fabrik-csi.nodeServiceAccount" -}}{{ include "fabrik-csi.fullname" . }}-node{{- end }}

{{/* An image reference from {repository, tag}; (dict "image" .Values.image "default" TAG). */}}
{{- define "fabrik-csi.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .default) }}
{{- end }}

{{/* The CA's volume source, or nothing when no CA is configured. */}}
{{- define "fabrik-csi.caSource" -}}
{{- $ca := .Values.apiCA | default dict }}
{{- $n := 0 }}
{{- if $ca.pem }}{{ $n = add1 $n }}{{ end }}
{{- if $ca.existingSecret }}{{ $n = add1 $n }}{{ end }}
{{- if $ca.existingConfigMap }}{{ $n = add1 $n }}{{ end }}
{{- if gt $n 1 }}
{{- fail "apiCA: set at most one of pem, existingSecret, existingConfigMap" }}
{{- end }}
{{- if $ca.pem }}
configMap:
  name: {{ include "fabrik-csi.fullname" . }}-api-ca
{{- else if $ca.existingSecret }}
secret:
  secretName: {{ $ca.existingSecret }}
{{- else if $ca.existingConfigMap }}
configMap:
  name: {{ $ca.existingConfigMap }}
{{- end }}
{{- end }}

{{- define "fabrik-csi.caKey" -}}{{ .Values.apiCA.key | default "ca.crt" }}{{- end }}
