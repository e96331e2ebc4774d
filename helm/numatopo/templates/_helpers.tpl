{{/* Chart name, shortened to what a label value can hold. */}}
{{- define "numatopo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource name prefix; components append "-operator", "-node", "-scheduler". */}}
{{- define "numatopo.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "numatopo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "numatopo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "numatopo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "numatopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "numatopo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "numatopo.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (printf "%s-operator" (include "numatopo.fullname" .)) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "numatopo.node.serviceAccountName" -}}
{{- if .Values.node.serviceAccount.create }}
{{- default (printf "%s-node" (include "numatopo.fullname" .)) .Values.node.serviceAccount.name }}
{{- else }}
{{- required "node.serviceAccount.name is required when node.serviceAccount.create is false" .Values.node.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "numatopo.scheduler.serviceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create }}
{{- default (printf "%s-scheduler" (include "numatopo.fullname" .)) .Values.scheduler.serviceAccount.name }}
{{- else }}
{{- required "scheduler.serviceAccount.name is required when scheduler.serviceAccount.create is false" .Values.scheduler.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The name of the Lease the operator replicas compete for. */}}
{{- define "numatopo.operator.leaseName" -}}
{{- default (printf "%s-operator" (include "numatopo.fullname" .)) .Values.operator.lease.name }}
{{- end }}

{{/* The pod label the active operator replica sets on itself (numatopo_operator.leadership.ACTIVE_LABEL). */}}
{{- define "numatopo.operator.activeLabel" -}}
numatopo.io/extender-active
{{- end }}

{{/* Where the scheduler reaches the extender: the operator Service (selects the active replica). */}}
{{- define "numatopo.operator.extenderURL" -}}
{{ if include "numatopo.extenderTLS.enabled" . }}https{{ else }}http{{ end }}://{{ include "numatopo.fullname" . }}-operator.{{ .Release.Namespace }}.svc:{{ .Values.operator.extenderPort }}
{{- end }}

{{/* Value combinations that cannot work: fail the install with a message saying what to change. */}}
{{- define "numatopo.validate" -}}
{{- if and .Values.scheduler.enabled (not .Values.operator.enabled) }}
{{- fail "scheduler.enabled needs operator.enabled: the scheduler profile calls the operator's extender" }}
{{- end }}
{{- range $name, $guard := dict "assignmentGuard" .Values.admission.assignmentGuard "nodeScopeGuard" .Values.admission.nodeScopeGuard }}
{{- if and (has "Deny" $guard.validationActions) (has "Warn" $guard.validationActions) }}
{{- fail (printf "admission.%s.validationActions: Deny and Warn cannot be combined" $name) }}
{{- end }}
{{- end }}
{{- if and .Values.scheduler.enabled (ne .Values.scheduler.name .Values.operator.schedulerName) }}
{{- fail (printf "scheduler.name (%s) and operator.schedulerName (%s) must be equal" .Values.scheduler.name .Values.operator.schedulerName) }}
{{- end }}
{{- if and .Values.operator.enabled .Values.operator.podDisruptionBudget.enabled (le (int .Values.operator.replicas) (int .Values.operator.podDisruptionBudget.minAvailable)) }}
{{- fail (printf "operator.podDisruptionBudget.minAvailable (%d) must be below operator.replicas (%d), or no node drain could ever evict an operator pod" (int .Values.operator.podDisruptionBudget.minAvailable) (int .Values.operator.replicas)) }}
{{- end }}
{{- if eq .Values.operator.extenderPort .Values.operator.metricsPort }}
{{- fail "operator.extenderPort and operator.metricsPort must differ" }}
{{- end }}
{{- if and .Values.agent.enabled (eq (int .Values.exporter.metricsPort) (int .Values.agent.metricsPort)) }}
{{- fail "exporter.metricsPort and agent.metricsPort must differ: both containers share the pod's network" }}
{{- end }}
{{- if eq .Values.signing.source "existingSecret" }}
{{- $_ := include "numatopo.signing.secretName" . }}
{{- $_ = include "numatopo.signing.trustedKeys" . }}
{{- else if or .Values.signing.existingSecret .Values.signing.trustedKeys }}
{{- fail "signing.existingSecret and signing.trustedKeys take effect only with signing.source=existingSecret; with source=helm the chart generates its own key" }}
{{- end }}
{{- end }}

{{/* The operator's rules on pods and Events, shared by the cluster-wide ClusterRole and
the per-namespace one. */}}
{{- define "numatopo.operator.podRules" -}}
# kopf lists and watches pods; kube.py reads one pod before deciding (get) and patches
# annotations (assignments) and, cluster-wide, its own pod's label (patch_pod_labels).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
# kube.py create_binding: the extender's bind verb binds the pod it placed.
- apiGroups: [""]
  resources: [pods/binding]
  verbs: [create]
# kube.py post_event: Assigned / Unsatisfiable / Invalid Events on pods.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* The extender's TLS, shared by the operator, the scheduler and extender-tls.yaml:
the Secret each pod mounts parts of (tls.crt, tls.key, ca.crt in both). */}}
{{- define "numatopo.extenderTLS.enabled" -}}
{{- if and .Values.operator.enabled (not .Values.scheduler.extender.insecurePlainHTTP) }}true{{ end }}
{{- end }}

{{- define "numatopo.extenderTLS.serverSecret" -}}
{{- if eq .Values.tls.source "existingSecrets" }}
{{- required "tls.existingSecrets.server is required with tls.source=existingSecrets" .Values.tls.existingSecrets.server }}
{{- else }}
{{- printf "%s-extender-server-tls" (include "numatopo.fullname" .) }}
{{- end }}
{{- end }}

{{- define "numatopo.extenderTLS.clientSecret" -}}
{{- if eq .Values.tls.source "existingSecrets" }}
{{- required "tls.existingSecrets.client is required with tls.source=existingSecrets" .Values.tls.existingSecrets.client }}
{{- else }}
{{- printf "%s-extender-client-tls" (include "numatopo.fullname" .) }}
{{- end }}
{{- end }}

{{/* A Secret of the release namespace as the cluster holds it now, as JSON ("{}" when
there is none, and always when rendering offline). The chart's one `lookup` of Secrets (certificates and the signing key):
tests/chart/test_chart_security.py replaces this definition to render an upgrade. */}}
{{- define "numatopo.existingSecret" -}}
{{- $found := lookup "v1" "Secret" (index . 0).Release.Namespace (index . 1) }}
{{- $found | default dict | toJson }}
{{- end }}

{{/* The Secret whose key.pem the operator signs assignments with (signing-key.yaml). */}}
{{- define "numatopo.signing.secretName" -}}
{{- if eq .Values.signing.source "existingSecret" }}
{{- required "signing.existingSecret is required with signing.source=existingSecret: the name of a Secret holding the Ed25519 private key as key.pem" .Values.signing.existingSecret }}
{{- else }}
{{- printf "%s-signing" (include "numatopo.fullname" .) }}
{{- end }}
{{- end }}

{{/* signing.trustedKeys as a JSON list of PEM blocks, each ending in a newline, key.pem's
public half first. Offline, Helm cannot read the Secret to compare the two, so what it
checks is the form, and fails saying what is wrong: only PUBLIC KEY and CERTIFICATE
blocks, each holding an Ed25519 public key, the only kind the agents read
(numatopo_engine/signing.py). A wrong value would otherwise show only when every node
agent refuses to start, or refuses every assignment. */}}
{{- define "numatopo.signing.trustedKeys" -}}
{{- $text := .Values.signing.trustedKeys | default "" }}
{{- if not (trim $text) }}
{{- fail "signing.trustedKeys is required with signing.source=existingSecret: the public half of the Secret's key.pem as PEM (`openssl pkey -in key.pem -pubout`, or a certificate made with that key); the node agents enforce only assignments it verifies" }}
{{- end }}
{{- $block := "-----BEGIN [A-Z0-9 ]+-----[^-]*-----END [A-Z0-9 ]+-----" }}
{{- if trim (regexReplaceAll $block $text "") }}
{{- fail "signing.trustedKeys holds something besides PEM blocks: give only -----BEGIN PUBLIC KEY----- or -----BEGIN CERTIFICATE----- blocks, one after the other" }}
{{- end }}
{{- /* DER of an Ed25519 SubjectPublicKeyInfo up to the key bytes: a public key block
starts with it, a certificate carries it. */}}
{{- $ed25519 := "\x30\x2a\x30\x05\x06\x03\x2b\x65\x70\x03\x21\x00" }}
{{- $found := list }}
{{- range regexFindAll $block $text -1 }}
{{- $kind := regexFind "^-----BEGIN [A-Z0-9 ]+-----" . | trimPrefix "-----BEGIN " | trimSuffix "-----" }}
{{- if not (or (regexMatch "^-----BEGIN CERTIFICATE-----[^-]*-----END CERTIFICATE-----$" .) (regexMatch "^-----BEGIN PUBLIC KEY-----[^-]*-----END PUBLIC KEY-----$" .)) }}
{{- fail (printf "signing.trustedKeys: a %s block is neither a PUBLIC KEY nor a CERTIFICATE (the value lands in a ConfigMap: a private key belongs in the Secret only)" $kind) }}
{{- end }}
{{- $der := regexReplaceAll "-----[A-Z0-9 ]+-----" . "" | nospace | b64dec }}
{{- if not (contains $ed25519 $der) }}
{{- fail (printf "signing.trustedKeys: PEM block %d (%s) holds no Ed25519 public key; the operator signs with Ed25519 only" (add1 (len $found)) $kind) }}
{{- end }}
{{- $found = append $found (printf "%s\n" .) }}
{{- end }}
{{- $found | toJson }}
{{- end }}

{{/* With signing.source=existingSecret, a digest of the trusted keys for the pod templates
of the operator and the node agents: both read them only at start. Empty with
source=helm, whose key is known only to a render that can look it up. */}}
{{- define "numatopo.signing.trustedKeysChecksum" -}}
{{- if eq .Values.signing.source "existingSecret" }}
{{- include "numatopo.signing.trustedKeys" . | sha256sum }}
{{- end }}
{{- end }}

{{/* The DNS names the operator's certificate carries: its extender Service. */}}
{{- define "numatopo.extenderTLS.dnsNames" -}}
{{- $service := printf "%s-operator" (include "numatopo.fullname" .) }}
{{- list $service (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) | toJson }}
{{- end }}
