# device_common.sh - the helpers every script in bench/device/ shares (sourced, from the repository
# root; it only defines functions and DEV_NVCC). Its callers keep their own steps and output lines:
# each helper prints what the scripts printed before they shared it.
#   dev_wheels           the carried .whl (gguf, cffi, pycparser) into /tmp/site, on PYTHONPATH
#   dev_synth_files DIR  the synthetic olmoe-1b-7b and qwen3-30b-a3b files (/tmp/olmoe.gguf,
#                        /tmp/q3.gguf; /tmp/olmoe.done, /tmp/q3.done when written) in the
#                        background, logs in DIR; kept from an earlier script of the same call
#   dev_prev_build JOBS LOG [TARGETS...]  the previous landing (.devdata/prev) built in the
#                        background (TARGETS, default strata) once per call however many scripts
#                        ask (a lock; /tmp/prev.done when built); PREV=0: not built
#   dev_flag_build NAME FLAGS JOBS LOG  a whole second build of this tree with nvcc FLAGS
#                        (build-NAME/strata) in the background; /tmp/NAME.done when built
#   dev_log NAME [DIR]   everything the script prints from here also in DIR/device_NAME.log (DIR
#                        default $OUT, else /tmp); t0 for el. (A script that tees so must not
#                        `wait` bare: that also waits for the tee, which never ends.)
#   el                   seconds since t0
#   dev_start NAME       a script's common start: O=$OUT/NAME for its files, J=/tmp/NAME_json
#                        (tarred to $O/bench.tar at exit), dev_log NAME, the GPU's name and
#                        clocks, the wheels and the synthetic files
#   dev_build TARGETS... this tree's make of TARGETS (CUDA), "build ok at Ns"; on failure the
#                        first error lines and exit 1. DEV_LOG (default $J/build.log), DEV_JOBS
#                        (default 16), DEV_ERRS (error lines shown, default 10); PREBUILT=DIR: a
#                        tree from bench/device/prebuild.sh, carried, is used instead (linked as
#                        build/, its strata and libstrata.so copied here; each variant packed with
#                        it unpacked as build-NAME/: its library, a strata and tests/ wrappers that
#                        run build/tests' programs on that library)
#   dev_variant NAME FLAGS "OBJS" [TARGETS...]  build-NAME: a copy of build/ with OBJS (paths under
#                        it) recompiled with nvcc FLAGS, then its strata and TARGETS (paths under it);
#                        log $J/build_NAME.log; status 0 when built. Under PREBUILT the packed
#                        variant NAME, refused unless it was built with FLAGS
#   dev_check NAME B     the path of c/cuda/dev/NAME.cu's (or tools/NAME.cu's) program for build B
#                        of $builds (base or a variant): prebuilt, or linked here from its
#                        libstrata.a, or from a prebuilt tree's libstrata.so (empty on failure)
#   dev_variants "OBJS" TARGETS...  dev_variant ab1..ab3 for the flags AB1..AB3 that are set; $builds
#                        lists base and those built; dev_ab_dir / dev_ab_cli / dev_ab_flags B: a
#                        build's tree, its ./strata and its flags
#   dev_tests DIR TESTS...  each DIR/tests/T run (T or T:SECONDS, default 200 s), log $O/T.log,
#                        its tally and the lines matching DEV_TEST_SHOW (default FAIL; the first
#                        DEV_TEST_SHOW_N, default 5)
#   dev_wait_files [LABEL]  until the synthetic qwen3 file is written (5 minutes at most), then
#                        "LABEL at Ns" (default "files")
#   dev_bench_row BIN TAG NAME FILE ARGS...  one `strata bench` process of BIN (ARGS end with the
#                        session's options, --gpu among them), JSON in $J/bench_NAME_JTAG_$p.json
#                        (JTAG = DEV_JSON_TAG, default TAG; p the caller's pass), "TAG NAME:" and
#                        its figures on one line; ROWS=regex: only the names that match
#   dev_rates            the rates of the `strata bench` table on stdin, on one line
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
    local jobs=$1 log=$2 t built=1
    shift 2
    [ $# -gt 0 ] || set -- strata
    [ -f .devdata/prev/Makefile ] && [ "${PREV:-1}" = 1 ] || return 0
    find /tmp/prev.lock -maxdepth 0 -mmin +10 -exec rmdir {} \; 2>/dev/null # a killed call's lock
    for t in "$@"; do [ -x ".devdata/prev/$t" ] || built=0; done
    if [ $built = 1 ] && [ -f /tmp/prev.done ]; then :
    elif mkdir /tmp/prev.lock 2>/dev/null; then
        rm -f /tmp/prev.done
        ( cd .devdata/prev && make -j"$jobs" CUDA=1 "$@" > "$log" 2>&1 && echo ok > /tmp/prev.done; rmdir /tmp/prev.lock ) &
    fi
}
dev_flag_build() {
    ( make -j"$3" CUDA=1 BUILD="build-$1" OUTDIR="build-$1" NVCC_EXTRA="$2" "build-$1/strata" \
        > "$4" 2>&1 && echo ok > "/tmp/$1.done" ) &
}
dev_log() {
    exec > >(tee "${2:-${OUT:-/tmp}}/device_$1.log") 2>&1
    t0=$(date +%s)
}
el() { echo $(( $(date +%s) - t0 )); }
dev_start() {
    O="${OUT:-/tmp}/$1"; J=/tmp/$1_json; rm -rf "$J"; mkdir -p "$O" "$J"
    trap 'tar -C "$J" -cf "$O/bench.tar" . 2>/dev/null' EXIT
    dev_log "$1"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
    dev_wheels
    dev_synth_files /tmp
}
DEV_NVCC="-O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format -Ic/format/quant -Ic/compute/cpu -Ic/cuda -Ic/model -Ic/experts -Ic/engine -DSTRATA_HAVE_CUDA=1"
dev_build() {
    local log=${DEV_LOG:-$J/build.log}
    if [ -n "${PREBUILT:-}" ] && [ -x "$PREBUILT/strata" ]; then # built elsewhere with nvcc, carried
        [ -e build ] || ln -s "$PREBUILT" build
        local so L=/tmp/prelibs v t
        rm -rf $L && mkdir -p $L && tar -C $L -xJf "$PREBUILT/libs.tar.xz" || exit 1
        so=$(basename "$(ls $L/libstrata.so.[0-9]* | head -1)")
        cp "$L/$so" . && cp "$PREBUILT/strata" . && ln -sf "$so" libstrata.so || exit 1
        for v in $L/*/; do # the variants: build-NAME/ runs build/'s programs on its library
            [ -d "$v" ] || continue
            v=$(basename "$v")
            rm -rf "build-$v" && mkdir -p "build-$v/tests" && cp "$L/$v/"* "$PREBUILT/strata" "build-$v/" || exit 1
            for t in "$PREBUILT"/tests/*; do
                printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/build-$v" "$PWD/build/tests/${t##*/}" \
                    > "build-$v/tests/${t##*/}" && chmod +x "build-$v/tests/${t##*/}"
            done
        done
        echo "prebuilt $PREBUILT ($(cat "$PREBUILT/REVISION" 2>/dev/null)$([ -f "$PREBUILT/FLAGS" ] && echo ", built with $(cat "$PREBUILT/FLAGS")"); variants: $(ls -d $L/*/ 2>/dev/null |
            xargs -rn1 basename | tr '\n' ' ')) at $(el)s"
        return 0
    fi
    make -j"${DEV_JOBS:-16}" CUDA=1 "$@" > "$log" 2>&1 ||
        { echo "BUILD FAILED"; grep error "$log" | head -"${DEV_ERRS:-10}"; exit 1; }
    echo "build ok at $(el)s"
}
dev_variant() {
    local n=$1 f=$2 objs=$3 o
    shift 3
    if [ -n "${PREBUILT:-}" ] && [ -x "$PREBUILT/strata" ]; then
        [ -f "build-$n/FLAGS" ] && [ "$(cat "build-$n/FLAGS")" = "$f" ] && return 0
        echo "$n ($f): not among the prebuilt variants (with these flags)"
        return 1
    fi
    rm -rf "build-$n" && cp -r build "build-$n" || return 1
    for o in $objs; do rm -f "build-$n/$o"; done
    make -j16 CUDA=1 BUILD="build-$n" OUTDIR="build-$n" NVCC_EXTRA="$f" "build-$n/strata" "${@/#/build-$n/}" \
        > "$J/build_$n.log" 2>&1 && return 0
    echo "$n ($f): BUILD FAILED"; grep error "$J/build_$n.log" | head -5
    return 1
}
dev_variants() { # "OBJS" TARGETS...: dev_variant ab1..ab3 from the flags AB1..AB3 that are set;
    local objs=$1 v flags # $builds: base and the variants built
    shift
    builds="base"
    for v in 1 2 3; do
        eval "flags=\${AB$v:-}"
        [ -n "$flags" ] || continue
        dev_variant ab$v "$flags" "$objs" "$@" && builds="$builds ab$v"
    done
    echo "variants built at $(el)s: $builds"
}
dev_ab_dir() { [ "$1" = base ] && echo build || echo "build-$1"; }      # a build of $builds: its tree
dev_ab_cli() { [ "$1" = base ] && echo ./strata || echo "build-$1/strata"; } # its ./strata
dev_ab_flags() { [ "$1" = base ] && echo "" || eval "echo \${AB${1#ab}}"; }   # its nvcc flags
dev_check() {
    local d src
    d=$(dev_ab_dir "$2")
    [ -x "$d/tests/$1" ] && { echo "$d/tests/$1"; return 0; }
    src=c/cuda/dev/$1.cu; [ -f "$src" ] || src=tools/$1.cu
    if [ -f "$d/libstrata.a" ]; then
        nvcc $DEV_NVCC -Ic/cuda/dev -Ic/tests "$src" "$d/libstrata.a" -lpthread -ldl -lrt -o "/tmp/$1_$2" \
            2> "$J/$1_build_$2.log" && echo "/tmp/$1_$2"
        return
    fi # a prebuilt tree: linked against the library here (every symbol exported), a variant's run on its own
    [ -x "/tmp/$1_base" ] || nvcc $DEV_NVCC -Ic/cuda/dev -Ic/tests "$src" -L. -l:libstrata.so -Xlinker -rpath \
        -Xlinker "$PWD" -Xlinker --enable-new-dtags -lpthread -ldl -lrt -o "/tmp/$1_base" 2> "$J/$1_build_base.log" || return 0
    [ "$2" = base ] && { echo "/tmp/$1_base"; return 0; }
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/$d" "/tmp/$1_base" > "/tmp/$1_$2" &&
        chmod +x "/tmp/$1_$2" && echo "/tmp/$1_$2"
}
dev_tests() {
    local d=$1 t s
    shift
    for t in "$@"; do
        s=200; [ "${t#*:}" != "$t" ] && s=${t#*:} t=${t%%:*}
        timeout "$s" "$d/tests/$t" > "$O/$t.log" 2>&1
        echo "$t rc=$? at $(el)s: $(grep -E "passed, " "$O/$t.log" | tail -1)"
        grep -E "${DEV_TEST_SHOW:-FAIL}" "$O/$t.log" | head -"${DEV_TEST_SHOW_N:-5}"
    done
}
dev_wait_files() {
    local i
    for i in $(seq 150); do [ -f /tmp/q3.done ] && break; sleep 2; done
    echo "${1:-files} at $(el)s"
}
dev_bench_row() {
    local c=$1 b=$2 n=$3 m=$4 x
    shift 4
    [ -z "${ROWS:-}" ] || echo "$n" | grep -Eq "$ROWS" || return 0
    x=$(timeout 120 $c bench -m "$m" "$@" --json "$J/bench_${n}_${DEV_JSON_TAG:-$b}_$p.json" 2>/dev/null |
        grep -E "^\|.*(pp|tg)[0-9]" | awk -F'|' '{gsub(/ /,"",$6); gsub(/ /,"",$7); printf "%s %s  ", $6, $7}')
    echo "$b $n: $x"
}
dev_rates() { grep -oE "(pp|tg)[0-9]+[^|]*\| [0-9.]+" | grep -oE "[0-9.]+$" | tr '\n' ' '; }
