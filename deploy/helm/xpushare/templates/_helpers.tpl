{{/*
Names, labels and the pieces several templates share. Kept in one place so a Service selector,
a webhook's service reference and a certificate's DNS names can never disagree.
*/}}

{{- define "xpushare.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-scoped prefix; 40 characters leave room for "-kube-scheduler" and a vendor. */}}
{{- define "xpushare.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "xpushare.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "xpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "xpushare.selector" -}}
app.kubernetes.io/name: {{ include "xpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "xpushare.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "xpushare.schedulerName" -}}{{ include "xpushare.fullname" . }}-scheduler{{- end -}}
{{- define "xpushare.kubeSchedulerName" -}}{{ include "xpushare.fullname" . }}-kube-scheduler{{- end -}}
{{- define "xpushare.nodeName" -}}{{ include "xpushare.fullname" . }}-node{{- end -}}
{{- define "xpushare.certgenName" -}}{{ include "xpushare.fullname" . }}-certgen{{- end -}}
{{- define "xpushare.tlsSecret" -}}{{ include "xpushare.fullname" . }}-webhook-tls{{- end -}}
{{- define "xpushare.configName" -}}{{ include "xpushare.fullname" . }}-config{{- end -}}

{{/* The DNS name the API server and kube-scheduler use for the scheduler's Service. */}}
{{- define "xpushare.serviceHost" -}}
{{- printf "%s.%s.svc" (include "xpushare.schedulerName" .) .Release.Namespace -}}
{{- end -}}

{{/* Enabled vendors, sorted, as a comma list. */}}
{{- define "xpushare.enabledVendors" -}}
{{- $names := list -}}
{{- range $name, $v := .Values.vendors -}}
{{- if $v.enabled -}}{{- $names = append $names $name -}}{{- end -}}
{{- end -}}
{{- $names | sortAlpha | join "," -}}
{{- end -}}

{{/* Every resource name of the enabled vendors, as a JSON list (webhook, kube-scheduler). */}}
{{- define "xpushare.managedResources" -}}
{{- $names := list -}}
{{- range $name, $v := .Values.vendors -}}
{{- if $v.enabled -}}{{- $names = concat $names $v.resources -}}{{- end -}}
{{- end -}}
{{- $names | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/*
Environment both processes need: which plugins to load, and each enabled vendor's settings file
(XPUSHARE_<VENDOR>_CONFIG, read by the vendor in the scheduler and the node agent alike) and
extra variables. Argument: (dict "root" $ "vendors" list-of-names).
*/}}
{{- define "xpushare.vendorEnv" -}}
- name: XPUSHARE_PLUGINS
  value: {{ .vendors | join "," | quote }}
{{- range $name := .vendors }}
{{- $v := index $.root.Values.vendors $name }}
- name: {{ printf "XPUSHARE_%s_CONFIG" (upper $name) }}
  value: {{ printf "/etc/xpushare/vendors/%s.yaml" $name | quote }}
{{- range $key, $value := $v.env }}
- name: {{ $key }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
"true" when some node agent serves DRA (docs/dra.md): nodeAgent.mode=dra, or one mode per
node. DeviceClasses, the DRA grants and the scheduler's claim ledger exist only then.
*/}}
{{- define "xpushare.draUsed" -}}
{{- if or (eq .Values.nodeAgent.mode "dra") .Values.nodeAgent.perNodeMode.enabled -}}true{{- end -}}
{{- end -}}

{{/* Names of the enabled vendors as a list. */}}
{{- define "xpushare.enabledVendorList" -}}
{{- include "xpushare.enabledVendors" . | splitList "," | compact | toJson -}}
{{- end -}}

{{/*
Webhook TLS, self mode: one CA and one serving certificate, generated at install and kept on
upgrade (lookup of the Secret), so the caBundle the API server and kube-scheduler trust does not
change under them. The rotation CronJob re-issues the serving certificate under the same CA.
Returns a dict (ca, caKey, cert, key) as YAML; templates call it once each and get the same
values because the Secret is looked up, or, on install, because it is memoised in .Values.
*/}}
{{- define "xpushare.tls" -}}
{{- if not (hasKey .Values "__tls") -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "xpushare.tlsSecret" .) -}}
{{- if and $secret (index ($secret.data | default dict) "ca.key") -}}
{{- $_ := set .Values "__tls" (dict "ca" (index $secret.data "ca.crt" | b64dec) "caKey" (index $secret.data "ca.key" | b64dec) "cert" (index $secret.data "tls.crt" | b64dec) "key" (index $secret.data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $host := include "xpushare.serviceHost" . -}}
{{- $short := include "xpushare.schedulerName" . -}}
{{- $ca := genCA (printf "%s-webhook-ca" (include "xpushare.fullname" .)) (int .Values.webhook.tls.caValidityDays) -}}
{{- $dns := list $short (printf "%s.%s" $short .Release.Namespace) $host (printf "%s.cluster.local" $host) -}}
{{- $cert := genSignedCert $host nil $dns (int .Values.webhook.tls.certValidityDays) $ca -}}
{{- $_ := set .Values "__tls" (dict "ca" $ca.Cert "caKey" $ca.Key "cert" $cert.Cert "key" $cert.Key) -}}
{{- end -}}
{{- end -}}
{{- toYaml (index .Values "__tls") -}}
{{- end -}}
