# tether — the two commands a newcomer runs are `make run` and `make test`.
GO      ?= go
BIN     ?= bin
PLUGINS := shell ecs sparkeks
# The Kubernetes tests run a real kube-apiserver built from the Go module proxy
# (tools/kube-apiserver pins its version) and Debian's etcd-server.
KUBE_VERSION   := $(shell awk '$$1 == "k8s.io/kubernetes" {print $$2}' tools/kube-apiserver/go.mod)
KUBE_APISERVER := .tether/bin/kube-apiserver-$(KUBE_VERSION)
# Its garbage collector (kube-controller-manager, same module and version)
# and kubeflow's spark-operator controller (tools/spark-operator pins its
# version) run in the Spark operator tests (internal/kubetest).
KUBE_CONTROLLER_MANAGER := .tether/bin/kube-controller-manager-$(KUBE_VERSION)
SPARK_OPERATOR_VERSION  := $(shell awk '$$1 == "github.com/kubeflow/spark-operator/v2" {print $$2}' tools/spark-operator/go.mod)
SPARK_OPERATOR          := .tether/bin/spark-operator-$(SPARK_OPERATOR_VERSION)
# `make bench` runs River (tools/riverbench pins its version) beside tether.
RIVER_VERSION := $(shell awk '$$1 == "github.com/riverqueue/river" {print $$2}' tools/riverbench/go.mod)
RIVERBENCH    := .tether/bin/riverbench-$(RIVER_VERSION)
# -race needs cgo; the suite must stay well under 20 minutes on 2 cores.
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build run stop demo-reattach test test-modules vet bench bench-ecs bench-spark bench-liveness bench-fleet bench-ui ui-screenshots proto clean compat kube-apiserver kube-controller-manager spark-operator river-bench soak fuzz check-deploy metrics image

all: build

## build: the agent (bin/tether) and every plugin (bin/tether-plugin-<name>)
build:
	$(GO) build -o $(BIN)/tether ./cmd/agent
	@for p in $(PLUGINS); do echo "$(GO) build -o $(BIN)/tether-plugin-$$p ./plugins/$$p"; \
		$(GO) build -o $(BIN)/tether-plugin-$$p ./plugins/$$p || exit 1; done

## run: private PostgreSQL under .tether/, the local ECS emulator as its own
## process, one agent, demo jobs; Ctrl-C stops all three. After a kill -9 of
## the agent, the database and emulator (and its tasks) keep running: `make
## run` again reattaches, `make stop` stops them.
run: build
	$(BIN)/tether dev

## stop: stop what `make run` or `make demo-reattach` left running (agent,
## ECS emulator, private PostgreSQL); the data under .tether/ stays
stop:
	@if [ ! -x $(BIN)/tether ]; then echo "$(BIN)/tether is not built: nothing of make run can be running"; exit 0; fi; \
	rc=0; for d in .tether .tether/demo; do $(BIN)/tether dev stop --data-dir $$d || rc=1; done; exit $$rc

## demo-reattach: start the stack, submit an ECS job (~20 s on the emulator),
## kill -9 the agent mid-job, start it again and show the same task (same
## ARN) finishing and the job succeeded (scripts/demo-reattach.sh)
demo-reattach: build
	BIN=$(BIN) scripts/demo-reattach.sh

## test: the whole suite against real PostgreSQL, real plugin binaries and a
## real kube-apiserver + etcd, kube-controller-manager's garbage collector and
## kubeflow's spark-operator (each built once, then cached)
## (vet runs after the tests with the same -race build, so it reuses their
## compiled packages: on a fresh machine a separate plain vet costs minutes)
test: $(KUBE_APISERVER) $(KUBE_CONTROLLER_MANAGER) $(SPARK_OPERATOR)
	@command -v etcd >/dev/null || { echo "etcd not found: apt-get install -y etcd-server (the Kubernetes tests need it)"; exit 1; }
	@command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || { echo "chromium not found: apt-get install -y chromium (the web console tests drive it headless)"; exit 1; }
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) vet -race ./...
	$(MAKE) test-modules
	$(MAKE) fuzz
	$(MAKE) check-deploy

## test-modules: the modules of their own that users import (the plugin
## SDK, the client, the wire types they share), tested and vetted in their
## own directories, with their own (older) dependency versions: vet's
## stdversion check holds their code to the Go version each go.mod declares
## (part of `make test`)
SUBMODULES := pkg/api pkg/client pkg/plugin
test-modules:
	@for m in $(SUBMODULES); do \
		echo "== $$m ($$(awk '$$1 == "go" {print "go " $$2}' $$m/go.mod))"; \
		(cd $$m && GOWORK=off $(GO) test $(TEST_FLAGS) ./... && GOWORK=off $(GO) vet ./...) || exit 1; \
	done

