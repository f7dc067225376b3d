# ManifestSync. `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
TOOLS_MOD := hack/tools/go.mod
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
CUE := $(BIN)/cue
STARLARK := $(BIN)/starlark
HELM := $(BIN)/helm
PKGS := ./...
IMAGE := $(BIN)/image
# IMAGE_FLAGS are passed to `hack/image build`: -version V, -licenses SPDX, -source URL, -platforms LIST.
IMAGE_FLAGS ?=

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build bin/engine (the full engine: every command, evaluating in copies of itself) and bin/engine-worker (the evaluators alone, the image's /engine-worker).
	CGO_ENABLED=0 $(GO) build -trimpath -tags $(ENGINE_TAGS) -o $(BIN)/engine ./cmd/engine
	CGO_ENABLED=0 $(GO) build -trimpath -tags $(ENGINE_TAGS) -o $(BIN)/engine-worker ./cmd/engine-worker

# bin/engine is built as the image builds its programs: static, and without
# the Go plugin support that kustomize's plugin loader would link (which
# makes the binary 30 MB larger and an idle operator's resident set 19 MiB
# larger; internal/enginebuild says why; its test checks these two lines).
# The image's /engine adds the tag leanoperator (internal/lean), which
# leaves the evaluators out of it: they run in /engine-worker.
ENGINE_TAGS = kustomize_disable_go_plugin_support

# TEST_FLAGS build the test binaries as the engine is built: with
# ENGINE_TAGS, which leaves out kustomize's Go plugin loader. With it
# linked, every test binary that imports kustomize (most of them) is linked
# as a dynamic program by the system linker, 210 MB for the operator's
# tests: linking the 52 test binaries took 640 s of CPU, more than a third
# of make test's. With the tag and without debug information (-s -w: a
# failing test's stack trace keeps its files and lines) they link in less
# than half of that.
TEST_FLAGS = -tags $(ENGINE_TAGS) -ldflags='-s -w'

# TEST_FIRST are the packages that run 10 s or more, the longest first (as
# timed in make test on 2 idle cores: operator/controller and cmd/engine
# about 7 minutes each, side by side with the others, operator/shard and
# operator/soak 3, the rest 10-90 s). go test starts packages in the order
# they are named, TEST_P at a time, and a long one started late would run
# on after the others while a core idles. go test runs each package once,
# whether it is named here, by PKGS or both.
TEST_FIRST := ./operator/controller ./cmd/engine ./operator/shard ./operator/soak \
	./hack/demo ./bench/w9 ./ui/e2e ./hack/image ./operator/e2e ./operator/rollout \
	./engine/importer ./engine/source/git ./bench/harness ./operator/testenv ./operator/config \
	./ui ./ui/inspect ./oci ./lang/cue ./bench/w11 ./operator/applier ./operator/testenv/workloadtest \
	./engine ./engine/worker

# TEST_P is how many test packages run at once (go test -p). Most of the
# long ones wait on the API server, on leases and on timeouts as much as
# they compute: with two at a time on 2 cores, a quarter of make test's CPU
# time was idle; with three it is busy to the end.
TEST_P ?= 3

# TEST_TIMEOUT bounds each test package's run (go test -timeout). Nothing
# is built under it: the control plane and the image test's cross-builds
# are built before the tests start. The longest package takes about 7
# minutes in make test on 2 idle cores (beside two others); at load 16-22
# it took 18 (make test-loaded, two at a time).
TEST_TIMEOUT ?= 30m

.PHONY: test
test: $(HELM) ## Run every test (installs what the tests need first: etcd, sshd, docker-registry, chromium, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, bin/helm, the engine's cross-builds).
	hack/test-deps.sh
	hack/envtest.sh >/dev/null
	$(GO) run ./hack/image compile -o $(BIN)/programs
	KUBEBUILDER_ASSETS=$$(hack/envtest.sh) MANIFESTSYNC_IMAGE_PROGRAMS=$(BIN)/programs $(GO) test $(TEST_FLAGS) -p $(TEST_P) -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FIRST) $(PKGS)

.PHONY: test-loaded
test-loaded: ## Run make test while busy loops load the machine (LOAD=13 of them: a load average of about 15 on 2 cores).
	hack/loaded.sh $(MAKE) test

.PHONY: ci-cold
ci-cold: ## Run .ci/run (make verify, make test) as on a fresh machine: empty Go module and build caches, no bin/.
	CI_COLD=1 .ci/run

.PHONY: soak
soak: ## Run the fault suite for 15 minutes, then the sharded one for 15 (SOAK_DURATION=15m; SOAK_SEED=N replays a run); their tables go to bin/soak-report.md and bin/soak-report-shards.md.
	hack/test-deps.sh
	SOAK_DURATION=$${SOAK_DURATION:-15m} SOAK_REPORT=$(BIN)/soak-report.md KUBEBUILDER_ASSETS=$$(hack/envtest.sh) \
		$(GO) test $(TEST_FLAGS) -count=1 -timeout 60m -run '^TestSoak(Shards)?$$' -v ./operator/soak

.PHONY: test-short
test-short: ## Run the fast unit tests only.
	$(GO) test $(TEST_FLAGS) -short $(PKGS)

