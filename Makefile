# looprun: make is the front door.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
HELM ?= $(LOCALBIN)/helm
CRD_REF_DOCS ?= $(LOCALBIN)/crd-ref-docs
KUBECTL ?= $(LOCALBIN)/k8s/kubectl
HELM_VERSION ?= v3.22.0
CRD_REF_DOCS_VERSION ?= v0.3.0
IMG ?= ghcr.io/looprun/looprun:latest
CONTROLLER_TOOLS_VERSION ?= v0.21.0
GOLANGCI_LINT_VERSION ?= v2.15.0
FUZZTIME ?= 30s
# make test's fuzz run is bounded by a count of executions, not a duration: a
# duration-bounded run of Go 1.26 can fail at its deadline with a bare
# "context deadline exceeded" and no failing input (a race in the fuzzing
# coordinator, go.dev/issue/75804). A count has no deadline to race.
SHORT_FUZZTIME ?= 20000x
# What looprun version prints: the chart's appVersion (the version the chart
# labels the operator's Deployment with) and the commit built from.
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/looprun/Chart.yaml)
GIT_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
VERSION_LDFLAGS = -X github.com/looprun/looprun/internal/version.Version=$(VERSION) -X github.com/looprun/looprun/internal/version.GitCommit=$(GIT_COMMIT)

.PHONY: all
all: build

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and RBAC manifests.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:allowDangerousTypes=true paths="./api/...;./controllers/...;./cmd/...;./internal/..." output:crd:artifacts:config=config/crd/bases
	hack/sync-chart.sh

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
test: verify envtest helm ## Run every check and test (what CI runs), and a short run of every fuzz target.
	HELM=$(HELM) KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go test -race -count=1 -timeout 30m ./...
	$(MAKE) fuzz FUZZTIME=$(SHORT_FUZZTIME)

.PHONY: test-e2e
test-e2e: helm ## Run the end-to-end tests on a real one-node cluster built here (root; see docs/e2e.md).
	HELM=$(HELM) hack/e2e/run.sh

.PHONY: test-chaos
test-chaos: helm ## 50 Loops on the real node while the operator is killed 100 times and the API server restarted 5 times (root; not in CI; MODE=warm for Warm mode; see docs/e2e.md).
	HELM=$(HELM) E2E_LABELS=chaos E2E_TIMEOUT=150m LOOPRUN_CHAOS_MODE=$(MODE) hack/e2e/run.sh -ginkgo.v -ginkgo.timeout=145m

.PHONY: ui
ui: ## Build the web view's front end (web/, npm packages pinned in web/package-lock.json) into internal/ui/dist, embedded in looprun.
	cd web && npm ci --no-audit --no-fund && npm run build

.PHONY: test-ui
test-ui: ui envtest ## Drive looprun ui in Debian's chromium with playwright-core, over local runs and the operator's Loops on a local control plane (installs chromium with apt-get when missing; screenshots in bin/ui-test), then make tutorial-check.
	git diff --exit-code -- internal/ui/dist || { echo "internal/ui/dist is stale: commit what make ui built" >&2; exit 1; }
	hack/ui-deps.sh
	go build -o $(LOCALBIN)/looprun ./cmd/looprun
	go build -o $(LOCALBIN)/manager ./cmd/manager
	go build -o $(LOCALBIN)/devcluster ./hack/devcluster
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" LOOPRUN=$(LOCALBIN)/looprun MANAGER=$(LOCALBIN)/manager \
		DEVCLUSTER=$(LOCALBIN)/devcluster KUBECTL=$(LOCALBIN)/k8s/kubectl SHOTS=$(LOCALBIN)/ui-test node web/test/ui.test.mjs
	$(MAKE) tutorial-check

.PHONY: tutorial-check
tutorial-check: envtest ## Run docs/tutorial.md's by-hand cluster walk, command by command, on a fresh clone of HEAD (part of test-ui).
	hack/tutorial-check.sh

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd and kubectl for the tests into bin/k8s (once).
	hack/setup-envtest.sh >/dev/null

