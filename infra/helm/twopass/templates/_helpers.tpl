{{/* The image reference: by digest when one is given. */}}
{{- define "twopass.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "twopass.labels" -}}
app.kubernetes.io/name: twopass
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/*
A built-in function's access: its ClusterRole's rules, its namespaced Roles and whether it
reads OpenStack credentials, from files/access.yaml (generated from the function's own
declaration by `npm run manifests`; the kustomize components are generated from the same).
Called with (list $ NAME); an empty dict for a rule.
*/}}
{{- define "twopass.access" -}}
{{- $all := (index . 0).Files.Get "files/access.yaml" | fromYaml }}
{{- toYaml (get $all (index . 1) | default dict) }}
{{- end -}}

{{/* What every run needs besides its function's own rules: its Events, and kube-system's UID (a report's cluster). */}}
{{- define "twopass.runtimeRules" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [""]
  resources: [namespaces]
  resourceNames: [kube-system]
  verbs: [get]
{{- end -}}

{{/*
Where a namespaced access's Role goes: settings.<setting>.namespace, its default when the
setting is absent, none (empty) when the setting is not a map (`controller: none`).
Called with (list ACCESS SETTINGS).
*/}}
{{- define "twopass.accessNamespace" -}}
{{- $a := index . 0 }}{{- $settings := index . 1 | default dict }}
{{- if not (hasKey $settings $a.setting) }}{{ $a.defaultNamespace }}
{{- else }}{{- $s := get $settings $a.setting }}
{{- if kindIs "map" $s }}{{ $s.namespace | default $a.defaultNamespace }}{{ end }}
{{- end }}
{{- end -}}

{{/* A rule's ClusterRole: list, get, delete on its targets; list on its evidence; events create. */}}
{{- define "twopass.ruleRules" -}}
{{- $seen := dict (printf "%s/%s" .target.group .target.resource) true }}
- apiGroups: [{{ .target.group | quote }}]
  resources: [{{ .target.resource }}]
  verbs: [list, get, delete]
{{- range $n, $e := .evidence }}
{{- $k := printf "%s/%s" $e.group $e.resource }}
{{- if not (hasKey $seen $k) }}
{{- $_ := set $seen $k true }}
- apiGroups: [{{ $e.group | quote }}]
  resources: [{{ $e.resource }}]
  verbs: [list]
{{- end }}
{{- end }}
{{ include "twopass.runtimeRules" . }}
{{- end -}}

{{/* The state Role: only this function's ConfigMaps (head + two slots of 8 shards + 8 of tombstones + the history of runs) and Lease, and its CronJob and Jobs for Events. */}}
{{- define "twopass.stateRules" -}}
- apiGroups: [""]
  resources: [configmaps]
  resourceNames:
    - twopass-{{ . }}
    {{- range $slot := list 0 1 }}
    {{- range $i := until 8 }}
    - twopass-{{ $ }}-s{{ $slot }}-{{ $i }}
    {{- end }}
    {{- end }}
    {{- range $i := until 8 }}
    - twopass-{{ $ }}-tomb-{{ $i }}
    {{- end }}
    - twopass-{{ . }}-history
  verbs: [get, update, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [twopass-{{ . }}]
  verbs: [get, update]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [batch]
  resources: [cronjobs]
  resourceNames: [twopass-{{ . }}]
  verbs: [get]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get]
{{- end -}}

{{/* The pod of a run or of the scheduler: hardened as the kustomize CronJobs. */}}
{{- define "twopass.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: { type: RuntimeDefault }
{{- end -}}

{{- define "twopass.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: { drop: [ALL] }
{{- end -}}

{{/* Environment every twopass container gets. */}}
{{- define "twopass.env" -}}
- name: TWOPASS_EVENT_NAMESPACE
  valueFrom: { fieldRef: { fieldPath: metadata.namespace } }
- name: TWOPASS_WEBHOOK_URL
  valueFrom: { secretKeyRef: { name: {{ .Values.webhook.secretName }}, key: url, optional: true } }
{{- end -}}

{{/*
The V8 heap cap of a container whose values set heapMiB (otherwise the image's own, 320 MiB
for the 512Mi limit): NODE_OPTIONS, refused when it is not below 80% of the memory limit
(a cap the limit cannot hold only moves the crash). Called with (list NAME VALUES).
*/}}
{{- define "twopass.heap" -}}
{{- $what := index . 0 }}{{- $v := index . 1 }}
{{- with $v.heapMiB }}
{{- $limit := dig "limits" "memory" "" ($v.resources | default dict) | toString }}
{{- $mib := 0 }}
{{- if hasSuffix "Mi" $limit }}{{ $mib = trimSuffix "Mi" $limit | atoi }}{{ end }}
{{- if hasSuffix "Gi" $limit }}{{ $mib = mul (trimSuffix "Gi" $limit | atoi) 1024 }}{{ end }}
{{- if eq $mib 0 }}{{ fail (printf "%s: heapMiB needs resources.limits.memory in Mi or Gi (got %q)" $what $limit) }}{{ end }}
{{- if ge (mul (int .) 5) (mul $mib 4) }}{{ fail (printf "%s: heapMiB %d is not below 80%% of the memory limit %s: raise the limit with it (about 60%% of it)" $what (int .) $limit) }}{{ end }}
- name: NODE_OPTIONS
  value: "--max-old-space-size={{ . }} --max-semi-space-size=8"
{{- end }}
{{- end -}}
