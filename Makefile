# looprun: make is the front door.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
CONTROLLER_TOOLS_VERSION ?= v0.21.0
GOLANGCI_LINT_VERSION ?= v2.15.0
FUZZTIME ?= 30s

.PHONY: all
all: build

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and RBAC manifests.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:allowDangerousTypes=true paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: verify envtest ## Run every check and test (what CI runs).
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go test -race -count=1 ./...

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd and kubectl for the tests into bin/k8s (once).
	hack/setup-envtest.sh >/dev/null

.PHONY: verify
verify: verify-generated fmt-check vet lint ## Generated code fresh, formatting, vet, lint.

.PHONY: verify-generated
verify-generated: controller-gen ## Fail when generated code or manifests are stale.
	hack/verify-generated.sh

.PHONY: fmt-check
fmt-check: ## Fail when a Go file is not gofmt-formatted.
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s).
	go test ./internal/executor/interpolate -run '^$$' -fuzz '^FuzzExpand$$' -fuzztime $(FUZZTIME)
	go test ./internal/executor/evaluate -run '^$$' -fuzz '^FuzzDeterministic$$' -fuzztime $(FUZZTIME)
	go test ./internal/loopfile -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	go test ./internal/entrypoint -run '^$$' -fuzz '^FuzzEncode$$' -fuzztime $(FUZZTIME)

.PHONY: build
build: ## Build the binaries into bin/.
	go build -o $(LOCALBIN)/looprun ./cmd/looprun
	go build -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -o $(LOCALBIN)/entrypoint ./cmd/entrypoint

.PHONY: dev-up
dev-up: ## Start a local kube-apiserver and etcd with the CRDs (kubeconfig: bin/dev/kubeconfig).
	hack/dev-cluster.sh up

.PHONY: dev-down
dev-down: ## Stop the local control plane.
	hack/dev-cluster.sh down

.PHONY: run
run: ## Run the operator against the dev cluster, with local actions.
	KUBECONFIG=$(CURDIR)/bin/dev/kubeconfig go run ./cmd/manager --allow-local-actions

.PHONY: demo
demo: ## Dev cluster + operator + config/samples: watch a Loop run to completion.
	hack/demo.sh

.PHONY: bench
bench: ## Run the benchmarks (see bench/RESULTS.md).
	bash bench/run.sh

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
