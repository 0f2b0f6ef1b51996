# Makefile - builds libstrata.so, libstrata.a and ./strata; runs the tests.
#
#   make              library + CLI (CUDA part too when nvcc is found)
#   make CUDA=0       CPU-only build;  make CUDA=1  requires nvcc
#   make CUDA_ARCH="80 90"   GPU architectures (default 90)
#   make check        every c/tests/test_*.c, then pytest over python/tests (in build/venv, made
#                     on first use from the requirements files; TEST_PYTHON=python3 uses yours)
#   make asan         the C tests under AddressSanitizer + UBSan (separate build dir)
#   make asan-server  the server's and chat templates' Python tests against ./strata built with those sanitizers
#   make cuda-check   GPU tests (skip with a message where no GPU is usable)
#   make q8-sm60-check  the SM60 Q8_0 GEMV against a CPU reference, then timed (GPU; else a skip)
#   make mla-check    the latent-attention kernels against CPU references, then timed (GPU; else a skip)
#   make deltanet-check  the gated DeltaNet kernels against CPU references, then timed (GPU; else a skip)
#   make fuzz         libFuzzer harnesses: GGUF reader, HTTP, templates, tool calls (clang)
#   make bench        CPU dot-product micro-benchmark
#   make clean

CC      ?= cc
PYTHON  ?= python3
BUILD   ?= build
OUTDIR  ?= .
LIBSO   := $(OUTDIR)/libstrata.so
CLI     := $(OUTDIR)/strata
OPT     ?= -O2
SAN     ?=
# -ffp-contract=off: a * b + c stays two roundings (GCC's ISO C default, explicit for other
# compilers), so the GPU can match the CPU's expert arithmetic bit for bit (c/cuda/moe_exact.cu).
CFLAGS_BASE := -std=c11 $(OPT) -ffp-contract=off -g -Wall -Wextra -Wshadow -Wstrict-prototypes -fPIC \
               -fvisibility=hidden -D_GNU_SOURCE $(SAN)
INCLUDES := -Ic/include -Ic/core -Ic/format -Ic/format/quant -Ic/compute/cpu -Ic/cuda \
            -Ic/model -Ic/experts -Ic/engine -Ic/engine/cpu -Ic/engine/cuda
CFLAGS  += $(CFLAGS_BASE) $(INCLUDES)
LDLIBS  := -lm -lpthread -ldl

# Per-file instruction sets: these files are only entered after a run-time CPU check.
ISA_AVX2   := -mavx2 -mfma -mf16c
ISA_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
ISA_AMX    := $(ISA_AVX512) -mamx-tile -mamx-int8

# ---- CUDA detection ------------------------------------------------------------------------
NVCC      ?= $(shell command -v nvcc 2>/dev/null)
CUDA_ARCH ?= 90
ifeq ($(CUDA),0)
  USE_CUDA :=
else ifneq ($(NVCC),)
  USE_CUDA := 1
else ifeq ($(CUDA),1)
  $(error CUDA=1 but nvcc was not found; set NVCC=/path/to/nvcc)
else
  $(info strata: nvcc not found, building CPU-only (set NVCC=... or CUDA=1 to require CUDA))
  USE_CUDA :=
endif

