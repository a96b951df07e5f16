# Everything a developer runs. `make test` is the command CI runs (.ci/run).
# Integration tests need PostgreSQL: set TEST_DATABASE_URL to a server whose
# role may create databases, or have a Docker engine for testcontainers.

GO       ?= go
BIN      := bin
BINARIES := checkout worker paymentsim catalogsim
DATABASE_URL ?= postgres://checkout:checkout@localhost:5432/checkout?sslmode=disable
export DATABASE_URL

.PHONY: test build migrate run up lint experiment experiment-matrix experiment-catalog experiment-lookup bench compose-smoke k8s-smoke chaos

## test: run every test (unit, integration against real Postgres, e2e) with the race detector
test:
	$(GO) test -race -count=1 -timeout 12m ./...

## build: compile the binaries into ./bin
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/...

## migrate: apply the schema (app + River) to DATABASE_URL
migrate: build
	$(BIN)/checkout migrate

## run: the whole stack as local processes against DATABASE_URL (no Docker)
run: build
	scripts/run-local

## experiment: the outage scenario for every mode at 20 and 40 req/s, stack as local processes; writes results/
experiment:
	GO=$(GO) scripts/experiment

## experiment-matrix: the scenario matrix, eleven provider behaviours in timeout and protected mode, one table (ROWS="1 5", MODES=protected pick some); local processes; writes results/matrix.md and .json
experiment-matrix:
	GO=$(GO) scripts/experiment-matrix

## experiment-catalog: the catalog down for 10 s under 20 req/s after a warm-up (stale cache), with a 5 s staleness bound, and from t=0 with a cold cache; local processes; writes results/
experiment-catalog:
	GO=$(GO) scripts/experiment-catalog

## experiment-lookup: the cost of settling an unknown charge outcome, create+confirm with the list as lookup against create, store, confirm with a retrieve, on the real paymentsim (healthy, rate limited, the seed outage) and a database made in DATABASE_URL's server; writes results/lookupcost.md
experiment-lookup: build
	$(BIN)/lookupcost -paymentsim $(BIN)/paymentsim -out results/lookupcost.md

## bench: orders/s of the real binaries against a one-transaction baseline, on a PostgreSQL 15 of its own at default settings; writes results/ (flags: BENCH_FLAGS="-runs 5")
bench:
	GO=$(GO) scripts/throughput $(BENCH_FLAGS)

## chaos: randomized soak of the real binaries (provider faults, kill -9, SIGTERM, Postgres crash, cut database, failover to a synchronous standby) on a Postgres primary and standby of its own, then an audit of Postgres against the provider's ledger; CHAOS_SEED, CHAOS_DURATION
CHAOS_SEED     ?= 1
CHAOS_DURATION ?= 5m
chaos:
	$(GO) test -count=1 -timeout 30m -run '^TestChaos$$' -v ./e2e -args -chaos.seed=$(CHAOS_SEED) -chaos.duration=$(CHAOS_DURATION)

## up: the whole stack in Docker
up:
	docker compose up --build

## compose-smoke: the README walkthrough and fault drills against `docker compose up` (needs a Docker engine; not in `make test`)
compose-smoke:
	scripts/compose-smoke

## k8s-smoke: the demo overlay on the cluster KUBECONFIG names (default: deploy/cluster/local-cluster's): build and load the images, apply, the walkthrough's first steps, then under load a provider outage, a checkout rollout restart, killed pods, a node drain and the NetworkPolicies (POSTGRES_UID/POSTGRES_GID for a stand-in postgres image; not in `make test`)
k8s-smoke:
	scripts/k8s-smoke

## lint: formatting, go vet and golangci-lint (configured in .golangci.yml, built from the tool module in tools/)
lint:
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) tool -modfile=tools/go.mod golangci-lint run ./...
