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

# The pin is hack/sglang/requirements.txt's (shared with the conformance suite's venv): the
# version, and the SHA-256 of the CPython 3.11 wheel, its only hash.
requirements="${root}/hack/sglang/requirements.txt"
SGLANG_VERSION="$(sed -n 's/^sglang==\([^ ]*\).*/\1/p' "${requirements}")"
SGLANG_WHEEL_SHA256="$(awk '/^sglang==/{f=1; next} f && /--hash=sha256:/{sub(/.*--hash=sha256:/, ""); sub(/[ \\].*/, ""); print; exit}' "${requirements}")"
if [[ -z "${SGLANG_VERSION}" || ! "${SGLANG_WHEEL_SHA256}" =~ ^[0-9a-f]{64}$ ]]; then
  echo "${requirements#"${root}/"} has no sglang==VERSION line with a --hash=sha256:..." >&2
  exit 1
fi
SGLANG_WHEEL="sglang-${SGLANG_VERSION}-cp311-cp311-manylinux_2_34_x86_64.whl"
wheel_dir="${root}/bin/sglang"
wheel="${wheel_dir}/${SGLANG_WHEEL}"
out="${root}/internal/sglang/argspec/sglang-args.json"
python="${PYTHON:-python3}"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

sha256() {
  "${python}" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
}

if [[ ! -f "${wheel}" ]]; then
  mkdir -p "${wheel_dir}"
  echo "Downloading sglang ${SGLANG_VERSION} into ${wheel_dir#"${root}/"}" >&2
  "${python}" -m pip download --quiet --disable-pip-version-check \
    --no-deps --only-binary=:all: \
    --platform manylinux_2_34_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
    "sglang==${SGLANG_VERSION}" -d "${wheel_dir}"
fi

actual="$(sha256 "${wheel}")"
if [[ "${actual}" != "${SGLANG_WHEEL_SHA256}" ]]; then
  echo "The wheel ${wheel#"${root}/"} has SHA-256 ${actual}, expected ${SGLANG_WHEEL_SHA256}." >&2
  echo "Delete it and run $0 again; if the release was re-uploaded, review it and update the pin." >&2
  exit 1
fi

tmp="$(mktemp)"
trap 'rm -f "${tmp}"' EXIT
"${python}" "${root}/hack/sglang/extract_args.py" "${wheel}" >"${tmp}"

if ${check}; then
  if ! cmp -s "${tmp}" "${out}"; then
    echo "${out#"${root}/"} is stale: run hack/sglang-args.sh and commit the result." >&2
    diff -u "${out}" "${tmp}" | head -50 >&2 || true
    exit 1
  fi
  exit 0
fi

mkdir -p "$(dirname "${out}")"
cp "${tmp}" "${out}"
echo "Wrote ${out#"${root}/"} (sglang ${SGLANG_VERSION})" >&2
