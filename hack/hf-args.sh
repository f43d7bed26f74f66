#!/usr/bin/env bash
# Regenerates internal/hfcli/hf-download-args.json: what the pinned hub CLI's `hf download`
# accepts (the init container of a hub model source runs it), read from the huggingface_hub that
# hack/sglang/requirements.txt pins, installed in bin/sglang-venv by hack/sglang-venv.sh.
#
# Usage: hack/hf-args.sh            regenerate the JSON
#        hack/hf-args.sh --check    fail if the committed JSON is stale
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${root}/internal/hfcli/hf-download-args.json"
python="${root}/bin/sglang-venv/bin/python"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [[ ! -x "${python}" ]]; then
  echo "bin/sglang-venv is missing: run hack/sglang-venv.sh first" >&2
  exit 1
fi
pinned="$(sed -n 's/^huggingface_hub==\([^ ]*\).*/\1/p' "${root}/hack/sglang/requirements.txt")"
installed="$("${python}" -c 'from importlib import metadata; print(metadata.version("huggingface_hub"))')"
if [[ -z "${pinned}" || "${pinned}" != "${installed}" ]]; then
  echo "bin/sglang-venv has huggingface_hub ${installed}, hack/sglang/requirements.txt pins '${pinned}': run hack/sglang-venv.sh" >&2
  exit 1
fi

tmp="$(mktemp)"
trap 'rm -f "${tmp}"' EXIT
"${python}" "${root}/hack/sglang/extract_hf_args.py" >"${tmp}"

if ${check}; then
  if ! cmp -s "${tmp}" "${out}"; then
    echo "${out#"${root}/"} is stale: run hack/hf-args.sh and commit the result." >&2
    diff -u "${out}" "${tmp}" | head -50 >&2 || true
    exit 1
  fi
  exit 0
fi
cp "${tmp}" "${out}"
echo "Wrote ${out#"${root}/"} (huggingface_hub ${installed})" >&2
