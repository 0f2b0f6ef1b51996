# device_common.sh - pieces the device scripts share (sourced, from the repository root):
#   dev_wheels           the carried .whl (gguf, cffi, pycparser) into /tmp/site, on PYTHONPATH
#   dev_synth_files DIR  the synthetic olmoe-1b-7b and qwen3-30b-a3b files (/tmp/olmoe.gguf,
#                        /tmp/q3.gguf; /tmp/olmoe.done, /tmp/q3.done when written) in the
#                        background, logs in DIR; kept from an earlier script of the same call
#   dev_prev_build JOBS LOG  the previous landing (.devdata/prev) built in the background once per
#                        call however many scripts ask (a lock; /tmp/prev.done when built);
#                        PREV=0: not built
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
