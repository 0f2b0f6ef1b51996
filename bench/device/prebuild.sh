#!/usr/bin/env bash
# prebuild.sh - builds the CUDA ./strata here (nvcc, no GPU needed) into build-dev/ and packs what a
# device call's model rows need into build-pre/: libstrata.so stripped and xz-compressed and a
# ./strata linked against it (rpath $ORIGIN), small enough to carry (the statically linked
# ./strata would double the bytes).
# A call then skips its ~3-minute build:
#   bash bench/device/prebuild.sh
#   run(command="PREBUILT=build-pre STAGES=... bash bench/device/device_ds2.sh",
#       carry=["build-pre", ".whl", ".devdata/synth_moe.py", ".devdata/ggml-vocab-gpt-2.gguf", ".peer"])
# The C test programs link the static library (internal symbols) and are too large to carry: calls
# that run tests build on the device.
set -eu
cd "$(dirname "$0")/../.."
B=build-dev
make -j"${JOBS:-2}" CUDA=1 BUILD=$B OUTDIR=$B $B/strata $B/libstrata.so > /tmp/prebuild.log 2>&1 ||
    { tail -20 /tmp/prebuild.log; exit 1; }
rm -rf build-pre && mkdir -p build-pre
so=$(readlink $B/libstrata.so)
strip -o build-pre/$so $B/$so
objs=$(make -s CUDA=1 BUILD=$B OUTDIR=$B -p -n 2>/dev/null | sed -n 's/^CLI_OBJS := //p' | head -1)
objs=$(eval echo "$objs")
cc -o build-pre/strata $objs -Lbuild-pre -l:$so -Wl,-rpath,'$ORIGIN' -lm -lpthread
strip build-pre/strata
xz -T2 -6 build-pre/$so # the tracked tree leaves ~24 MB of a call's 64 MiB for what it carries
git rev-parse --short HEAD > build-pre/REVISION
du -sh build-pre
