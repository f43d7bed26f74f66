#!/usr/bin/env bash
# Regenerates internal/sglang/argspec/sglang-args.json: the command-line
# arguments that the pinned sglang release accepts, read statically from its
# wheel (importing sglang would need torch).
#
# The wheel is downloaded once into bin/sglang/ and checked against the SHA-256
# pinned in hack/sglang/requirements.txt, so every run reads the same bytes and
# writes the same file. The
# platform tags are pinned too: the wheel ships compiled extensions, and pip
# would otherwise pick the wheel matching the local Python.
#
# Usage: hack/sglang-args.sh            regenerate the JSON
#        hack/sglang-args.sh --check    fail if the committed JSON is stale
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
# shellcheck source=hack/lib/pinned-wheel.sh
source "${root}/hack/lib/pinned-wheel.sh"

# The pin is hack/sglang/requirements.txt's (shared with the conformance suite's venv): the
# version, and the SHA-256 of the CPython 3.11 wheel, its only hash.
read -r SGLANG_VERSION SGLANG_WHEEL_SHA256 < <(pin_of sglang "${root}/hack/sglang/requirements.txt") || exit 1
wheel="${root}/bin/sglang/sglang-${SGLANG_VERSION}-cp311-cp311-manylinux_2_34_x86_64.whl"
out="${root}/internal/sglang/argspec/sglang-args.json"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

fetch_pinned_wheel "${wheel}" "sglang==${SGLANG_VERSION}" "${SGLANG_WHEEL_SHA256}" \
  --platform manylinux_2_34_x86_64 --python-version 3.11 --implementation cp --abi cp311

tmp="$(mktemp)"
trap 'rm -f "${tmp}"' EXIT
"${python}" "${root}/hack/sglang/extract_args.py" "${wheel}" >"${tmp}"
write_or_check "${tmp}" "${out}" "${check}" "sglang ${SGLANG_VERSION}"
