# hicache-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN := $(CURDIR)/bin
CONTROLLER_GEN := $(BIN)/controller-gen
HELM := $(BIN)/helm
export KUBEBUILDER_ASSETS := $(BIN)




.PHONY: help
help: ## Show the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-14s %s\n", $$1, $$2}'

##@ Development

.PHONY: tools
tools: ## Build the pinned toolchain into bin/ (control plane, kwok, helm, controller-gen; cached)
	hack/tools.sh

.PHONY: generate
generate: ## Regenerate the profiles' CEL tables, deepcopy, CRDs, RBAC and the chart's copies of them
	hack/tools.sh controller-gen
	go run ./hack/profile-cel api/v1alpha1/hicachedeployment_types.go
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true rbac:roleName=manager-role \
	  paths=./api/... paths=./internal/controller/... \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	hack/sync-chart.sh
	hack/api-docs.sh >/dev/null

.PHONY: verify
verify: ## Fail if generated code, go.mod or formatting drift from the sources
	hack/verify.sh

.PHONY: build
build: ## Build the manager and the kubectl plugin into bin/
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/kubectl-hicache ./cmd/kubectl-hicache

.PHONY: images
images: ## Build the local images into bin/images/*.tar: operator, Mooncake, etcd, router, pause, SGLang stand-in (cached on content; FORCE=1 rebuilds)
	go run ./cmd/imagebuild $(if $(FORCE),-force)

.PHONY: unit
unit: ## Unit tests: pure logic, no cluster
	go test -count=1 -skip '^TestCluster' $$(go list ./... | grep -v -e /test/ -e /internal/localcluster -e /cmd/localcluster -e /internal/mooncake)

.PHONY: test
test: ## Every test: unit, integration (real kube-apiserver, etcd, scheduler, kwok, Mooncake master), e2e, then the fuzz targets; not test-faults
	hack/test.sh

.PHONY: image-sglang-cpu
image-sglang-cpu: ## Build the SGLang CPU serving image into bin/images/sglang-cpu/ (the pinned server venv, the CPU stand-ins, the Mooncake client; several GB; cached on content)
	go run ./cmd/imagebuild $(if $(FORCE),-force) mooncake sglang-cpu

.PHONY: test-engine
test-engine: ## The real SGLang server on CPU in the rank pod on the real node: the stale L3 read with the operator off, and its prevention with it on (about 20 min cold)
	hack/node-packages.sh
	hack/tools.sh
	hack/mooncake.sh
	hack/sglang-server-venv.sh
	go run ./cmd/imagebuild
	go run ./cmd/imagebuild sglang-cpu
	go test -count=1 -timeout 60m -v $(GO_TEST_FLAGS) ./test/engine/

.PHONY: bench-scale
bench-scale: ## The scale benchmark: N = 50, 200, 1000 deployments, the manager binary against the raw baseline (BENCH_N=200 for one N); writes docs/benchmarks.md
	go test -count=1 -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 4h -v ./test/scale/

.PHONY: fuzz
fuzz: ## Run every go test -fuzz target for FUZZTIME each (default 5s)
	hack/fuzz.sh

.PHONY: test-faults
test-faults: build ## The fault catalogue: bin/manager killed, restarted, failed over; the API server restarted (a few minutes)
	HICACHE_MANAGER=$(BIN)/manager go test -count=1 -timeout 20m $(GO_TEST_FLAGS) ./test/faults/

##@ Local cluster

.PHONY: local-up
local-up: ## Start the local control plane with simulated GPU nodes
	hack/local-up.sh

.PHONY: local-down
local-down: ## Stop the local control plane
	hack/local-down.sh

.PHONY: demo
demo: ## Local control plane + simulated GPU nodes + Mooncake master + the operator + samples
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop the demo
	hack/demo.sh down
