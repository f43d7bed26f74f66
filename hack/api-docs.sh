#!/usr/bin/env bash
# Generates docs/reference/api.md, the API reference, from the Go types in api/v1alpha1: field
# docs, types, defaults, validation markers, enums and CEL rules. crd-ref-docs (pinned in
# hack/tools/misc, built into bin/ by hack/tools.sh) reads the package; the page layout is
# hack/api-docs/templates/api.tpl. The output depends only on the sources, so hack/verify.sh can
# regenerate it and fail on any difference.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"

if ! out=$(hack/tools.sh crd-ref-docs 2>&1); then
  echo "${out}" >&2
  echo "hack/api-docs.sh: building crd-ref-docs failed (see above)" >&2
  exit 1
fi

OUT=docs/reference/api.md
mkdir -p "$(dirname "${OUT}")"
tmp=$(mktemp "${OUT}.XXXXXX")
trap 'rm -f "${tmp}"' EXIT
bin/crd-ref-docs \
  --source-path=api/v1alpha1 \
  --config=hack/api-docs/config.yaml \
  --templates-dir=hack/api-docs/templates \
  --renderer=markdown \
  --output-mode=single \
  --output-path="${tmp}" \
  --log-level=ERROR
chmod 0644 "${tmp}"
mv "${tmp}" "${OUT}"
echo "hack/api-docs.sh: wrote ${OUT}"
