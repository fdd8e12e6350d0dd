{{/* The name every object is prefixed with. */}}
{{- define "fencegate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fencegate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fencegate.labels" -}}
{{ include "fencegate.selectorLabels" . }}
{{- if .Values.helmLabels }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- end -}}

{{- define "fencegate.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{- define "fencegate.storeSecret" -}}
{{- .Values.store.existingSecret | default (printf "%s-store" (include "fencegate.fullname" .)) -}}
{{- end -}}

{{- define "fencegate.webhookService" -}}
{{- printf "%s-webhook" (include "fencegate.fullname" .) -}}
{{- end -}}

{{- define "fencegate.tlsSecret" -}}
{{- if .Values.admission.certificates.certManager -}}
{{- printf "%s-webhook-tls" (include "fencegate.fullname" .) -}}
{{- else -}}
{{- .Values.admission.certificates.secretName -}}
{{- end -}}
{{- end -}}

{{/* The authz listener's TLS Secret: serving certificate and client CA. */}}
{{- define "fencegate.authzTLSSecret" -}}
{{- if .Values.authz.tls.certManager -}}
{{- printf "%s-authz-tls" (include "fencegate.fullname" .) -}}
{{- else -}}
{{- .Values.authz.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* Whether cert-manager's CA and issuers are needed. */}}
{{- define "fencegate.certManager" -}}
{{- if or (and .Values.admission.enabled .Values.admission.certificates.certManager) (and .Values.authz.tls.enabled .Values.authz.tls.certManager) -}}
true
{{- end -}}
{{- end -}}

{{- define "fencegate.serviceAccount" -}}
{{- include "fencegate.fullname" . -}}
{{- end -}}

{{/* Values the gateway cannot run with fail the render, not the pods. */}}
{{- define "fencegate.validate" -}}
{{- if and (not .Values.store.url) (not .Values.store.existingSecret) -}}
{{- fail "set store.url (the chart keeps it in a Secret) or store.existingSecret" -}}
{{- end -}}
{{- if not .Values.tokens -}}
{{- fail "set tokens: fencegate serves the lock API on the pod network only behind tokens (`fencegate token` makes one)" -}}
{{- end -}}
{{- range .Values.tokens -}}
{{- if or (not .name) (not .sha256) -}}
{{- fail "every token needs a name and a sha256" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.admission.enabled (not .Values.admission.certificates.certManager) (or (not .Values.admission.certificates.secretName) (not .Values.admission.certificates.caBundle)) -}}
{{- fail "admission without cert-manager needs admission.certificates.secretName and admission.certificates.caBundle" -}}
{{- end -}}
{{- if and .Values.authz.tls.enabled (not .Values.authz.tls.certManager) (not .Values.authz.tls.secretName) -}}
{{- fail "authz.tls without cert-manager needs authz.tls.secretName (tls.crt, tls.key and the client CA as ca.crt), or set authz.tls.enabled=false and keep the authz port reachable by your proxies alone" -}}
{{- end -}}
{{- if and .Values.admission.enabled .Values.networkPolicy.enabled (not .Values.networkPolicy.webhookFrom) (not .Values.networkPolicy.webhookOpen) -}}
{{- fail "the webhook port must admit the API server only: list its source CIDRs in networkPolicy.webhookFrom, or set networkPolicy.webhookOpen=true to admit every source (see values.yaml)" -}}
{{- end -}}
{{- range .Values.proof.keys -}}
{{- if or (not .kid) (not .secretName) (not .secretKey) -}}
{{- fail "every proof.keys entry needs kid, secretName and secretKey" -}}
{{- end -}}
{{- end -}}
{{- range .Values.proof.verifyKeys -}}
{{- if or (not .kid) (not .publicKey) -}}
{{- fail "every proof.verifyKeys entry needs kid and publicKey" -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.proof.keys) (not .Values.proof.verifyKeys) -}}
{{- range .Values.routes -}}
{{- if eq (lower (trim (toString .proof))) "signed" -}}
{{- fail (printf "routes entry %s has proof: signed, and the chart has no key to verify proofs with: add proof.keys (the gateway refuses to start without one; config.ProofKeyProblems)" (toString .name)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
