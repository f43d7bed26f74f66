#!/usr/bin/env bash
# The project's test command (make test). On a fresh machine it first installs what the tests
# use: the real node's Debian packages (hack/node-packages.sh), the control plane, the real
# node's kubelet, kube-proxy and CoreDNS, kwok and helm built from source (hack/tools.sh), the
# Mooncake master and Python client (hack/mooncake.sh), the pinned SGLang release's storage code
# for the conformance suite (hack/sglang-venv.sh: about 3 GB downloaded and a 6 GB venv the first
# time), and the local images (make images: the operator, Mooncake and pause tarballs in
# bin/images). Each skips work already done.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"

start=$SECONDS
echo "test: installing the real node's packages (skipped when present)"
hack/node-packages.sh
echo "test: building the toolchain (cached after the first run)"
hack/tools.sh
echo "test: installing the Mooncake master and client (cached after the first run)"
hack/mooncake.sh
echo "test: installing the pinned SGLang release for the conformance suite (cached after the first run)"
hack/sglang-venv.sh
echo "test: toolchain ready in $((SECONDS - start))s"
echo "test: building the local images (the Mooncake rootfs takes minutes the first time; cached after)"
make -s images
echo "test: images ready in $((SECONDS - start))s"

export KUBEBUILDER_ASSETS="${ROOT}/bin"
# test/faults times what it breaks: make test-faults runs it on its own, not beside the rest.
# test/engine runs the real SGLang server from a several-GB image: make test-engine runs it.
echo "test: go test ./... (but test/faults and test/engine)"
go test -count=1 -timeout "${TEST_TIMEOUT:-40m}" ${GO_TEST_FLAGS:-} $(go list ./... | grep -v -e /test/faults -e /test/engine)
echo "test: fuzzing every go test -fuzz target for ${FUZZTIME:-5s} (make fuzz)"
hack/fuzz.sh
echo "test: done in $((SECONDS - start))s"
