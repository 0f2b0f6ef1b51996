#!/usr/bin/env bash
# device_ds2.sh - issue 35's deepseek2 on one GPU machine. "tests": the latent-attention kernels
# (test_cuda_mla, mla_check at DeepSeek-V3 shapes), the scored routing (test_cuda_moe), leading
# dense layers under every placement (test_dense_lead), the HF zoo on the GPU against the CPU
# (test_hf_parity_gpu.py, all but gpt-oss), and the low-bit GPU tests of issue 34
# (test_cuda_dequant, test_cuda_mmv, test_iq_gpu.py) sharing the build. Model stages, each a
# synthetic file at a real model's shapes (bench/synth_arch.py, zero-mean weights), timed pp512 and
# tg64 all resident, with --cpu-moe and with an expert cache of a quarter of the experts, the
# first two each beside llama-bench on the same file in the same call
# (when .peer is carried; its build runs in the background meanwhile): "lite" DeepSeek-V2-Lite
# (Q4_K experts), "air" GLM-4.5-Air (Q3_K_M mix, without its MTP layer, vocab padded to 151552:
# about 52 GiB, so one stage a call and the disk holds only its file), "oss20b" gpt-oss-20b (MXFP4
# experts, vocab padded to 201088), "qwen3next" Qwen3-Next-80B-A3B's first 12 layers (3 periods of
# 3 gated DeltaNet + 1 attention layer; Q3_K_M mix, vocab 151936: about 9 GiB). The largest models
# at their real per-layer shapes with fewer layers: "v3" DeepSeek-V3 / R1 (8 layers, the first dense:
# 45 GiB), "kimi" Kimi-K2 (6 layers: 48 GiB), "glm45" GLM-4.5 (24 layers: 41 GiB), "oss120b"
# gpt-oss-120b (all 36 layers: 59 GiB); llama-bench's -ncmoe names every layer, the quarter-size
# cache counts the layers with routed experts (synth_arch.py writes one leading dense layer).
# The first model stage's file is written while the build and tests run, the others after the rows
# before them; a file already written by an earlier call on a warm machine is reused, every other
# stage's file is removed before a new one is written. With .devdata/ds2_v3.gguf carried,
# ds2_long.py compares its GPU and CPU sessions on a 900-token prompt.
#   run(command="bash bench/device/device_ds2.sh", carry=[".whl", ".devdata/synth_moe.py",
#       ".devdata/ggml-vocab-gpt-2.gguf", ".peer"], timeout_s=600)
#   run(command="STAGES=air bash bench/device/device_ds2.sh", ...)
# Knobs: STAGES (default "tests lite"; also "air", "oss20b", "qwen3next"), CTESTS (the C tests,
# NAME:SECONDS), PYTESTS (the Python GPU tests, FILE::-k expression; - none), MLA_CTX (mla_check's
# longest context, 0 skips it), DN_CHECK (0 skips deltanet_check), MLA_SHOW / DN_SHOW / PYSHOW
# (lines shown), BUDGET (seconds after which no new row starts, default 540), R (repetitions,
# default 2), ROUNDS (interleaved rounds, default 2; ROUNDS_<stage> for one stage), ETYPE_<stage> (the
# routed experts' type, e.g. ETYPE_lite=q8_0: LONG's GPU-vs-CPU check without K-quant activation rounding), LAYERS_<stage> (fewer layers; qwen3next 12
# unless set), LONG=N (ds2_long.py on the lite file: an N-token prompt and 64 decode steps, GPU
# against CPU), ONLY=llama (llama-bench's rows alone), SYNTH_DIR (where the files go; /dev/shm), SYNTH_JOBS (the first file's writers,
# default 6), PREBUILT (device_common.sh: a tree built here and carried), PROF (0: no --profile row), PREWRITE (1:
# every stage's file written at the start, in parallel: small files only), OAI_AB (1: gpt-oss's
# experts on the prompt tiles (the default, STRATA_MMQ_OAI) against the GEMV path: the variant
# build-gemv, mmq.o recompiled with -DSTRATA_MMQ_OAI=0, built in the background after the main
# build; the base build's test_cuda_moe_lowbit gpt-oss cases and test_cuda_moe's argument checks
# (TEST_CUDA_MOE_OAI_ONLY), mmq_check's MXFP4 and gpt-oss expert rows (PASS/FAIL), and in the
# oss20b stage a "gemv" row of the variant beside each round's all-on-the-GPU row (and the
# --profile row); unset or 0: none of it).
# $OUT: device_ds2.log, the test logs, ds2/bench.tar.
#   run(command="STAGES=oss20b OAI_AB=1 ROUNDS=1 bash bench/device/device_ds2.sh", ...)
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
O="${OUT:-/tmp}/ds2"; J=/tmp/ds2_json; rm -rf "$J"; mkdir -p "$O" "$J"
trap 'tar -C "$J" -cf "$O/bench.tar" . 2>/dev/null' EXIT
dev_log ds2
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
dev_wheels
BUDGET=${BUDGET:-540}
R=${R:-2}
STAGES=${STAGES:-tests lite}
have() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
late() { [ "$(el)" -ge "$BUDGET" ] && { echo "budget reached at $(el)s: $1 skipped"; return 0; }; return 1; }
# LAYERS_<stage> writes fewer layers at the real per-layer shapes (a smaller file, quicker to write)
synth_args() { # stage -> synth_arch.py preset and options (ETYPE_<stage>: its --experts-type)
    local et
    eval "et=\${ETYPE_$1:-}"
    [ -n "$et" ] && printf -- '--experts-type %s ' "$et"
    case $1 in
    lite) echo deepseek-v2-lite ${LAYERS_lite:+--layers $LAYERS_lite} ;;
    air) echo glm-4.5-air --no-mtp --pad-vocab ${LAYERS_air:+--layers $LAYERS_air} ;;
    oss20b) echo gpt-oss-20b --pad-vocab ${LAYERS_oss20b:+--layers $LAYERS_oss20b} ;;
    qwen3next) echo qwen3-next-80b --layers ${LAYERS_qwen3next:-12} --pad-vocab ;;
    v3) echo deepseek-v3 --layers ${LAYERS_v3:-8} --pad-vocab ;;
    kimi) echo kimi-k2 --layers ${LAYERS_kimi:-6} --pad-vocab ;;
    glm45) echo glm-4.5 --no-mtp --layers ${LAYERS_glm45:-24} --pad-vocab ;;
    oss120b) echo gpt-oss-120b --layers ${LAYERS_oss120b:-36} --pad-vocab ;;
    esac
}
n_experts() {
    case $1 in
    lite) echo 64 ;; air) echo 128 ;; oss20b) echo 32 ;; qwen3next) echo 512 ;; v3) echo 256 ;; kimi) echo 384 ;;
    glm45) echo 160 ;; oss120b) echo 128 ;;
    esac
}
n_layers() { # the layers a stage's file has (llama-bench's -ncmoe: every layer's experts on the CPU)
    case $1 in
    lite) echo ${LAYERS_lite:-27} ;; air) echo ${LAYERS_air:-46} ;; oss20b) echo ${LAYERS_oss20b:-24} ;;
    qwen3next) echo ${LAYERS_qwen3next:-12} ;; v3) echo ${LAYERS_v3:-8} ;; kimi) echo ${LAYERS_kimi:-6} ;;
    glm45) echo ${LAYERS_glm45:-24} ;; oss120b) echo ${LAYERS_oss120b:-36} ;;
    esac
}
n_moe_layers() { # of them, those with routed experts (synth_arch.py writes one leading dense layer)
    case $1 in
    lite | air | v3 | kimi | glm45) echo $(( $(n_layers $1) - 1 )) ;;
    *) n_layers $1 ;;
    esac
}
MODELS=""
for m in lite air oss20b qwen3next v3 kimi glm45 oss120b; do have $m && MODELS="$MODELS $m"; done
set -- $MODELS
FIRST=${1:-}
# Where a stage's file goes: /dev/shm (RAM) unless SYNTH_DIR says otherwise or the stage is air
# (52 GiB). Files on the device's /tmp came slowly (run4: 9.2 GiB in ~5 min with 6 jobs; run7: two
# 6-7 GiB files not done in 10 min) where one job makes and writes ~120 MB/s on the development
# machine: the disk is the likely limit.
# GLM-4.5-Air's 52 GiB go to /dev/shm too where it has 60 GiB free.
sdir() {
    if [ -n "${SYNTH_DIR:-}" ]; then echo "$SYNTH_DIR"
    elif [ "$1" = air ] && [ "$(df --output=avail -BG /dev/shm | tail -1 | tr -dc 0-9)" -lt 60 ]; then echo /tmp
    else echo /dev/shm; fi
}
synth() { # stage jobs: writes $(sdir stage)/ds2_<stage>.gguf unless an earlier call did
    local tag=$1 jobs=$2
    [ -f /tmp/ds2_$tag.done ] && return 0
    [ "${PREWRITE:-0}" = 1 ] || for f in /tmp/ds2_*.gguf /dev/shm/ds2_*.gguf; do
        [ -e "$f" ] && [ "$(basename "$f")" != ds2_$tag.gguf ] && rm -f "$f" "/tmp/$(basename "${f%.gguf}").done"
    done
    python3 bench/synth_arch.py $(synth_args $tag) "$(sdir $tag)/ds2_$tag.gguf" --vocab .devdata/ggml-vocab-gpt-2.gguf \
        --synth .devdata/synth_moe.py --jobs "$jobs" > "$J/synth_$tag.log" 2>&1 && echo ok > /tmp/ds2_$tag.done ||
        echo failed > /tmp/ds2_$tag.fail # ends the wait for it
}
if [ "${PREWRITE:-0}" = 1 ]; then # every stage's file written while the build and tests run
    for m in $MODELS; do synth "$m" 5 & done
