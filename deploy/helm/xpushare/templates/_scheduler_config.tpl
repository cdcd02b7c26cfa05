{{/*
kube-scheduler's side: the extender stanza (research/k8s-apis.md §3.3) and the whole
KubeSchedulerConfiguration of the second scheduler. Aligned with
deploy/examples/kube-scheduler-config.yaml: filter, prioritize and bind verbs, node names only
(nodeCacheCapable); each vendor's count resource (the first of its resources, the one the node
agent registers with kubelet) is checked by kube-scheduler's own fit, and the memory and compute
resources, which no node advertises, are marked ignoredByScheduler.
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
{{- $counts := list -}}
{{- range $vendor, $v := $root.Values.vendors -}}
{{- if $v.enabled -}}{{- $counts = append $counts (first $v.resources) -}}{{- end -}}
{{- end -}}
{{- $managed := list -}}
{{- range $name := (include "xpushare.managedResources" $root | fromJsonArray) -}}
{{- $managed = append $managed (dict "name" $name "ignoredByScheduler" (not (has $name $counts))) -}}
{{- end -}}
extenders:
{{- if $root.Values.scheduler.filterWorkers }}
{{- if ne $root.Values.scheduler.mode "kube-scheduler" }}
{{- fail "scheduler.filterWorkers needs scheduler.mode=kube-scheduler: with the workers, kube-scheduler calls two extenders and the binding one is asked for every pod of its profile, which only our own kube-scheduler (pods with schedulerName) can allow; set filterWorkers to 0 in extender mode" }}
{{- end }}
  # The filter workers (docs/scheduler.md, "Filter workers"): the scheduling cycle, for the
  # pods that ask for a managed resource.
  - urlPrefix: {{ printf "https://%s:8444" (include "xpushare.serviceHost" $root) | quote }}
    filterVerb: filter
    prioritizeVerb: prioritize
{{- include "xpushare.extenderCommon" (dict "root" $root "tls" $tls) }}
    managedResources:
      {{- toYaml $managed | nindent 6 }}
  # The leader: every bind of this scheduler's pods (a resource name may be managed by one
  # extender only, so this one lists none, which means every pod; it binds a pod without
  # devices with a plain Binding).
  - urlPrefix: {{ printf "https://%s:443" (include "xpushare.serviceHost" $root) | quote }}
    bindVerb: bind
{{- include "xpushare.extenderCommon" (dict "root" $root "tls" $tls) }}
{{- else }}
  - urlPrefix: {{ printf "https://%s:443" (include "xpushare.serviceHost" $root) | quote }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
{{- include "xpushare.extenderCommon" (dict "root" $root "tls" $tls) }}
    managedResources:
      {{- toYaml $managed | nindent 6 }}
{{- end }}
{{- if include "xpushare.draUsed" $root }}
  # DRA pods (docs/dra.md, "The extender in DRA mode"): they name claims, not resources, so
  # only an entry without managedResources is asked about them; its verbs answer pods that
  # name claims and pass every other pod. Ignorable: kube-scheduler's DRA allocator decides
  # without it, the extender only ranks.
  - urlPrefix: {{ printf "https://%s:443" (include "xpushare.serviceHost" $root) | quote }}
    filterVerb: dra/filter
    prioritizeVerb: dra/prioritize
{{- include "xpushare.extenderCommon" (dict "root" $root "tls" $tls "ignorable" true) }}
{{- end }}
{{- end -}}

{{- define "xpushare.extenderCommon" }}
    weight: {{ int .root.Values.kubeScheduler.weight }}
    enableHTTPS: true
    tlsConfig:
      {{- toYaml .tls | nindent 6 }}
    httpTimeout: {{ .root.Values.kubeScheduler.httpTimeout }}
    nodeCacheCapable: true
    ignorable: {{ .ignorable | default false }}
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