# FUZZ_TARGETS are the fuzz targets make fuzz runs, as package:FuzzName.
FUZZ_TARGETS := ./engine:FuzzDecodeDocuments ./engine:FuzzLoadSyncFiles ./engine:FuzzPatch ./lang/starlark:FuzzLoadAndCall ./engine/redact:FuzzString
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run each fuzz target (FUZZ_TARGETS) for FUZZTIME (default 30s); the seed corpora (testdata/fuzz) also run in make test.
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} $${t##*:} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t##*:}\$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done

# The demo runs built, not with go run: go run exits 1 after a Ctrl-C,
# whatever the program's own exit status (the demo's is 0).
.PHONY: demo
demo: ## Start a local control plane, run the operator on the examples, show their status (DEMO_EXIT=1: exit once all are Ready). Installs only etcd and git when absent.
	hack/test-deps.sh demo
	$(GO) build -o $(BIN)/demo-run ./hack/demo
	KUBEBUILDER_ASSETS=$$(hack/envtest.sh) $(BIN)/demo-run

.PHONY: bench
bench: $(CUE) $(STARLARK) ## Run the benchmarks (W1-W12 against their baselines on a local control plane; writes bench/REPORT.md and bench/fanout.svg), then the Go benchmarks.
	hack/test-deps.sh
	KUBEBUILDER_ASSETS=$$(hack/envtest.sh) $(GO) run ./bench/run -cue $(CUE) -starlark $(STARLARK) -rounds 3
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./engine ./engine/worker ./lang/...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run gofmt, go vet and golangci-lint.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GOLANGCI_LINT) run $(PKGS)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object paths=./api/...
	hack/gen-k8s-schemas.sh

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD into operator/config/crd, and copy it and the alert rules into the chart.
	$(CONTROLLER_GEN) crd:crdVersions=v1 paths=./api/... output:crd:artifacts:config=operator/config/crd/bases
	rm -f operator/chart/crds/*.yaml
	cp operator/config/crd/bases/*.yaml operator/chart/crds/
	cp operator/config/monitoring/rules.yaml operator/chart/files/prometheus-rules.yaml

.PHONY: chart-lint
chart-lint: $(HELM) ## Lint the Helm chart (operator/chart) with helm lint --strict.
	$(HELM) lint --strict operator/chart

# FMT_PATHS hold the .star and .cue files engine fmt keeps formatted (make
# verify checks them): the examples and the testdata that are files of their
# own (scripts inside txtar archives are not), not the generated schemas/k8s.
FMT_PATHS := examples stdlib/testdata lang/starlark/testdata cmd/engine/testdata/vet schemas/manifestsync bench/w3

.PHONY: docs
docs: ## Generate docs/stdlib.md and docs/stubs (the stdlib, from the tables of engine doc) and docs/manifestsync.schema.json (from the CRD).
	$(GO) run ./cmd/engine doc -o markdown > docs/stdlib.md
	$(GO) run ./cmd/engine doc --stubs docs/stubs
	$(GO) run ./cmd/engine schema > docs/manifestsync.schema.json

.PHONY: verify
verify: generate manifests docs ## Fail when generated files are stale, go.mod is untidy or code is unformatted (Go, and engine fmt over FMT_PATHS).
	$(GO) mod tidy
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run ./cmd/engine fmt --check $(FMT_PATHS)
	$(GO) vet $(PKGS)
	@git diff --exit-code -- go.mod go.sum operator/ schemas/ docs/ || { echo "generated files or go.mod are stale: run make generate manifests docs and go mod tidy"; exit 1; }
	@untracked=$$(git status --porcelain --untracked-files=all -- operator/ schemas/ docs/ | grep '^??' || true); test -z "$$untracked" || { echo "$$untracked"; echo "generated files are not committed"; exit 1; }

##@ Image

ifneq ($(filter image-push,$(MAKECMDGOALS)),)
ifeq ($(IMG),)
$(error make image-push needs IMG=host/repo:tag)
endif
endif

.PHONY: image
image: ## Build the engine's OCI image (linux/amd64 and linux/arm64, no Docker) as an OCI layout in bin/image; reproducible per commit (warm ~1 min; the first, cold build cross-compiles everything: ~18 min on 2 busy cores).
	$(GO) run ./hack/image build -o $(IMAGE) $(IMAGE_FLAGS)

.PHONY: image-push
image-push: image ## Push the image to IMG (make image-push IMG=host/repo:tag; credentials from ~/.docker/config.json).
	$(GO) run ./hack/image push -layout $(IMAGE) $(IMG)

##@ Tools

.PHONY: envtest
envtest: ## Provide etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok under bin/envtest, for the tests, the demo and the benchmarks alike (cold: ~15 min, each build printing its progress; rebuilt only when their sources change).
	@hack/envtest.sh

$(CONTROLLER_GEN): $(TOOLS_MOD)
	cd hack/tools && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(CUE): hack/tools/cue/go.mod
	cd hack/tools/cue && $(GO) build -o $@ cuelang.org/go/cmd/cue

$(STARLARK): hack/tools/starlark/go.mod
	cd hack/tools/starlark && $(GO) build -o $@ go.starlark.net/cmd/starlark

.PHONY: helm
helm: $(HELM) ## Build bin/helm (the Helm CLI the chart's tests run), pinned by hack/tools/helm/go.mod.

# Stamped as Helm's own Makefile stamps it: its version, and for the
# cluster's version that helm template and helm lint assume, the Kubernetes
# release of its client-go (v0.N is 1.N).
HELM_VERSION = $(shell cd hack/tools/helm && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM_K8S_MINOR = $(word 2,$(subst ., ,$(shell cd hack/tools/helm && $(GO) list -m -f '{{.Version}}' k8s.io/client-go)))
HELM_LDFLAGS = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/lint/rules pkg/chartutil,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))

$(HELM): hack/tools/helm/go.mod
	cd hack/tools/helm && $(GO) build -ldflags '$(HELM_LDFLAGS)' -o $@ helm.sh/helm/v3/cmd/helm

$(GOLANGCI_LINT): hack/tools/lint/go.mod
	cd hack/tools/lint && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
