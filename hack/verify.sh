#!/usr/bin/env bash
# Fails when anything generated drifts from its source: deepcopy, CRDs, RBAC, the chart's copies,
# SGLang's argument definitions and the environment variables SGLang and Mooncake read; and when go.mod, formatting or vet are off.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"

GENERATED=(api/v1alpha1/zz_generated.deepcopy.go config/crd config/rbac/role.yaml charts/hicache-operator/crds
           charts/hicache-operator/templates/_manager-rules.tpl charts/hicache-operator/templates/flush-override.yaml
           internal/sglang/argspec/sglang-args.json internal/sglang/argspec/sglang-env.json internal/router/router-args.json
           docs/reference/api.md)
before=$(mktemp -d)
trap 'rm -rf "${before}"' EXIT
for p in "${GENERATED[@]}"; do
  [[ -e "$p" ]] && mkdir -p "${before}/$(dirname "$p")" && cp -r "$p" "${before}/$p"
done

echo "verify: regenerating"
make -s generate >/dev/null
[[ -x hack/sglang-args.sh ]] && hack/sglang-args.sh >/dev/null
[[ -x hack/sglang-env.sh ]] && hack/sglang-env.sh >/dev/null
[[ -x hack/router-args.sh ]] && hack/router-args.sh 2>/dev/null
[[ -x hack/api-docs.sh ]] && hack/api-docs.sh >/dev/null

fail=0
for p in "${GENERATED[@]}"; do
  if [[ ! -e "$p" && ! -e "${before}/$p" ]]; then continue; fi
  if ! diff -r "${before}/$p" "$p" >/tmp/verify-diff.$$ 2>&1; then
    echo "verify: $p is out of date with its source; the regenerated version is now in the tree, commit it:"
    head -n 40 /tmp/verify-diff.$$
    fail=1
  fi
done
rm -f /tmp/verify-diff.$$

echo "verify: go.mod"
if ! go mod tidy -diff >/dev/null 2>&1; then
  echo "verify: go.mod/go.sum are not tidy; run 'go mod tidy':"
  go mod tidy -diff | head -n 40 || true
  fail=1
fi

echo "verify: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^hack/tools/') 2>/dev/null || true)
if [[ -n "${unformatted}" ]]; then
  echo "verify: not gofmt-ed: ${unformatted}"
  fail=1
fi

echo "verify: go vet"
go vet ./... || fail=1

echo "verify: golangci-lint"
hack/tools.sh golangci-lint >/dev/null
# Two checkouts verified at once on one machine take turns rather than one failing.
bin/golangci-lint run --allow-serial-runners ./... || fail=1

echo "verify: Dockerfile"
hack/lint-dockerfile.sh || fail=1

if [[ ${fail} -ne 0 ]]; then
  echo "verify: FAILED"
  exit 1
fi
echo "verify: clean"
