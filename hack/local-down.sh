#!/usr/bin/env bash
# Stops the local cluster started by hack/local-up.sh: every process, then its data in
# .local/ (the log of the last run, .local/localcluster.log, stays).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="${ROOT}/bin"

if [[ ! -x "${BIN}/localcluster" ]]; then
  (cd "${ROOT}" && go build -o "${BIN}/localcluster" ./cmd/localcluster)
fi
"${BIN}/localcluster" --state-dir "${ROOT}/.local" down