## image: the agent's OCI image without a container engine (internal/image):
## static binaries of the agent, every plugin and the health check, the
## shipped deploy/tether.yaml, CA certificates, user 10001; written as an OCI
## image layout to IMAGE_DIR (push it with `crane push`, `skopeo copy
## oci:.tether/image docker://…` or `podman load`); the go build cache makes
## a rebuild a link
IMAGE_DIR     ?= .tether/image
IMAGE_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
image:
	$(GO) run ./cmd/mkimage -o $(IMAGE_DIR) -version $(IMAGE_VERSION)

## check-deploy: promtool checks deploy/prometheus-alerts.yml and runs its
## cases, deploy/prometheus-alerts.test.yml (Debian's prometheus package has
## promtool; part of `make test`; the Go tests in internal/metrics run the
## same and check the metric names the rules and dashboard use)
check-deploy:
	@command -v promtool >/dev/null || { echo "promtool not found: apt-get install -y prometheus (it provides promtool; make test checks the alert rules with it)"; exit 1; }
	promtool check rules deploy/prometheus-alerts.yml
	cd deploy && promtool test rules prometheus-alerts.test.yml

## fuzz: the API's submit and list handlers under Go's fuzzer for FUZZTIME
## each (asserts no 5xx and no panic; part of `make test`)
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzSubmit$$' -fuzztime $(FUZZTIME) ./internal/api/
	$(GO) test -run '^$$' -fuzz '^FuzzList$$' -fuzztime $(FUZZTIME) ./internal/api/

## metrics: function metrics of the product code (tools/funcmetrics): branch
## points per 100 function lines, functions above cyclomatic complexity 10,
## functions above 120 lines, and the worst offenders (docs/design.md)
METRICS_SKIP := e2e,pgtest,pgcluster,kubetest,bintest,fakeplugintest,bench,plugintest,tools
metrics:
	cd tools/funcmetrics && $(GO) run . -by-dir -skip $(METRICS_SKIP) $(addprefix ../../,cmd internal pkg plugins localstack)

## kube-apiserver: build the apiserver the Kubernetes tests use (about 5
## minutes the first time; kept under .tether/bin)
kube-apiserver: $(KUBE_APISERVER)

$(KUBE_APISERVER): tools/kube-apiserver/go.mod tools/kube-apiserver/go.sum
	@mkdir -p $(dir $@)
	@echo "building kube-apiserver $(KUBE_VERSION) from the Go module proxy (once; a few minutes)"
	cd tools/kube-apiserver && $(GO) build -o ../../$@.tmp k8s.io/kubernetes/cmd/kube-apiserver
	mv $@.tmp $@

## kube-controller-manager: build the controller manager whose garbage
## collector the Spark operator tests run (about 2 minutes the first time
## after kube-apiserver; kept under .tether/bin)
kube-controller-manager: $(KUBE_CONTROLLER_MANAGER)

$(KUBE_CONTROLLER_MANAGER): tools/kube-apiserver/go.mod tools/kube-apiserver/go.sum
	@mkdir -p $(dir $@)
	@echo "building kube-controller-manager $(KUBE_VERSION) from the Go module proxy (once; a few minutes)"
	cd tools/kube-apiserver && $(GO) build -o ../../$@.tmp k8s.io/kubernetes/cmd/kube-controller-manager
	mv $@.tmp $@

## spark-operator: build kubeflow's spark-operator (the controller the Spark
## operator tests run; about 2 minutes the first time; kept under .tether/bin)
spark-operator: $(SPARK_OPERATOR)

$(SPARK_OPERATOR): tools/spark-operator/go.mod tools/spark-operator/go.sum
	@mkdir -p $(dir $@)
	@echo "building spark-operator $(SPARK_OPERATOR_VERSION) from the Go module proxy (once; a few minutes)"
	cd tools/spark-operator && $(GO) build -o ../../$@.tmp github.com/kubeflow/spark-operator/v2/cmd/operator
	mv $@.tmp $@

## river-bench: build tools/riverbench, River's side of BenchmarkVsRiver
## (under a minute the first time; kept under .tether/bin)
river-bench: $(RIVERBENCH)

