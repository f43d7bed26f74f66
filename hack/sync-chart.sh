#!/usr/bin/env bash
# Copies the generated CRDs, the manager's ClusterRole rules and the flush-override admission
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

# The ClusterRole's rules, under the chart's own name.
{
  echo "# Generated from config/rbac/role.yaml by hack/sync-chart.sh. Do not edit."
  echo "apiVersion: rbac.authorization.k8s.io/v1"
  echo "kind: ClusterRole"
  echo "metadata:"
  echo "  name: {{ include \"hicache-operator.fullname\" . }}-manager"
  echo "  labels:"
  echo "    {{- include \"hicache-operator.labels\" . | nindent 4 }}"
  sed -n '/^rules:/,$p' "${ROOT}/config/rbac/role.yaml"
} > "${CHART}/templates/manager-clusterrole.yaml"

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
