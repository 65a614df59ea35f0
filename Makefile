# CAPTF. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
# -count=1: the e2e tests run a captf binary they build, which Go's test cache
# cannot see. The packages under test/ each start their own control plane
# and mostly wait (on terraform, on intervals); hack/test-suites.sh runs
# them three at a time, longest first, the e2e package as two shards (it
# alone was the wait: 28 of 33 min on 2026-12-07). The fuzz targets are not
# part of test (their instrumented build took minutes): their seed corpus
# runs as unit tests; `make fuzz` fuzzes. 2026-12-03: `.ci/run` on a fresh
# machine (empty module and build caches) 47.5 min: builds and verify 22,
# unit 3.5, ./test/... 22.
TEST_FLAGS ?= -count=1 -timeout 60m
TEST_PARALLEL ?= 3
# How many inputs each fuzz target runs in `make fuzz` (a count: a duration can fail spuriously at its deadline).
FUZZTIME ?= 50000x

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kubectl, CAPI's core manager (and its image) and clusterctl into bin/ (skipped when up to date)
	./hack/build-controlplane.sh
	./hack/build-capi.sh

.PHONY: prometheus
prometheus: ## Build Prometheus and promtool into bin/ for the alert tests (skipped when up to date)
	./hack/build-controlplane.sh --with-prometheus

.PHONY: velero
velero: ## Build Velero, its AWS object-store plugin and an S3 stand-in into bin/ for the disaster-recovery test (skipped when up to date)
	./hack/build-controlplane.sh --with-velero

.PHONY: plugin
plugin: ## Build the kubectl plugin, kubectl-captf, into bin/
	$(GO) build -o bin/kubectl-captf ./cmd/kubectl-captf

.PHONY: images
images: ## Build the manager and runner images as OCI archives in bin/images (no container engine; tofu built from source, git and busybox from Debian's packages)
	./hack/build-images.sh

.PHONY: release
release: ## Write the clusterctl provider files of this version (metadata, components, cluster templates, release notes) into out/infrastructure-terraform/<version>, a clusterctl local repository
	./hack/release.sh

.PHONY: localcloud
localcloud: ## Build the local cloud (its API server and provider), a provider mirror of it and the mirror's image into bin/
	./hack/build-localcloud.sh

.PHONY: local-up
local-up: controlplane localcloud plugin ## Run the quickstart: the local management plane, the local cloud, Cluster API and CAPTF, with examples/quickstart applied
	$(GO) build -o bin/local-up ./test/cmd/local-up
	exec bin/local-up

.PHONY: test
test: controlplane prometheus velero images ## Run every test, against a real local control plane (unit packages with the race detector)
	$(GO) test -race $(TEST_FLAGS) ./pkg/... ./cmd/...
	GO=$(GO) PARALLEL=$(TEST_PARALLEL) ./hack/test-suites.sh $(TEST_FLAGS)

.PHONY: mutants
mutants: ## Break each guard in hack/mutants.sh on purpose and check a unit test fails (not part of test; several minutes)
	./hack/mutants.sh

.PHONY: fuzz
fuzz: ## Fuzz the webhook's AdmissionReview decoding and validators, FUZZTIME each (seeds in pkg/webhook/testdata/fuzz)
	$(GO) test -run '^$$' -fuzz '^FuzzAdmissionReview$$' -fuzztime $(FUZZTIME) ./pkg/webhook/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./pkg/webhook/

.PHONY: generate
generate: ## Regenerate clients, listers, informers, deepcopy and CRDs
	./hack/update-codegen.sh

.PHONY: verify
verify: ## Fail on stale generated code or CRDs, gofmt, vet, go.mod drift or a mutant whose text is gone
	./hack/verify-codegen.sh
	./hack/mutants.sh --check
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^pkg/generated/')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	cd hack/tools && $(GO) mod tidy -diff
	cd hack/tools/prometheus && $(GO) mod tidy -diff
	cd hack/tools/velero && $(GO) mod tidy -diff && $(GO) vet ./s3
	cd hack/tools/imagebuild && $(GO) mod tidy -diff && $(GO) vet ./...
	cd test/localcloud && $(GO) mod tidy -diff && $(GO) vet ./...

.PHONY: bench
bench: controlplane ## Manager at scale: 1,000 TerraformClusters, prints RSS, CPU, latency and API writes
	$(GO) run ./test/cmd/bench -n 1000
