#!/usr/bin/env bash
# prebuild.sh - builds the CUDA library, ./strata and the GPU test programs here (nvcc, no GPU
# needed) and packs them small enough to carry into build-pre/, so that a device call skips its
# ~3-minute build:
#   bash bench/device/prebuild.sh            # TESTS="test_a test_b" to choose the test programs
#   run(command="PREBUILT=build-pre STAGES=... bash bench/device/device_ds2.sh",
#       carry=["build-pre", ".whl", ".devdata/synth_moe.py", ".devdata/ggml-vocab-gpt-2.gguf", ".peer"])
# The tracked tree leaves ~24 MB of a call's 64 MiB for what it carries, and every program linked
# statically holds the ~25 MB of GPU code, so here one libstrata.so (stripped, xz) serves them
# all: built in build-devx/ with its internal symbols exported for the tests
# (-fno-semantic-interposition and -Bsymbolic-functions keep the library's own calls direct, as
# hidden visibility does), ./strata and each test linked against it. device_common.sh's dev_build
# unpacks it into the tree's root (tests find it at $ORIGIN/../..).
# VARIANTS (lines "NAME OBJ FLAGS...", e.g. "ab1 c/cuda/moe.o -DSTRATA_MOE_DP4A_EXT=1"; default
# none): for each, a copy of the build with OBJ recompiled with nvcc FLAGS and its libstrata.so
# packed beside the base's in one solid xz (libs.tar.xz), which dev_variant takes instead of
# building. Each costs about its object's compressed size (moe.o's ~6 MB: one variant beside the
# base is about what a call's carry has room for). CHECKS: the c/cuda/dev check programs (and
# tools/q8_sm60_check), linked against the same library.
# FLAGS (nvcc flags, e.g. -DSTRATA_MOE_DP4A_EXT=1) build the base itself with them, in a copy of
# build-devx/ with FLAG_OBJS (default c/cuda/moe.o c/cuda/mmq.o) rebuilt, packed into PACK
# (default build-pre; e.g. build-pre-ab, carried instead of build-pre) with the flags in FLAGS.
set -eu
cd "$(dirname "$0")/../.."
B=build-devx
FLAGS=${FLAGS:-}
PACK=${PACK:-build-pre}
VIS="-fvisibility=default -fno-semantic-interposition -Wl,-Bsymbolic-functions"
TESTS=${TESTS:-test_cuda_attn test_cuda_session test_cuda_mla test_cuda_moe test_cuda_moe_lowbit test_dense_lead test_cuda_dequant
test_cuda_mmv test_cuda_deltanet test_cuda_mtp test_cuda_spec test_kv_stats test_cuda_split}
VARIANTS=${VARIANTS:-}
CHECKS=${CHECKS:-} # e.g. "moe_check mla_check": ~0.7 MB each
mk() { # DIR NVCC_FLAGS MAKE_ARGS...: the CUDA build in DIR with those nvcc flags, symbols exported
    local d=$1 f=$2
    shift 2
    eval "make -j${JOBS:-2} CUDA=1 BUILD=$d OUTDIR=$d SAN=$(printf %q "$VIS") \
        NVCC_EXTRA='-Xcompiler -fvisibility=default $f' $*"
}
copy_build() { # SRC DST OBJ...: a copy of SRC with those objects removed (rebuilt by the next make);
    local src=$1 dst=$2 # cp -a keeps the objects' times, so sources newer than them rebuild too
    shift 2
    rm -rf "$dst" && cp -a "$src" "$dst" && for o in "$@"; do rm -f "$dst/$o"; done
}
if [ -n "$FLAGS" ]; then # the base itself with FLAGS: a copy of build-devx, the flagged objects rebuilt
    B=build-devx-flags
    if [ -d build-devx ]; then copy_build build-devx $B ${FLAG_OBJS:-c/cuda/moe.o c/cuda/mmq.o}; fi
fi
mk $B "$FLAGS" $B/strata $B/libstrata.so > /tmp/prebuild.log 2>&1 || { tail -20 /tmp/prebuild.log; exit 1; }
P=$PACK.new # packed aside, then moved in one step (a call may copy the tree meanwhile)
rm -rf $P && mkdir -p $P/tests $P/libs
so=$(readlink $B/libstrata.so)
strip -o $P/libs/$so $B/$so
while read -r n obj flags; do
    [ -n "$n" ] || continue
    copy_build $B $B-$n $obj
    mk $B-$n "$FLAGS $flags" $B-$n/libstrata.so > /tmp/prebuild_$n.log 2>&1 || { tail -20 /tmp/prebuild_$n.log; exit 1; }
    mkdir -p $P/libs/$n && strip -o $P/libs/$n/$so $B-$n/$so && echo "$flags" > $P/libs/$n/FLAGS
done <<< "$VARIANTS"
var() { mk $B "$FLAGS" "-s --eval 'print-%: ; @echo \$(\$*)' print-$1"; } # a make variable, expanded
flags=$(var CFLAGS)
objs=$(var CLI_OBJS)
cc -o $P/strata $objs -L$P/libs -l:$so -Wl,-rpath,'$ORIGIN' -lm -lpthread
for t in $TESTS; do
    [ -f c/tests/$t.c ] || { echo "no c/tests/$t.c: skipped"; continue; }
    cc $flags -Ic/tests -o $P/tests/$t c/tests/$t.c -L$P/libs -l:$so \
        -Wl,-rpath,'$ORIGIN/../..' -lm -lpthread
done
for c in $CHECKS; do # the check programs' own kernels and main, the rest from the library
    src=c/cuda/dev/$c.cu; [ -f $src ] || src=tools/$c.cu # tools/q8_sm60_check.cu too
    nvcc $(var NVCCFLAGS) -Ic/cuda/dev -Ic/tests -o $P/tests/$c $src -L$P/libs -l:$so \
        -Xlinker -rpath -Xlinker '$ORIGIN/../..' -lpthread -ldl -lrt
done
strip $P/strata $P/tests/*
# one solid stream with a window wider than a library, so each variant costs only its difference
tar -C $P/libs -cf - . | xz -T1 -6 --lzma2=preset=6,dict=64MiB > $P/libs.tar.xz && rm -rf $P/libs
git rev-parse --short HEAD > $P/REVISION
[ -z "$FLAGS" ] || echo "$FLAGS" > $P/FLAGS
rm -rf $PACK && mv $P $PACK
du -sh $PACK
