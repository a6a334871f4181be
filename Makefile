# tether — the two commands a newcomer runs are `make run` and `make test`.
GO      ?= go
BIN     ?= bin
PLUGINS := shell ecs
# -race needs cgo; the suite must stay well under 20 minutes on 2 cores.
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build run test vet bench proto clean

all: build

## build: the agent (bin/tether) and every plugin (bin/tether-plugin-<name>)
build:
	$(GO) build -o $(BIN)/tether ./cmd/agent
	@for p in $(PLUGINS); do echo "$(GO) build -o $(BIN)/tether-plugin-$$p ./plugins/$$p"; \
		$(GO) build -o $(BIN)/tether-plugin-$$p ./plugins/$$p || exit 1; done

## run: private PostgreSQL under .tether/, one agent, a demo job; Ctrl-C stops
run: build
	$(BIN)/tether dev

## test: the whole suite against real PostgreSQL and real plugin binaries
test: vet
	$(GO) test $(TEST_FLAGS) ./...

vet:
	$(GO) vet ./...

## bench: end-to-end throughput and claim latency (prints jobs/s, p50/p99)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./internal/bench/

## proto: regenerate pkg/plugin/pb from pkg/plugin/proto (needs protoc,
## protoc-gen-go and protoc-gen-go-grpc on PATH; see README)
proto:
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" $(GO) generate ./pkg/plugin/

clean:
	rm -rf $(BIN)
