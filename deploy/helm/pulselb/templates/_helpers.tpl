{{/* The pulselb image, shared by the controller, the probers and the proxy pods. */}}
{{- define "pulselb.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "pulselb.labels" -}}
app.kubernetes.io/part-of: pulselb
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
{{- end }}

{{/* Pod labels of a component; app.kubernetes.io/name is what pulselb selects on. */}}
{{- define "pulselb.selector" -}}
app.kubernetes.io/name: pulselb-{{ . }}
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* The name servers of the zone: the values, or the pulselb-dns Service's name. */}}
{{- define "pulselb.dnsNameServers" -}}
{{- if .Values.dns.nameServers }}
{{- toJson .Values.dns.nameServers }}
{{- else }}
{{- list (printf "pulselb-dns.%s.svc.cluster.local" .Release.Namespace) | toJson }}
{{- end }}
{{- end }}

{{/* A restricted-profile container security context. */}}
{{- define "pulselb.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