$(RIVERBENCH): tools/riverbench/go.mod tools/riverbench/go.sum $(wildcard tools/riverbench/*.go)
	@mkdir -p $(dir $@)
	@echo "building riverbench (River $(RIVER_VERSION)) from the Go module proxy"
	cd tools/riverbench && $(GO) build -o ../../$@.tmp .
	mv $@.tmp $@

vet:
	$(GO) vet ./...

## ui-screenshots: run the web console's browser tests (headless Debian
## chromium) and write their screenshots into docs/ui/ for docs/ui.md
ui-screenshots:
	TETHER_UI_SCREENSHOTS=$(CURDIR)/docs/ui $(GO) test -count=1 -run '^TestConsole' ./internal/e2e/

## bench-ui: the console's jobs page with 100,000 jobs in the database, in
## headless chromium: navigation to first page rendered, median and max,
## beside the API call alone
bench-ui:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkConsoleFirstPage$$' -benchtime 1x -timeout 20m ./internal/e2e/

## bench: end-to-end throughput and claim latency (prints jobs/s, p50/p99),
## the claim and follow benchmarks, then tether beside River: 50,000 no-op
## jobs, 1 and 2 agents/clients, 3 interleaved rounds, medians, ending with
## `tether/river N agents: RATIO` (docs/benchmarks.md; about 8 minutes on
## the loaded 2-core machine, 6 of them tether vs River)
bench: $(RIVERBENCH)
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./internal/bench/

## bench-ecs: 1,000 ECS jobs on 2 agents against the hostile emulator with its
## account-wide rate limits on (about 10 minutes); checks that every job
## succeeds with no log line lost or doubled, prints API calls/s, task stop →
## job end p50/p99, output lag and stop → end for live tail against polling
## (half the jobs each), agent RSS and CPU (sizes: TETHER_BENCH_ECS_* variables,
## see internal/e2e/ecs_bench_test.go). Then the resume storm: kill -9 of an
## agent holding 1,000 ECS jobs, another idle: kill → resumed and → log
## caught up, API calls/s per action against the limits (about 12 minutes;
## TETHER_BENCH_STORM_* variables, internal/e2e/ecs_storm_bench_test.go)
bench-ecs:
	$(GO) test -count=1 -run '^$$' -bench '^(BenchmarkECS1000|BenchmarkECSResumeStorm)$$' -benchtime 1x -timeout 80m ./internal/e2e/

## bench-spark: 500 Spark SQL jobs on 2 agents through the sparkeks plugin
## against kube-apiserver + etcd and the real spark-operator controller
## (stand-in spark-submit and kubelet; each driver runs 30 s; about 2
## minutes with the build); checks that every job succeeds with one
## SparkApplication ever and every driver log line once, prints the
## plugin's apiserver requests/s by verb and resource, its peak open
## watches, agent and plugin RSS and CPU, submit → COMPLETED → job terminal
## p50/p99 (sizes: TETHER_BENCH_SPARK_* variables, see
## internal/e2e/spark_bench_test.go)
bench-spark: $(KUBE_APISERVER) $(KUBE_CONTROLLER_MANAGER) $(SPARK_OPERATOR)
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkSpark500$$' -benchtime 1x -timeout 40m ./internal/e2e/

## bench-liveness: kill -9 of an agent holding 10 resumable jobs, another
## agent idle, with the default timings (keepalive 5 s, stale_job 120 s):
## kill → resumed p50/max for the resumable test plugin and ECS jobs against
## the emulator, name-lock liveness on and off side by side (the ratio, and
## the target max ≤ 16 s); 20 rounds each, 10 at once (about 10 minutes;
## TETHER_BENCH_LIVENESS_ROUNDS, _LANES, _JOBS, _PLUGINS, see
## internal/e2e/liveness_bench_test.go)
bench-liveness:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkLivenessKill9$$' -benchtime 1x -timeout 40m ./internal/e2e/

## bench-fleet: what the liveness check, the heartbeats and the janitor
## passes cost the database per agent at N = 10, 50 and 200 simulated agents
## (agents rows, sessions holding their name locks, 5 running jobs each):
## statements, shared buffers and DB time per agent per keepalive (per pass
## for the janitor), medians of 7 keepalives, and the ratio 200/10 per agent
## (target ≤ 1.5); pg_stat_statements figures (TETHER_BENCH_FLEET_ROUNDS,
## see internal/bench/fleet_bench_test.go)
bench-fleet:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkFleet$$' -benchtime 1x -timeout 20m ./internal/bench/

## compat: today's agent and plugins beside those of an earlier commit
## (compatBase in internal/e2e/compat_test.go, built once from git history
## into .tether/compat/): old agent + new plugins and new agent + old plugins
## run jobs, and a resumable job is resumed across them after a kill -9, in
## both directions (upgrade and rollback). Part of `make test`; it needs the
## project's git history
compat:
	$(GO) test -count=1 -run '^TestCompat' -v ./internal/e2e/

## soak: the randomized invariant test (internal/e2e/invariant_test.go) in
## rounds of chaos until SOAK has passed, e.g. `make soak SOAK=30m`; each
## round prints its seed (rerun one with TETHER_INVARIANT_SEED=<seed>
## TETHER_INVARIANT_ROUNDS=1); SOAK_CHAOS sets the chaos per round
SOAK       ?= 10m
SOAK_CHAOS ?= 40s
soak:
	TETHER_INVARIANT_DURATION=$(SOAK) TETHER_INVARIANT_CHAOS=$(SOAK_CHAOS) \
		$(GO) test -race -count=1 -timeout 0 -run '^TestInvariant$$' -v ./internal/e2e/

## proto: regenerate pkg/plugin/pb from pkg/plugin/proto (needs protoc,
## protoc-gen-go and protoc-gen-go-grpc on PATH; see README)
proto:
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" $(GO) generate ./pkg/plugin/

clean:
	rm -rf $(BIN)
