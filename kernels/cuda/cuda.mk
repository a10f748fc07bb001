# CUDA backend build, included from the top-level Makefile:
#
#	include kernels/cuda/cuda.mk
#
# make ptx         compile kernels/cuda/*.cu to PTX for sm_80 and sm_90 (nvcc),
#                  check that ptxas assembles it, and record the sources' hash
#                  in kernels/cuda/ptx.stamp (commit the .ptx and the stamp)
# make cuda        install the toolkit when nvcc is missing, rebuild stale PTX,
#                  and build bin/specgate-cuda and bin/kernels-cuda.test, which
#                  need only libcuda.so.1 (the driver) at run time
# make cuda-check  on a GPU machine: run those two binaries (builds nothing)
#                  and print one table: conformance, greedy equality, decode
#                  tokens/s against the HBM floor
#
# The default build, make test and CI never need CUDA: every Go file that
# imports gorgonia.org/cu is behind the `cuda` build tag, and CI only checks
# that the committed PTX matches ptx.stamp (a plain Go test).

GO         ?= go
NVCC       ?= nvcc
PTXAS      ?= ptxas
CUDA_DIR   := kernels/cuda
CUDA_SRC   := $(wildcard $(CUDA_DIR)/*.cu) $(wildcard $(CUDA_DIR)/*.cuh)
CUDA_ARCHS := 80 90
CUDA_PTX   := $(foreach a,$(CUDA_ARCHS),$(CUDA_DIR)/kernels_sm$(a).ptx)
NVCCFLAGS  ?= -O3 -std=c++14 -Werror all-warnings
CUDA_BIN   := bin/specgate-cuda
CUDA_TEST  := bin/kernels-cuda.test
# Where cuda-check finds stories260K.gguf, and where it writes the ~1B model.
MODELS     ?= var/models
CUDA_MODELS ?= $${SPECGATE_TEST_MODELS:-../shared/models}

.PHONY: ptx ptx-check cuda cuda-toolkit cuda-check

cuda-toolkit:
	@command -v $(NVCC) >/dev/null 2>&1 || sh $(CUDA_DIR)/install-toolkit.sh

$(CUDA_DIR)/kernels_sm%.ptx: $(CUDA_SRC)
	$(NVCC) -arch=sm_$* --ptx $(NVCCFLAGS) -o $@ $(CUDA_DIR)/kernels.cu
	$(PTXAS) -arch=sm_$* -o /dev/null $@

# The stamp lists the sha256 of every source and generated file; the
# PTX check test recomputes it.
$(CUDA_DIR)/ptx.stamp: $(CUDA_PTX)
	@{ echo "# sha256 of the CUDA sources and the PTX built from them by make ptx"; \
	   echo "# nvcc: $$($(NVCC) --version | tail -n 1)"; \
	   cd $(CUDA_DIR) && sha256sum $(notdir $(CUDA_SRC)) $(notdir $(CUDA_PTX)); } > $@.tmp
	@mv $@.tmp $@
	@echo "wrote $@"

ptx: cuda-toolkit $(CUDA_DIR)/ptx.stamp

# Registers, spills and shared memory of every kernel, per architecture.
ptx-check: ptx
	@for a in $(CUDA_ARCHS); do \
	  echo "== sm_$$a"; \
	  $(PTXAS) -arch=sm_$$a -v -o /dev/null $(CUDA_DIR)/kernels_sm$$a.ptx 2>&1 | \
	    awk '/Compiling entry function/ { gsub(/[\047]/, "", $$7); k = $$7 } \
	         /bytes stack frame/ { sp = $$5 " spill stores, " $$9 " spill loads" } \
	         /Used [0-9]+ registers/ { printf "%-14s %4s regs  %s\n", k, $$5, sp }'; \
	done

cuda: ptx
	CGO_ENABLED=1 $(GO) build -tags cuda -o $(CUDA_BIN) ./cmd/specgate
	CGO_ENABLED=1 $(GO) test -c -tags cuda -o $(CUDA_TEST) ./kernels/cuda

# Runs on the GPU machine with the binaries `make cuda` built; builds nothing.
cuda-check:
	@test -x $(CUDA_BIN) && test -x $(CUDA_TEST) || { echo "cuda-check: run make cuda first (bin/ is carried to the GPU machine)"; exit 1; }
	@sh $(CUDA_DIR)/cuda-check.sh $(CUDA_BIN) $(CUDA_TEST) "$(CUDA_MODELS)" $(MODELS)
