#!/usr/bin/env bash
# Regenerates internal/sglang/argspec/sglang-env.json: the environment variables that the pinned
# SGLang release and the pinned Mooncake client read, with where each is read and its default,
# found statically in their wheels (hack/sglang/extract_env.py says how).
#
# Both wheels are downloaded once into bin/ and checked against the SHA-256 pinned in
# hack/sglang/requirements.txt, so every run reads the same bytes and writes the same file.
# internal/sglang/env_vars.txt classifies every variable; TestEveryEnvVarIsClassified lists the
# ones a new release adds or drops.
#
# Usage: hack/sglang-env.sh            regenerate the JSON
#        hack/sglang-env.sh --check    fail if the committed JSON is stale
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
# shellcheck source=hack/lib/pinned-wheel.sh
source "${root}/hack/lib/pinned-wheel.sh"

req="${root}/hack/sglang/requirements.txt"
read -r SGLANG_VERSION SGLANG_WHEEL_SHA256 < <(pin_of sglang "${req}") || exit 1
read -r MOONCAKE_VERSION MOONCAKE_WHEEL_SHA256 < <(pin_of mooncake-transfer-engine-non-cuda "${req}") || exit 1
sglang_wheel="${root}/bin/sglang/sglang-${SGLANG_VERSION}-cp311-cp311-manylinux_2_34_x86_64.whl"
mooncake_wheel="${root}/bin/mooncake-wheel/mooncake_transfer_engine_non_cuda-${MOONCAKE_VERSION}-cp311-cp311-manylinux_2_28_x86_64.whl"
out="${root}/internal/sglang/argspec/sglang-env.json"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

fetch_pinned_wheel "${sglang_wheel}" "sglang==${SGLANG_VERSION}" "${SGLANG_WHEEL_SHA256}" \
  --platform manylinux_2_34_x86_64 --python-version 3.11 --implementation cp --abi cp311
fetch_pinned_wheel "${mooncake_wheel}" "mooncake-transfer-engine-non-cuda==${MOONCAKE_VERSION}" "${MOONCAKE_WHEEL_SHA256}" \
  --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311

tmp="$(mktemp)"
trap 'rm -f "${tmp}"' EXIT
"${python}" "${root}/hack/sglang/extract_env.py" "${sglang_wheel}" "${mooncake_wheel}" >"${tmp}"
write_or_check "${tmp}" "${out}" "${check}" "sglang ${SGLANG_VERSION}, mooncake ${MOONCAKE_VERSION}"