LIB_SRCS := $(wildcard c/core/*.c c/format/*.c c/format/quant/*.c c/compute/*.c c/compute/cpu/*.c \
                      c/model/*.c c/experts/*.c c/engine/*.c c/engine/cpu/*.c c/engine/cuda/*.c)
CLI_SRCS := $(wildcard c/cli/*.c)
# strata serve: the server (c/server/) and the C libraries it vendors (third_party/), in ./strata only
SERVER_SRCS := $(wildcard c/server/*.c)
THIRD_SRCS := $(wildcard third_party/llhttp/*.c) third_party/yyjson/yyjson.c
CU_SRCS  := $(wildcard c/cuda/*.cu)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/%.o) $(SERVER_SRCS:%.c=$(BUILD)/%.o) $(THIRD_SRCS:%.c=$(BUILD)/%.o)
THIRD_INC := -Ithird_party/llhttp -Ithird_party/yyjson

ifdef USE_CUDA
  # nvcc may be a wrapper script (/usr/local/bin/nvcc -> exec /usr/local/cuda-13.0/bin/nvcc): ask
  # nvcc itself for its root, and take the first library folder that really holds cudart_static.
  CUDA_HOME ?=
  ifeq ($(CUDA_HOME),)
    CUDA_HOME := $(patsubst %/bin/..,%,$(patsubst TOP=%,%,$(lastword $(shell $(NVCC) --dryrun -E -x cu /dev/null 2>&1 | grep -o 'TOP=[^ ]*'))))
  endif
  CUDA_LIBDIR ?=
  ifeq ($(CUDA_LIBDIR),)
    CUDA_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard $(addsuffix /libcudart_static.a, \
                 $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/targets/x86_64-linux/lib \
                 $(CUDA_HOME)/targets/sbsa-linux/lib /usr/local/cuda/lib64 /usr/local/cuda/lib)))))
  endif
  ifeq ($(CUDA_LIBDIR),)
    $(error strata: libcudart_static.a not found under $(CUDA_HOME); set CUDA_LIBDIR=...)
  endif
  NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
                  -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
  NVCCFLAGS ?= -O3 -std=c++17 $(NVCC_GENCODE) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra \
               $(INCLUDES) -DSTRATA_HAVE_CUDA=1 -Wno-deprecated-gpu-targets
  # NVCC_EXTRA: more nvcc flags, e.g. -DNAME=1 (bench/device/device_gpu.sh AB_NVCC builds)
  NVCCFLAGS += $(NVCC_EXTRA)
  CFLAGS   += -DSTRATA_HAVE_CUDA=1
  CU_OBJS  := $(CU_SRCS:%.cu=$(BUILD)/%.o)
  # cudart is linked statically: the library loads on machines without a driver and reports
  # "no CUDA driver" at run time instead of failing to load.
  # --exclude-libs keeps cudart's own symbols out of libstrata.so's exports.
  LDLIBS   += -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lstdc++ -Wl,--exclude-libs,libcudart_static.a
endif

ALL_OBJS := $(LIB_OBJS) $(CU_OBJS)

.PHONY: all check header-check test-c test-py asan asan-server cuda-check q8-sm60-check fuzz bench clean \
        distclean
all: $(LIBSO) $(CLI)

# The shared library's soname carries the ABI version (STRATA_ABI_VERSION in strata.h):
# libstrata.so.N is the file, libstrata.so the link that builds and the Python package use.
ABI_VERSION := $(shell sed -n 's/^\#define STRATA_ABI_VERSION \([0-9]*\).*/\1/p' c/include/strata.h)
$(LIBSO): $(ALL_OBJS)
	$(CC) -shared -o $@.$(ABI_VERSION) $^ $(SAN) $(LDLIBS) -Wl,-soname,libstrata.so.$(ABI_VERSION)
	ln -sf libstrata.so.$(ABI_VERSION) $@

$(BUILD)/libstrata.a: $(ALL_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(CLI): $(CLI_OBJS) $(BUILD)/libstrata.a
	$(CC) -o $@ $(CLI_OBJS) $(BUILD)/libstrata.a $(SAN) $(LDLIBS)

LIB_HDRS := $(wildcard c/include/*.h c/core/*.h c/format/*.h c/format/quant/*.h c/compute/cpu/*.h c/cuda/*.h \
                      c/model/*.h c/experts/*.h c/engine/*.h c/engine/cpu/*.h c/engine/cuda/*.h)
$(BUILD)/%.o: %.c $(LIB_HDRS) $(wildcard c/cli/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(if $(findstring _amx,$*),$(ISA_AMX),$(if $(findstring _avx512,$*),$(ISA_AVX512),$(if $(findstring _avx2,$*),$(ISA_AVX2)))) -c -o $@ $<

# the DeltaNet ops' elementwise loops vectorized (GCC's -O2 model leaves loops that need an
# alias check scalar); no reassociation or contraction, so the same bits as scalar code
$(BUILD)/c/compute/cpu/ops_ssm.o: CFLAGS += -fvect-cost-model=dynamic

# the server sees the vendored headers; the CLI sees the server's
$(SERVER_SRCS:%.c=$(BUILD)/%.o): CFLAGS += $(THIRD_INC)
$(CLI_SRCS:%.c=$(BUILD)/%.o): CFLAGS += -Ic/server $(THIRD_INC)
$(BUILD)/c/server/%.o: c/server/%.c $(wildcard c/server/*.h) $(LIB_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<
# vendored code: its own warnings off, the project's flags otherwise
$(BUILD)/third_party/%.o: third_party/%.c
	@mkdir -p $(@D)
	$(CC) -std=c11 $(OPT) -fPIC -D_GNU_SOURCE $(SAN) $(THIRD_INC) -w -c -o $@ $<

$(BUILD)/%.o: %.cu $(wildcard c/cuda/*.cuh c/cuda/*.h c/include/*.h c/core/*.h c/format/quant/*.h)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# ---- tests ---------------------------------------------------------------------------------
TEST_SRCS := $(sort $(wildcard c/tests/test_*.c))
TEST_BINS := $(TEST_SRCS:c/tests/%.c=$(BUILD)/tests/%)
CUDA_TEST_BINS := $(filter $(BUILD)/tests/test_cuda_% $(BUILD)/tests/test_isa%,$(TEST_BINS))

$(BUILD)/tests/%: c/tests/%.c $(wildcard c/tests/*.h) $(LIB_HDRS) $(BUILD)/libstrata.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ic/tests -o $@ $< $(BUILD)/libstrata.a $(SAN) $(LDLIBS)

# test_isa_amx also links an emulated copy of the AMX kernels (the tile instructions in plain C).
$(BUILD)/tests/dot_amx_emu.o: c/compute/cpu/dot_amx.c $(LIB_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ISA_AVX512) -DST_AMX_EMULATE -c -o $@ $<
$(BUILD)/tests/test_isa_amx: c/tests/test_isa_amx.c $(BUILD)/tests/dot_amx_emu.o $(wildcard c/tests/*.h) $(LIB_HDRS) $(BUILD)/libstrata.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ic/tests -o $@ $< $(BUILD)/tests/dot_amx_emu.o $(BUILD)/libstrata.a $(SAN) $(LDLIBS)

# test_http reads requests with the server's reader (c/server/http.c and the vendored parsers) and
# runs the fuzz harness's entry point on crafted inputs.
HTTP_SRCS := c/server/http.c c/fuzz/fuzz_http.c $(THIRD_SRCS)
THIRD_OBJS := $(THIRD_SRCS:%.c=$(BUILD)/%.o)
$(BUILD)/tests/test_http: c/tests/test_http.c c/server/http.c c/fuzz/fuzz_http.c c/fuzz/fuzz_common.h $(wildcard c/server/*.h c/tests/*.h) $(THIRD_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ic/tests -Ic/server $(THIRD_INC) -o $@ c/tests/test_http.c c/server/http.c c/fuzz/fuzz_http.c \
	  $(THIRD_OBJS) $(SAN) $(LDLIBS)

# test_server_text: the server's text helpers and tool call parsers.
# It also runs fuzz_tools's entry point on crafted model outputs.
TOOLS_SRCS := c/server/text.c c/server/tool_calls.c c/server/harmony.c
$(BUILD)/tests/test_server_text: c/tests/test_server_text.c $(TOOLS_SRCS) c/fuzz/fuzz_tools.c c/fuzz/fuzz_common.h $(wildcard c/server/*.h c/tests/*.h) $(THIRD_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ic/tests -Ic/server $(THIRD_INC) -o $@ c/tests/test_server_text.c $(TOOLS_SRCS) c/fuzz/fuzz_tools.c \
	  $(THIRD_OBJS) $(SAN) $(LDLIBS)

# test_server_harmony: gpt-oss's harmony answers (channels, calls, the stream's hold-back).
$(BUILD)/tests/test_server_harmony: c/tests/test_server_harmony.c c/server/text.c c/server/tool_calls.c c/server/harmony.c $(wildcard c/server/*.h c/tests/*.h) $(THIRD_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ic/tests -Ic/server $(THIRD_INC) -o $@ c/tests/test_server_harmony.c c/server/text.c c/server/tool_calls.c \
	  c/server/harmony.c $(THIRD_OBJS) $(SAN) $(LDLIBS)

# test_template renders with the server's chat template renderer and runs its fuzz harness.
TMPL_SRCS := $(wildcard c/server/template_*.c)
$(BUILD)/tests/test_template: c/tests/test_template.c $(TMPL_SRCS) c/fuzz/fuzz_template.c c/fuzz/fuzz_common.h $(wildcard c/server/*.h c/tests/*.h) $(THIRD_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ic/tests -Ic/server $(THIRD_INC) -o $@ c/tests/test_template.c $(TMPL_SRCS) c/fuzz/fuzz_template.c \
	  $(THIRD_OBJS) $(SAN) $(LDLIBS)

# Runs every C test binary, then reports which failed (a test that crashes counts as failed).
# Each C test runs under a time limit (TEST_TIMEOUT seconds), so a hang fails with its name.
TEST_TIMEOUT ?= 900
define run_tests
	@fail=0; for t in $(1); do echo "== $$t"; s0=$$(date +%s); \
	timeout -k 10 $(TEST_TIMEOUT) $$t; rc=$$?; \
	[ $$rc -eq 124 ] && echo "!! $$t ran past TEST_TIMEOUT=$(TEST_TIMEOUT)s"; \
	[ $$rc -ne 0 ] && { echo "!! $$t failed (rc $$rc)"; fail=1; }; \
	s1=$$(date +%s); [ $$((s1 - s0)) -ge 30 ] && echo "   ($$t took $$((s1 - s0)) s)"; true; done; \
	if [ $$fail -ne 0 ]; then echo "C tests: FAILED"; exit 1; else echo "C tests: all passed"; fi
endef

# Each public header alone must compile as strict C99 and as C++11.
CXX ?= c++
header-check: $(BUILD)/header-c99.o $(BUILD)/header-cxx11.o
$(BUILD)/header-c99.o: c/tests/header/check_c99.c $(wildcard c/include/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c99 -pedantic -Werror -Wall -Wextra -Ic/include -c -o $@ $<
$(BUILD)/header-cxx11.o: c/tests/header/check_cxx11.cc $(wildcard c/include/*.h)
	@mkdir -p $(@D)
	$(CXX) -std=c++11 -pedantic -Werror -Wall -Wextra -Ic/include -c -o $@ $<

test-c: header-check $(TEST_BINS)
	$(call run_tests,$(TEST_BINS))

# ---- the Python tests' environment ----------------------------------------------------------
# pytest runs in TEST_PYTHON: by default a virtual environment, VENV, that the first `make check`
# creates from requirements-hf.txt (which includes the others), with torch's CPU build, and later
# runs reuse (re-installing when a requirements file changes). TEST_PYTHON=python3 uses an
# interpreter you set up yourself; `make distclean` removes the environment.
VENV        ?= build/venv
TEST_PYTHON ?= $(VENV)/bin/python
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_REQ   := $(shell sed -n 's/^\(torch==[^ #]*\).*/\1/p' requirements-hf.txt)
REQ_FILES   := requirements.txt requirements-test.txt requirements-hf.txt
VENV_STAMP  := $(VENV)/.strata-installed

$(VENV_STAMP): $(REQ_FILES)
	@echo "make check: installing the Python test dependencies into $(VENV) (once): $(TORCH_REQ) (CPU build), then $$(sed -n 's/^\([A-Za-z][A-Za-z0-9_.-]*\).*/\1/p' $(REQ_FILES) | grep -v '^torch$$' | tr '\n' ' ')"
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@if $(VENV)/bin/python -c "import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=15)" 2>/dev/null; then \
	  $(VENV)/bin/python -m pip install -q --disable-pip-version-check --extra-index-url $(TORCH_INDEX) '$(TORCH_REQ)'; \
	else echo "make check: $(TORCH_INDEX) unreachable: $(TORCH_REQ) from the configured index"; \
	  $(VENV)/bin/python -m pip install -q --disable-pip-version-check '$(TORCH_REQ)'; fi
	@$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-hf.txt
	@touch $@

test-py: $(LIBSO) $(CLI) $(if $(filter $(VENV)/bin/python,$(TEST_PYTHON)),$(VENV_STAMP))
	STRATA_LIB=$(abspath $(LIBSO)) STRATA_CLI=$(abspath $(CLI)) PYTHONPATH=$(CURDIR)/python $(TEST_PYTHON) -m pytest -q --durations=12 python/tests

check: all test-c test-py

# Sanitizer build in its own directory so it never mixes with the normal objects.
ASAN_FLAGS := BUILD=build-asan CUDA=0 OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
asan:
	$(MAKE) $(ASAN_FLAGS) test-c

# The server's Python tests against ./strata built with the sanitizers (after make check made the
# environment: TEST_PYTHON).
asan-server: $(if $(filter $(VENV)/bin/python,$(TEST_PYTHON)),$(VENV_STAMP))
	$(MAKE) $(ASAN_FLAGS) OUTDIR=build-asan build-asan/strata
	ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16 STRATA_CLI=$(abspath build-asan/strata) PYTHONPATH=$(CURDIR)/python \
	  $(TEST_PYTHON) -m pytest -q python/tests/test_server.py python/tests/test_server_tools.py python/tests/test_chat_template.py

cuda-check: $(CUDA_TEST_BINS)
ifdef USE_CUDA
	$(call run_tests,$(CUDA_TEST_BINS))
else
	@echo "cuda-check: skipped: this build has no CUDA (nvcc not found or CUDA=0)"
endif

# the SM60 Q8_0 GEMV's check-and-time program (tools/q8_sm60_check.cu; exits 0 with "skip"
# where no GPU is usable); NVCC_EXTRA=-DSTRATA_NO_DP4A=1 builds the form without dp4a
q8-sm60-check:
ifdef USE_CUDA
	$(MAKE) BUILD=$(BUILD) OUTDIR=$(OUTDIR) $(BUILD)/q8_sm60_check
	$(BUILD)/q8_sm60_check
else
	@echo "q8-sm60-check: skipped: this build has no CUDA (nvcc not found or CUDA=0)"
endif
$(BUILD)/q8_sm60_check: tools/q8_sm60_check.cu c/tests/q8_sm60_case.h $(BUILD)/libstrata.a
	$(NVCC) $(NVCCFLAGS) -Ic/tests -c -o $@.o $<
	$(CC) -o $@ $@.o $(BUILD)/libstrata.a $(LDLIBS)

# The check-and-time programs of c/cuda/dev/ that make names: NAME-check builds $(BUILD)/NAME_check
# from c/cuda/dev/NAME_check.cu (which tests the kernels of c/cuda/NAME.cuh and cuda_NAME.h) and
# runs it with $(DEV_CHECK_ARGS_NAME); each prints PASS/FAIL lines and timings and exits 0 with
# "skip" where no GPU is usable.
#   mla       the latent-attention kernels at DeepSeek-V3 shapes against CPU references, GB/s;
#             MLA_CTX=N caps the contexts (default 8192)
#   deltanet  the gated DeltaNet kernels at Qwen3-Next-80B shapes and tiny ones against the CPU's
#             functions, timings
DEV_CHECKS := mla deltanet
DEV_CHECK_ARGS_mla = $(MLA_CTX)
.PHONY: $(DEV_CHECKS:%=%-check)
$(DEV_CHECKS:%=%-check): %-check:
ifdef USE_CUDA
	$(MAKE) BUILD=$(BUILD) OUTDIR=$(OUTDIR) $(BUILD)/$*_check
	$(BUILD)/$*_check $(DEV_CHECK_ARGS_$*)
else
	@echo "$@: skipped: this build has no CUDA (nvcc not found or CUDA=0)"
endif
$(DEV_CHECKS:%=$(BUILD)/%_check): $(BUILD)/%_check: c/cuda/dev/%_check.cu c/cuda/dev/dev_common.cuh c/cuda/%.cuh \
                                                    c/cuda/cuda_%.h $(BUILD)/libstrata.a
	$(NVCC) $(NVCCFLAGS) -Ic/cuda/dev -c -o $@.o $<
	$(CC) -o $@ $@.o $(BUILD)/libstrata.a $(LDLIBS)

# ---- fuzzing -------------------------------------------------------------------------------
FUZZ_CC ?= clang
fuzz: $(BUILD)/fuzz_gguf $(BUILD)/fuzz_http $(BUILD)/fuzz_template $(BUILD)/fuzz_tools
$(BUILD)/fuzz_tools: c/fuzz/fuzz_tools.c c/fuzz/fuzz_common.h $(TOOLS_SRCS) third_party/yyjson/yyjson.c $(wildcard c/server/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -O1 -g -D_GNU_SOURCE -Ic/server $(THIRD_INC) -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -o $@ c/fuzz/fuzz_tools.c $(TOOLS_SRCS) third_party/yyjson/yyjson.c
$(BUILD)/fuzz_template: c/fuzz/fuzz_template.c c/fuzz/fuzz_common.h $(TMPL_SRCS) third_party/yyjson/yyjson.c $(wildcard c/server/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -O1 -g -D_GNU_SOURCE -Ic/server $(THIRD_INC) -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -o $@ c/fuzz/fuzz_template.c $(TMPL_SRCS) third_party/yyjson/yyjson.c -lm
$(BUILD)/fuzz_http: c/fuzz/fuzz_http.c c/fuzz/fuzz_common.h $(HTTP_SRCS) $(wildcard c/server/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -O1 -g -D_GNU_SOURCE -Ic/server $(THIRD_INC) -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -o $@ $(HTTP_SRCS) -lpthread
$(BUILD)/fuzz_gguf: c/fuzz/fuzz_gguf.c $(LIB_HDRS) $(wildcard c/core/*.c c/format/*.c c/format/quant/*.c)
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -O1 -g -D_GNU_SOURCE $(INCLUDES) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -o $@ c/fuzz/fuzz_gguf.c $(wildcard c/core/*.c c/format/*.c c/format/quant/*.c) -lm -lpthread

# ---- benchmarks ----------------------------------------------------------------------------
bench: $(BUILD)/bench_dot $(BUILD)/bench_stream $(BUILD)/bench_pool_gap $(BUILD)/bench_tiles $(BUILD)/bench_moe_step
	$(BUILD)/bench_dot
$(BUILD)/bench_tiles: bench/micro/bench_tiles.c bench/micro/bench_util.h $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -O2 -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)
$(BUILD)/bench_moe_step: bench/micro/bench_moe_step.c bench/micro/bench_util.h $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -O2 -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)
$(BUILD)/bench_pool_gap: bench/micro/bench_pool_gap.c bench/micro/bench_util.h $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -O2 -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)
$(BUILD)/bench_stream: bench/micro/bench_stream.c bench/micro/bench_util.h $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)
$(BUILD)/bench_dot: bench/micro/bench_dot.c bench/micro/bench_util.h $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -O3 -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)

# clean keeps the Python test environment (VENV); distclean removes it too.
clean:
	find $(BUILD) -mindepth 1 -maxdepth 1 ! -path '$(VENV)' -exec rm -rf {} + 2>/dev/null || true
	rm -rf build-asan libstrata.so libstrata.so.* strata

distclean: clean
	rm -rf $(BUILD) $(VENV)
