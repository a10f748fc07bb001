# specgate: `make run` starts the service, `make test` runs the whole suite.
GO      ?= go
BIN     := bin/specgate
MODELS  ?= var/models
FUZZTIME ?= 4s

.PHONY: all build test test-cluster run bench lint fuzz clean

all: build

# The version `specgate version` prints: the commit, marked when dirty.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/specgate

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The tests talk to a real Redis: deploy/redis.sh starts the project's own
# (or uses $$REDIS_URL). Then the Redis-backed suites run again on a real
# Redis Cluster of three primaries with a replica each.
test: lint
	./deploy/redis.sh
	$(GO) test -count=1 ./...
	$(MAKE) test-cluster
	$(MAKE) fuzz

# The suites that keep data in Redis (migrations, tenants, the gateway, the
# scale-out request path) on the cluster deploy/redis-cluster.sh starts.
REDIS_CLUSTER_URL ?= redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005,127.0.0.1:7006
test-cluster:
	./deploy/redis-cluster.sh
	REDIS_URL=$(REDIS_CLUSTER_URL) $(GO) test -count=1 ./migrations ./tenants ./gateway/... ./cluster

# Every parser's fuzz target runs for a few seconds; `make fuzz FUZZTIME=5m`
# digs deeper. Each entry is package:target.
FUZZ := \
	./engine/model/gguf:FuzzParse \
	./kernels/cpu:FuzzWeightsGGML \
	./engine/tokenizer:FuzzEncode \
	./engine/tokenizer:FuzzPreTokenize \
	./kernels/sample:FuzzSample \
	./engine/model/chat:FuzzRender \
	./engine/guided:FuzzRegex \
	./engine/guided:FuzzSchema \
	./gateway:FuzzDecodeFrame \
	./gateway:FuzzTokenHeader \
	./gateway:FuzzEncodeDelta \
	./gateway/loadgen:FuzzParseDelta \
	./gateway:FuzzToolParser \
	./internal/redisurl:FuzzParse

# A run whose time ends while go test minimizes a new interesting input
# can fail with only "context deadline exceeded" and no failing input
# written: that target runs once more, and fails the build if it fails
# again. Any other failure fails at once.
fuzz:
	@set -e; for f in $(FUZZ); do \
		pkg=$${f%%:*}; target=$${f##*:}; \
		echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
		rc=0; out=$$($(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s $$pkg 2>&1) || rc=$$?; \
		echo "$$out"; \
		if [ $$rc -ne 0 ]; then \
			if echo "$$out" | grep -q "context deadline exceeded" && ! echo "$$out" | grep -q "Failing input written"; then \
				echo "fuzz $$pkg $$target: time ran out in a minimization, no failing input; once more"; \
				$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s $$pkg; \
			else \
				exit $$rc; \
			fi; \
		fi; \
	done

# The service with its own Redis; MODEL=path.gguf picks the model, else the
# default one is fetched (or a demo model generated). It prints a sign-in URL.
# PORT=8081 or ADDR=0.0.0.0:8081 picks where it listens; a taken port is
# reported before the model loads.
PORT ?= 8080
ADDR ?= 127.0.0.1:$(PORT)
run: build
	./deploy/redis.sh
	./$(BIN) serve --dev --addr $(ADDR)

# Benchmarks, each reporting ratios measured in one run: the kernels; the
# model end to end against the memory-bandwidth floor (stories260K and
# ~100M-parameter F32 and Q8_0 models); then the engine (streams, TTFT under
# a flood, prefix cache), speculation, guided masks, the gateway and the
# Redis request path. BENCHTIME scales the Go benchmarks.
BENCHTIME ?= 1x
M100 := --layers 12 --dim 768 --heads 12 --ffn 2048 --vocab 32000
bench: build
	./deploy/redis.sh
	$(GO) test -run=NONE -bench=. -benchtime=20x ./kernels/cpu
	@mkdir -p $(MODELS)
	@[ -f $(MODELS)/m100-f32.gguf ] || ./$(BIN) mkmodel --out $(MODELS)/m100-f32.gguf $(M100) --type F32
	@[ -f $(MODELS)/m100-q8_0.gguf ] || ./$(BIN) mkmodel --out $(MODELS)/m100-q8_0.gguf $(M100) --type Q8_0
	./$(BIN) bench --model $${SPECGATE_TEST_MODELS:-../shared/models}/stories260K.gguf
	./$(BIN) bench --model $(MODELS)/m100-f32.gguf
	./$(BIN) bench --model $(MODELS)/m100-q8_0.gguf
	$(GO) test -run=NONE -bench=. -benchtime=$(BENCHTIME) ./engine
	$(GO) test -run=NONE -bench=Spec -benchtime=$(BENCHTIME) ./engine/spec
	$(GO) test -run=NONE -bench=. -benchtime=5x ./engine/guided
	$(GO) test -run=NONE -bench=. -benchtime=200x ./prefixcache
	$(GO) test -run=NONE -bench='DeltaOverhead|DeltaFloor|IdleConnMemory' -benchtime=1x ./gateway/loadgen
	$(GO) test -run=NONE -bench='DeltaLatency|Engines' -benchtime=3x ./cluster
	$(GO) test -run=NONE -bench=RedisStreams -benchtime=1x ./cluster

clean:
	rm -rf bin

# The CUDA backend: the same binary built with the `cuda` tag (bin/specgate-cuda).
include kernels/cuda/cuda.mk
