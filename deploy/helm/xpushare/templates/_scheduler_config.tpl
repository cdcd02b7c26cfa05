{{/*
kube-scheduler's side: the extender stanza (research/k8s-apis.md §3.3) and the whole
KubeSchedulerConfiguration of the second scheduler. Aligned with
deploy/examples/kube-scheduler-config.yaml: filter, prioritize and bind verbs, node names only
(nodeCacheCapable), and the managed resources marked ignoredByScheduler so kube-scheduler's
own fit check does not reject memory and compute resources no node advertises.
Argument: (dict "root" $ "caFile" path-or-empty); an empty caFile embeds the CA as caData.
*/}}
{{- define "xpushare.extenderStanza" -}}
{{- $root := .root -}}
{{- $tls := dict "serverName" (include "xpushare.serviceHost" $root) -}}
{{- if .caFile -}}
{{- $_ := set $tls "caFile" .caFile -}}
{{- else if eq $root.Values.webhook.tls.mode "self" -}}
{{- $_ := set $tls "caData" ((include "xpushare.tls" $root | fromYaml).ca | b64enc) -}}
{{- end -}}
{{- $managed := list -}}
{{- range $name := (include "xpushare.managedResources" $root | fromJsonArray) -}}
{{- $managed = append $managed (dict "name" $name "ignoredByScheduler" true) -}}
{{- end -}}
extenders:
  - urlPrefix: {{ printf "https://%s:443" (include "xpushare.serviceHost" $root) | quote }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: {{ int $root.Values.kubeScheduler.weight }}
    enableHTTPS: true
    tlsConfig:
      {{- toYaml $tls | nindent 6 }}
    httpTimeout: {{ $root.Values.kubeScheduler.httpTimeout }}
    nodeCacheCapable: true
    ignorable: false
    managedResources:
      {{- toYaml $managed | nindent 6 }}
{{- end -}}

{{- define "xpushare.kubeSchedulerConfig" -}}
{{- $root := .root -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ $root.Release.Namespace }}
  resourceName: {{ include "xpushare.kubeSchedulerName" $root }}
profiles:
  - schedulerName: {{ $root.Values.schedulerName }}
percentageOfNodesToScore: {{ int $root.Values.kubeScheduler.percentageOfNodesToScore }}
{{ include "xpushare.extenderStanza" . }}
{{- end -}}
