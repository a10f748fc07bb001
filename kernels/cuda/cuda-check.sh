#!/bin/sh
# cuda-check.sh runs the GPU checks of the CUDA backend with binaries built
# elsewhere by `make cuda`; it builds nothing. Usage (from make cuda-check):
#
#	cuda-check.sh SPECGATE_CUDA KERNELS_TEST MODEL_DIR OUT_DIR
#
# It prints one table: the conformance and equality tests, the kernel
# benchmarks, and decode tokens/s of a ~1B-parameter BF16 model at batch 1
# and 32 against the HBM floor.
set -u
bin=$1 test=$2 models=$3 out=$4
mkdir -p "$out"
log=$out/cuda-check.log
: > "$log"
status=0

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not found)"

echo "== tests (conformance vs reference incl. the Sampler ops, tree attention, host tier, masks, sampling, graphs, greedy vs CPU)"
if SPECGATE_TEST_MODELS=$models CI=true "$test" -test.v -test.count=1 >>"$log" 2>&1; then
	:
else
	status=1
fi
awk '/^(--- |=== RUN)/ { next } /^ *--- (PASS|FAIL|SKIP): Test[A-Za-z0-9]+ / && !/\// { printf "  %-28s %s %s\n", $3, $2, $4 }' "$log"
grep -E "^(ok|FAIL|PASS)" "$log" | tail -n 1

echo "== kernels (MB/s is achieved bandwidth; H200 HBM floor is 4.8e6 MB/s)"
"$test" -test.run=NONE -test.bench=. -test.benchtime=50x 2>&1 | tee -a "$log" |
	awk '/^Benchmark/ { printf "  %-44s %10s ns/op %12s MB/s\n", $1, $3, $5 }'

echo "== decode, ~1B-parameter BF16 model"
m1b=$out/m1b-bf16.gguf
if [ ! -f "$m1b" ]; then
	"$bin" mkmodel --out "$m1b" --layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32000 --type BF16 >>"$log" 2>&1 || status=1
fi
"$bin" bench --backend cuda --bandwidth 4800 --model "$m1b" --batches 1,32 --steps 32 --ctx 128 --prompt 128 2>&1 | tee -a "$log" || status=1

echo "== greedy text on stories260K (cuda)"
"$bin" generate --backend cuda --model "$models/stories260K.gguf" --prompt "Once upon a time" -n 32 2>&1 | tail -n 2

echo "full log: $log"
exit $status
