# Helpers for scripts that read a pinned wheel: the pin (version and SHA-256) from a
# requirements file, a download checked against it, and a generated file written or checked.
# Source it; the caller sets `root` (the repository) and `python`.

# pin_of PACKAGE REQUIREMENTS: prints "VERSION SHA256" of PACKAGE's pin (its first
# --hash=sha256 line), or fails saying what the file lacks.
pin_of() {
  local pkg="$1" req="$2" version sha
  version="$(sed -n "s/^${pkg}==\([^ ]*\).*/\1/p" "${req}")"
  sha="$(awk -v p="^${pkg}==" '$0 ~ p {f=1; next} f && /--hash=sha256:/{sub(/.*--hash=sha256:/, ""); sub(/[ \\].*/, ""); print; exit}' "${req}")"
  if [[ -z "${version}" || ! "${sha}" =~ ^[0-9a-f]{64}$ ]]; then
    echo "${req#"${root}/"} has no ${pkg}==VERSION line with a --hash=sha256:..." >&2
    return 1
  fi
  echo "${version} ${sha}"
}

# fetch_pinned_wheel WHEEL SPEC SHA256 PIP_ARGS...: downloads SPEC (pkg==version) into WHEEL's
# directory with PIP_ARGS unless WHEEL is there, then fails unless WHEEL has SHA256.
fetch_pinned_wheel() {
  local wheel="$1" spec="$2" want="$3" actual
  shift 3
  if [[ ! -f "${wheel}" ]]; then
    mkdir -p "$(dirname "${wheel}")"
    echo "Downloading ${spec} into $(dirname "${wheel#"${root}/"}")" >&2
    "${python}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      "$@" "${spec}" -d "$(dirname "${wheel}")"
  fi
  actual="$("${python}" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "${wheel}")"
  if [[ "${actual}" != "${want}" ]]; then
    echo "The wheel ${wheel#"${root}/"} has SHA-256 ${actual}, expected ${want}." >&2
    echo "Delete it and run $0 again; if the release was re-uploaded, review it and update the pin." >&2
    return 1
  fi
}

# write_or_check GENERATED OUT CHECK WHAT: with CHECK=true fails when OUT differs from GENERATED
# (showing the difference), otherwise copies GENERATED to OUT; WHAT names the source in the log.
write_or_check() {
  local generated="$1" out="$2" check="$3" what="$4"
  if ${check}; then
    if ! cmp -s "${generated}" "${out}"; then
      echo "${out#"${root}/"} is stale: run $0 and commit the result." >&2
      diff -u "${out}" "${generated}" | head -50 >&2 || true
      return 1
    fi
    return 0
  fi
  mkdir -p "$(dirname "${out}")"
  cp "${generated}" "${out}"
  echo "Wrote ${out#"${root}/"} (${what})" >&2
}