else
    [ -n "$FIRST" ] && { synth "$FIRST" "${SYNTH_JOBS:-6}" & } # written while the build and tests run
fi
LL=0
if [ -n "$FIRST" ] && [ -f .peer/llama_bench.sh ]; then
    [ -f /tmp/llama.done ] || ( bash .peer/llama_bench.sh build > "$J/llama_build.log" 2>&1 && echo ok > /tmp/llama.done ) &
    LL=1
fi
DEV_JOBS=12 dev_build strata libstrata.so build/tests/test_cuda_attn build/tests/test_cuda_session build/tests/test_cuda_mla build/tests/test_cuda_moe \
    build/tests/test_cuda_moe_lowbit build/tests/test_dense_lead build/tests/test_cuda_dequant build/tests/test_cuda_mmv \
    build/tests/test_cuda_deltanet build/tests/test_cuda_mtp \
    build/tests/test_cuda_spec build/tests/test_kv_stats
OAI_PID=
if [ "${OAI_AB:-0}" = 1 ]; then # gpt-oss's experts on the GEMV path, built while the tests run
    dev_variant gemv "-DSTRATA_MMQ_OAI=0" c/cuda/mmq.o &
    OAI_PID=$!
fi
if have tests; then
    DEV_TEST_SHOW="FAIL|SKIP|skip" DEV_TEST_SHOW_N=10 dev_tests build \
        ${CTESTS:-test_cuda_mla:120 test_cuda_moe:200 test_cuda_moe_lowbit:150 test_dense_lead:120 test_cuda_dequant:120 test_cuda_mmv:200}
    for t in ${PYTESTS:-test_hf_parity_gpu.py:: test_iq_gpu.py::}; do # FILE::-k expression, + for spaces; - none
        [ "$t" = - ] && continue
        f=${t%%::*} k=${t#*::}
        k=${k//+/ }
        STRATA_LIB=$PWD/libstrata.so STRATA_CLI=$PWD/strata PYTHONPATH=$PWD/python:$PYTHONPATH \
            timeout 300 python3 -m pytest -q -s -p no:cacheprovider python/tests/$f ${k:+-k "$k"} > "$J/${f%.py}.log" 2>&1
        echo "$f $k rc=$? at $(el)s: $(tail -1 "$J/${f%.py}.log")" # the logs travel in bench.tar
        grep -E "^FAILED|Error|KL\(exact" "$J/${f%.py}.log" | head -${PYSHOW:-30}
    done
    [ -f .devdata/ds2_v3.gguf ] && STRATA_LIB=$PWD/libstrata.so PYTHONPATH=$PWD/python:$PYTHONPATH \
        timeout 120 python3 bench/device/ds2_long.py .devdata/ds2_v3.gguf 900 2>&1 | tail -6
    if [ "${MLA_CTX:-8192}" = 0 ]; then :
    elif [ -x build/tests/mla_check ]; then build/tests/mla_check "${MLA_CTX:-8192}" > "$O/mla_check.log" 2>&1 # prebuilt
    else make CUDA=1 mla-check MLA_CTX=${MLA_CTX:-8192} > "$O/mla_check.log" 2>&1; fi
    echo "mla_check rc=$? at $(el)s"; grep -E "PASS|FAIL|GB/s" "$O/mla_check.log" | head -${MLA_SHOW:-30}
    if [ "${DN_CHECK:-1}" = 1 ]; then # qwen3next's DeltaNet kernels against the CPU's functions
        make CUDA=1 deltanet-check > "$J/deltanet_check.log" 2>&1
        echo "deltanet_check rc=$? at $(el)s"; grep -E "PASS|FAIL|GB/s|us" "$J/deltanet_check.log" | head -${DN_SHOW:-30}
    fi
fi
OAI_OK=0
if [ -n "$OAI_PID" ]; then
    wait "$OAI_PID" && OAI_OK=1
    echo "gemv variant (-DSTRATA_MMQ_OAI=0) $([ $OAI_OK = 1 ] && echo built || echo FAILED) at $(el)s"
fi
if [ "${OAI_AB:-0}" = 1 ]; then # the tiles' checks: the gpt-oss expert cases against the CPU, mmq_check's rows
    mkdir -p "$O/oai"
    TEST_CUDA_MOE_OAI_ONLY=1 O="$O/oai" DEV_TEST_SHOW="FAIL|tiles|GEMV path|gpt-oss" DEV_TEST_SHOW_N=20 \
        dev_tests build test_cuda_moe:60 test_cuda_moe_lowbit:200
    mc=$(dev_check mmq_check base) && [ -n "$mc" ] || echo "mmq_check: BUILD FAILED"
    if [ -n "$mc" ]; then
        { timeout 60 $mc mxfp4; timeout 120 $mc "gpt-oss-20b experts"; } \
            > "$O/oai/mmq_check.txt" 2>&1
        echo "mmq_check oai rc=$? at $(el)s:"; grep -vE "^NVIDIA" "$O/oai/mmq_check.txt" | cut -c1-170
    fi
fi
[ -n "$FIRST" ] || { echo "done at $(el)s"; exit 0; }
srow() { # tag args... (SDEV: the backend flag, --gpu unless set; SBIN: the binary, ./strata unless set)
    local tag=$1
    shift
    [ "${ONLY:-}" = llama ] && return 0 # ONLY=llama: llama-bench's rows alone (Strata's ran earlier)
    late "strata $tag" && return
    timeout 200 ${SBIN:-./strata} bench -m $F -p 512 -n 64 -r "$R" ${SDEV:---gpu} -t 16 "$@" --json "$J/s_$tag.json" \
        > "$J/s_$tag.md" 2> "$J/s_$tag.err"
    echo "strata $tag (rc $?): $(dev_rates < "$J/s_$tag.md")at $(el)s"
    grep -E "^\|.*tg64" "$J/s_$tag.md" | awk -F'|' '{print "    decode bytes/token" $8 ", GB/s" $9 ", of copy rate" $10}'
    [ -s "$J/s_$tag.md" ] || tail -3 "$J/s_$tag.err"
}
lrow() { # tag args...
    local tag=$1
    shift
    [ "$LL" = 1 ] || return 0
    while [ ! -f /tmp/llama.done ] && [ "$(el)" -lt $((BUDGET * 6 / 10)) ]; do sleep 5; done
    [ -f /tmp/llama.done ] || { echo "llama-bench not built by $(el)s"; LL=0; return 0; }
    late "llama $tag" && return
    timeout 200 bash .peer/llama_bench.sh run -m $F -ngl 99 -fa 1 -p 512 -n 64 -r "$R" "$@" \
        > "$J/l_$tag.md" 2> "$J/l_$tag.err"
    echo "llama $tag (rc $?): $(grep -E 'pp512|tg64' "$J/l_$tag.md" | awk -F'|' '{printf "%s ", $(NF-1)}')at $(el)s"
}
for m in $MODELS; do
    if [ "$m" = "$FIRST" ] || [ "${PREWRITE:-0}" = 1 ]; then
        for i in $(seq 200); do [ -f /tmp/ds2_$m.done ] || [ -f /tmp/ds2_$m.fail ] && break; sleep 2; done
    else
        late "$m" && continue
        synth "$m" 14
    fi
    [ -f /tmp/ds2_$m.done ] || { echo "$m file not written: $(tail -3 "$J/synth_$m.log")"; continue; }
    F=$(sdir $m)/ds2_$m.gguf
    echo "$m written at $(el)s: $(du -h $F | cut -f1)"; grep -iE "bytes|expert" "$J/synth_$m.log" | head -5
    if [ "$m" = lite ] && [ "${LONG:-0}" != 0 ]; then # GPU vs CPU sessions at real shapes (kv_lora 512)
        STRATA_LIB=$PWD/libstrata.so PYTHONPATH=$PWD/python:$PYTHONPATH timeout 240 \
            python3 bench/device/ds2_long.py "$F" "$LONG" 64 2>&1 | tail -6
        echo "ds2_long on $m at $(el)s"
    fi
    eval "nr=\${ROUNDS_$m:-${ROUNDS:-2}}" # ROUNDS_<stage>: that stage's rounds (0: its file and LONG only)
    for p in $(seq "$nr"); do # interleaved rounds
        srow ${m}_gpu_$p # Strata's rows first: llama-bench may still be building in the first round
        [ "$m" = oss20b ] && [ "$OAI_OK" = 1 ] && SBIN=build-gemv/strata srow ${m}_gpu_gemv_$p
        srow ${m}_cpumoe_$p --cpu-moe
        srow ${m}_cache_$p --expert-cache $(( $(n_experts $m) * $(n_moe_layers $m) / 4 )) # a quarter
        if [ "$p" = 1 ] && [ "${PROF:-1}" = 1 ]; then # the phases of a step
            srow ${m}_prof --profile
            grep -E "profile (pp|tg)[0-9]+ \(" "$J/s_${m}_prof.err" | sed 's/^strata: /    /'
            if [ "$m" = oss20b ] && [ "$OAI_OK" = 1 ]; then
                SBIN=build-gemv/strata srow ${m}_prof_gemv --profile
                grep -E "profile (pp|tg)[0-9]+ \(" "$J/s_${m}_prof_gemv.err" | sed 's/^strata: /    /'
            fi
        fi
        lrow ${m}_gpu_$p
        lrow ${m}_cpumoe_$p -ncmoe "$(n_layers $m)" -t 16
    done
done
echo "done at $(el)s"
