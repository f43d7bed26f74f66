#!/usr/bin/env bash
# Copies the generated CRDs, the manager's RBAC rules and the flush-override admission
# policy and ClusterRole from config/ into the Helm chart,
# so the chart is never edited by hand where config/ is the source.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART="${ROOT}/charts/hicache-operator"

mkdir -p "${CHART}/crds"
rm -f "${CHART}"/crds/*.yaml
for f in "${ROOT}"/config/crd/bases/*.yaml; do
  { echo "# Generated from config/crd/bases by hack/sync-chart.sh. Do not edit."; cat "$f"; } > "${CHART}/crds/$(basename "$f")"
done

# The manager's rules, as a named template: templates/manager-rbac.yaml puts them in a
# ClusterRole, or in a Role of each namespace of watchNamespaces.
{
  echo "{{- /* Generated from config/rbac/role.yaml by hack/sync-chart.sh. Do not edit. */ -}}"
  echo "{{- define \"hicache-operator.managerRules\" -}}"
  sed -n '/^rules:/,$p' "${ROOT}/config/rbac/role.yaml"
  echo "{{- end }}"
} > "${CHART}/templates/_manager-rules.tpl"

# The admission policy that guards spec.allowInUse and the ClusterRole that grants it, under the
# chart's names and labels.
{
  echo "# Generated from config/admission by hack/sync-chart.sh. Do not edit."
  first=1
  for f in flush_override_policy.yaml flush_override_role.yaml; do
    [[ ${first} -eq 1 ]] || echo "---"
    first=0
    sed -e 's/^  name: flush-override$/  name: {{ include "hicache-operator.fullname" . }}-flush-override\n  labels:\n    {{- include "hicache-operator.labels" . | nindent 4 }}/' \
        -e 's/^  policyName: flush-override$/  policyName: {{ include "hicache-operator.fullname" . }}-flush-override/' \
        -e 's/hicache-operator-flush-override/{{ include "hicache-operator.fullname" . }}-flush-override/g' \
        "${ROOT}/config/admission/${f}"
  done
} > "${CHART}/templates/flush-override.yaml"
