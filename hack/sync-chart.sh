#!/usr/bin/env bash
# Copies the generated CRDs and the manager's ClusterRole rules from config/ into the Helm chart,
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
