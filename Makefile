# specgate: `make run` starts the service, `make test` runs the whole suite.
GO      ?= go
BIN     := bin/specgate
MODELS  ?= var/models
FUZZTIME ?= 5s

.PHONY: all build test run bench lint fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/specgate

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: lint
	$(GO) test -count=1 ./...
	$(MAKE) fuzz

# Every parser's fuzz target runs for a few seconds; `make fuzz FUZZTIME=5m`
# digs deeper.
fuzz:
	$(GO) test -run=NONE -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./engine/model/gguf

run: build
	./$(BIN) generate --model $${MODEL:?set MODEL to a GGUF file} --prompt "$${PROMPT:-Once upon a time}" -n 64

# Benchmarks: the kernels, then end-to-end prefill/decode against the
# memory-bandwidth floor on stories260K and on ~100M-parameter models.
bench: build
	$(GO) test -run=NONE -bench=. -benchtime=20x ./kernels/cpu
	@mkdir -p $(MODELS)
	@[ -f $(MODELS)/m100-f32.gguf ] || ./$(BIN) mkmodel --out $(MODELS)/m100-f32.gguf --layers 12 --dim 768 --heads 12 --ffn 2048 --vocab 32000 --type F32
	@[ -f $(MODELS)/m100-q8_0.gguf ] || ./$(BIN) mkmodel --out $(MODELS)/m100-q8_0.gguf --layers 12 --dim 768 --heads 12 --ffn 2048 --vocab 32000 --type Q8_0
	./$(BIN) bench --model $${SPECGATE_TEST_MODELS:-../shared/models}/stories260K.gguf
	./$(BIN) bench --model $(MODELS)/m100-f32.gguf
	./$(BIN) bench --model $(MODELS)/m100-q8_0.gguf

clean:
	rm -rf bin