.PHONY: verify
verify: verify-generated tidy-check fmt-check vet lint chart-lint ## Generated code and docs fresh, go.mod tidy, formatting, vet, lint, chart, fuzz target list, no tracked binaries.
	hack/verify-fuzz-targets.sh
	hack/verify-no-binaries.sh

.PHONY: verify-generated
verify-generated: controller-gen crd-ref-docs ## Fail when generated code, manifests or the API reference are stale.
	hack/verify-generated.sh

.PHONY: docs
docs: crd-ref-docs ## Generate the API reference (docs/reference/api.md) from the Go types.
	$(CRD_REF_DOCS) --source-path=api/v1alpha1 --config=hack/crd-ref-docs/config.yaml --renderer=markdown \
		--output-path=docs/reference/api.md --log-level=ERROR

.PHONY: chart-lint
chart-lint: helm ## helm lint and helm template the chart (test/chart checks what it renders).
	$(HELM) lint --strict charts/looprun
	$(HELM) template looprun charts/looprun --namespace looprun-system >/dev/null

.PHONY: tidy-check
tidy-check: ## Fail when go mod tidy would change go.mod or go.sum (prints the diff).
	go mod tidy -diff

.PHONY: fmt-check
fmt-check: ## Fail when a Go file is not gofmt-formatted.
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

# FUZZ_TARGETS are PACKAGE:TARGET, every fuzz target of the repository
# (hack/verify-fuzz-targets.sh checks the list is complete).
FUZZ_TARGETS := \
	./internal/executor/interpolate:FuzzExpand \
	./internal/executor/evaluate:FuzzDeterministic \
	./internal/loopfile:FuzzParse \
	./internal/runner/entrypoint:FuzzEncode \
	./internal/eventlog:FuzzDecode \
	./internal/eventlog:FuzzKeepThrough \
	./internal/eventlog:FuzzTruncateAfter \
	./internal/history:FuzzCheckpointLine

.PHONY: print-fuzz-targets
print-fuzz-targets:
	@echo $(FUZZ_TARGETS)

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s; a count such as 5000x also works).
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "go test $$pkg -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME)"; \
		go test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

.PHONY: build
build: ## Build the binaries into bin/.
	go build -ldflags "$(VERSION_LDFLAGS)" -o $(LOCALBIN)/looprun ./cmd/looprun
	go build -o $(LOCALBIN)/manager ./cmd/manager
	go build -o $(LOCALBIN)/gateway ./cmd/gateway
	CGO_ENABLED=0 go build -o $(LOCALBIN)/entrypoint ./cmd/entrypoint

.PHONY: dev-up
dev-up: ## Start a local kube-apiserver and etcd with the CRDs (kubeconfig: bin/dev/kubeconfig).
	hack/dev-cluster.sh up

.PHONY: dev-down
dev-down: ## Stop the local control plane.
	hack/dev-cluster.sh down

.PHONY: run
run: ## Run the operator against the dev cluster; actions run as Pods on a test kubelet (LOCAL=1: as the operator's processes).
	hack/operator.sh

.PHONY: demo
demo: ## Dev cluster + operator + config/samples: watch a Loop run to completion.
	hack/demo.sh

##@ Deployment

.PHONY: deploy
deploy: ## Deploy the operator (config/default) with image IMG to the current kubeconfig's cluster.
	IMG=$(IMG) KUBECTL=$(KUBECTL) hack/deploy.sh apply

.PHONY: undeploy
undeploy: ## Remove what make deploy created, Loops included.
	IMG=$(IMG) KUBECTL=$(KUBECTL) hack/deploy.sh delete

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

.PHONY: helm
helm: $(HELM)
$(HELM): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: crd-ref-docs
crd-ref-docs: $(CRD_REF_DOCS)
$(CRD_REF_DOCS): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install github.com/elastic/crd-ref-docs@$(CRD_REF_DOCS_VERSION)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
