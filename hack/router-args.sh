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
requirements="${root}/hack/router/requirements.txt"
SMG_VERSION="$(sed -n 's/^smg==\([^ ]*\).*/\1/p' "${requirements}")"
SMG_WHEEL_SHA256="$(awk '/^smg==/{f=1; next} f && /--hash=sha256:/{sub(/.*--hash=sha256:/, ""); sub(/[ \\].*/, ""); print; exit}' "${requirements}")"
if [[ -z "${SMG_VERSION}" || ! "${SMG_WHEEL_SHA256}" =~ ^[0-9a-f]{64}$ ]]; then
  echo "${requirements#"${root}/"} has no smg==VERSION line with a --hash=sha256:..." >&2
  exit 1
fi
wheel_dir="${root}/bin/router"
wheel="${wheel_dir}/smg-${SMG_VERSION}-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
out="${root}/internal/router/router-args.json"
python="${PYTHON:-python3}"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [[ ! -f "${wheel}" ]]; then
  mkdir -p "${wheel_dir}"
  echo "Downloading smg ${SMG_VERSION} into ${wheel_dir#"${root}/"}" >&2
  "${python}" -m pip download --quiet --disable-pip-version-check \
    --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi abi3 \
    "smg==${SMG_VERSION}" -d "${wheel_dir}"
fi
actual="$("${python}" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "${wheel}")"
if [[ "${actual}" != "${SMG_WHEEL_SHA256}" ]]; then
  echo "The wheel ${wheel#"${root}/"} has SHA-256 ${actual}, expected ${SMG_WHEEL_SHA256}." >&2
  echo "Delete it and run $0 again; if the release was re-uploaded, review it and update the pin." >&2
  exit 1
fi

tmp="$(mktemp)"
trap 'rm -f "${tmp}"' EXIT
"${python}" "${root}/hack/router/extract_args.py" "${wheel}" >"${tmp}"
if ${check}; then
  if ! cmp -s "${tmp}" "${out}"; then
    echo "${out#"${root}/"} is stale: run hack/router-args.sh and commit the result." >&2
    diff -u "${out}" "${tmp}" | head -50 >&2 || true
    exit 1
  fi
  exit 0
fi
mkdir -p "$(dirname "${out}")"
cp "${tmp}" "${out}"
echo "Wrote ${out#"${root}/"} (smg ${SMG_VERSION})" >&2
