{{/*
Names, labels, the figures derived from the values, and the checks no schema can express.
*/}}

{{- define "leasehold.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "leasehold.labels" -}}
{{ include "leasehold.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A duration of the values (15s, 500ms, 2m, 1h) in whole seconds, rounded up. */}}
{{- define "leasehold.seconds" -}}
{{- $d := . -}}
{{- if hasSuffix "ms" $d -}}
{{- div (add (trimSuffix "ms" $d | atoi) 999) 1000 -}}
{{- else if hasSuffix "s" $d -}}
{{- trimSuffix "s" $d | atoi -}}
{{- else if hasSuffix "m" $d -}}
{{- mul (trimSuffix "m" $d | atoi) 60 -}}
{{- else -}}
{{- mul (trimSuffix "h" $d | atoi) 3600 -}}
{{- end -}}
{{- end -}}

{{/*
The rollout's maxUnavailable. With every replica Ready when it can take over (`traffic: all`), 0:
each new pod is Ready before an old one stops, and the old holder hands its lease to a standby.
With the holder alone Ready (`traffic: holder`), the new pods stay unready until the holder's pod
stops, so the rollout must be free to stop replicas - 1 of them without waiting, or it waits for
ever (the deadlock of readiness tied to leadership).
*/}}
{{- define "leasehold.maxUnavailable" -}}
{{- if eq .Values.traffic "holder" -}}
{{- sub (int .Values.replicas) 1 -}}
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* Values that contradict each other: the render fails with a message naming them. */}}
{{- define "leasehold.check" -}}
{{- if and (eq .Values.traffic "holder") (lt (int .Values.replicas) 2) -}}
{{- fail "traffic: holder with replicas: 1 leaves no standby to take the traffic while the pod is replaced: set replicas to 2 or more, or traffic: all" -}}
{{- end -}}
{{- if and (not .Values.leases) (not .Values.groups) -}}
{{- fail "leases and groups are both empty: name at least one lease or group to campaign for" -}}
{{- end -}}
{{- if and (not .Values.leases) (or (eq .Values.mode "beside-app") (eq .Values.traffic "holder")) -}}
{{- fail (printf "leases is empty: mode %s with traffic %s binds the app or the traffic to the first lease" .Values.mode .Values.traffic) -}}
{{- end -}}
{{- if and .Values.plugins.claimName .Values.plugins.image.repository -}}
{{- fail "plugins.claimName and plugins.image.repository are both set: the plugin directory comes from one of them" -}}
{{- end -}}
{{- if and (eq .Values.mode "beside-app") (or .Values.plugins.claimName .Values.plugins.image.repository) -}}
{{- fail "plugins are set but mode is beside-app: plugins run in replicas mode" -}}
{{- end -}}
{{- if and (eq .Values.mode "beside-app") (not .Values.app.image) -}}
{{- fail "mode: beside-app needs app.image, the app container leasehold runs beside" -}}
{{- end -}}
{{- if and (eq .Values.mode "replicas") .Values.app.image -}}
{{- fail "app.image is set but mode is replicas: set mode: beside-app to run the app beside leasehold" -}}
{{- end -}}
{{- $np := .Values.networkPolicy -}}
{{- if and $np.enabled (eq .Values.mode "replicas") (not $np.database.cidr) -}}
{{- fail "networkPolicy.enabled needs networkPolicy.database.cidr, the database's address block: the pods may connect to it and the cluster's DNS alone" -}}
{{- end -}}
{{- $pdb := .Values.podDisruptionBudget -}}
{{- if and (not (kindIs "invalid" $pdb.minAvailable)) (not (kindIs "invalid" $pdb.maxUnavailable)) -}}
{{- fail "podDisruptionBudget.minAvailable and podDisruptionBudget.maxUnavailable are both set: a budget takes one of them" -}}
{{- end -}}
{{- if and $pdb.enabled (eq .Values.traffic "holder") -}}
{{- if and (not (kindIs "invalid" $pdb.minAvailable)) (ne (toString $pdb.minAvailable) "0") -}}
{{- fail (printf "podDisruptionBudget.minAvailable %v with traffic: holder: only the holder is Ready, so the budget would never let its node be drained; leave it unset (the chart derives one that lets the holder go) or set 0" $pdb.minAvailable) -}}
{{- end -}}
{{- if not (kindIs "invalid" $pdb.maxUnavailable) -}}
{{- $max := toString $pdb.maxUnavailable -}}
{{- $lets := or (eq $max "100%") (and (regexMatch "^[0-9]+$" $max) (ge (atoi $max) (int .Values.replicas))) -}}
{{- if not $lets -}}
{{- fail (printf "podDisruptionBudget.maxUnavailable %v with traffic: holder and replicas: %v: only the holder is Ready, so a budget below all the replicas never lets its node be drained; leave it unset" $pdb.maxUnavailable .Values.replicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the pods get a plugin directory, and from where. */}}
{{- define "leasehold.plugins" -}}
{{- if eq .Values.mode "replicas" -}}
{{- if .Values.plugins.claimName -}}claim{{- else if .Values.plugins.image.repository -}}image{{- end -}}
{{- end -}}
{{- end -}}
