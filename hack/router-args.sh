#!/usr/bin/env bash
# Regenerates internal/router/router-args.json: the command-line arguments of the pinned router
# (smg's launch_router), read from its wheel by hack/router/extract_args.py.
#
# The wheel is downloaded once into bin/router/ and checked against the SHA-256 pinned in
# hack/router/requirements.txt, so every run reads the same bytes and writes the same file.
#
# Usage: hack/router-args.sh            regenerate the JSON
#        hack/router-args.sh --check    fail if the committed JSON is stale
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
# shellcheck source=hack/lib/pinned-wheel.sh
source "${root}/hack/lib/pinned-wheel.sh"

read -r SMG_VERSION SMG_WHEEL_SHA256 < <(pin_of smg "${root}/hack/router/requirements.txt") || exit 1
wheel="${root}/bin/router/smg-${SMG_VERSION}-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
out="${root}/internal/router/router-args.json"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

fetch_pinned_wheel "${wheel}" "smg==${SMG_VERSION}" "${SMG_WHEEL_SHA256}" \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi abi3

tmp="$(mktemp)"
trap 'rm -f "${tmp}"' EXIT
"${python}" "${root}/hack/router/extract_args.py" "${wheel}" >"${tmp}"
write_or_check "${tmp}" "${out}" "${check}" "smg ${SMG_VERSION}"
