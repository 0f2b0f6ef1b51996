# device_common.sh - pieces the device scripts share (sourced, from the repository root):
#   dev_wheels           the carried .whl (gguf, cffi, pycparser) into /tmp/site, on PYTHONPATH
#   dev_synth_files DIR  the synthetic olmoe-1b-7b and qwen3-30b-a3b files (/tmp/olmoe.gguf,
#                        /tmp/q3.gguf; /tmp/olmoe.done, /tmp/q3.done when written) in the
#                        background, logs in DIR; kept from an earlier script of the same call
#   dev_prev_build JOBS LOG  the previous landing (.devdata/prev) built in the background once per
#                        call however many scripts ask (a lock; /tmp/prev.done when built);
#                        PREV=0: not built
#   dev_start NAME       a script's common start: O=$OUT/NAME for its files, J=/tmp/NAME_json
#                        (tarred to $O/bench.tar at exit), everything it prints also in
#                        $OUT/device_NAME.log, t0 for el (seconds since), the GPU's name and
#                        clocks, the wheels and the synthetic files
#   DEV_NVCC             nvcc flags for the c/cuda/dev check-and-time programs
dev_wheels() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
}
dev_synth_files() {
    [ -f /tmp/q3.done ] && return 0
    (
        python3 .devdata/synth_moe.py olmoe-1b-7b /tmp/olmoe.gguf --vocab .devdata/ggml-vocab-gpt-2.gguf \
            > "$1/synth_olmoe.log" 2>&1 && echo ok > /tmp/olmoe.done
        python3 .devdata/synth_moe.py qwen3-30b-a3b /tmp/q3.gguf --vocab .devdata/ggml-vocab-gpt-2.gguf \
            > "$1/synth_q3.log" 2>&1 && echo ok > /tmp/q3.done
    ) &
}
dev_prev_build() {
    [ -f .devdata/prev/Makefile ] && [ "${PREV:-1}" = 1 ] || return 0
    find /tmp/prev.lock -maxdepth 0 -mmin +10 -exec rmdir {} \; 2>/dev/null # a killed call's lock
    if [ -x .devdata/prev/strata ] && [ -f /tmp/prev.done ]; then :
    elif mkdir /tmp/prev.lock 2>/dev/null; then
        rm -f /tmp/prev.done
        ( cd .devdata/prev && make -j"$1" CUDA=1 strata > "$2" 2>&1 && echo ok > /tmp/prev.done; rmdir /tmp/prev.lock ) &
    fi
}
dev_start() {
    O="${OUT:-/tmp}/$1"; J=/tmp/$1_json; rm -rf "$J"; mkdir -p "$O" "$J"
    trap 'tar -C "$J" -cf "$O/bench.tar" . 2>/dev/null' EXIT
    exec > >(tee "${OUT:-/tmp}/device_$1.log") 2>&1
    t0=$(date +%s)
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
    dev_wheels
    dev_synth_files /tmp
}
el() { echo $(( $(date +%s) - t0 )); }
DEV_NVCC="-O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format -Ic/format/quant -Ic/compute/cpu -Ic/cuda -Ic/model -Ic/experts -Ic/engine -DSTRATA_HAVE_CUDA=1"
