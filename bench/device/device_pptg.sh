#!/usr/bin/env bash
# device_pptg.sh - does a prompt pass in the same process slow the `--cpu-moe` decode rows that
# follow it? olmoe-1b-7b (and qwen3 with Q3=1): `strata bench` -p 0 -n 64 against -p 512 -n 64,
# and the CLI's greedy 64 tokens after a short prompt against after a ~512-token one (its footer:
# slot-rows each side, the host's wait and CPU step per CPU layer), alternating, REPS passes.
#   run(command="bash bench/device/device_pptg.sh", carry=[".whl", ".devdata"])   (~250 s)
# $OUT: device_pptg.log, pptg/bench.tar (the bench JSON).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start pptg
dev_build strata
# the q3 file's writer must finish first: it would take CPU time from the rows
dev_wait_files
head -c 2600 LICENSE > /tmp/p512.txt
row() { # name file args...: one bench process, its tg row
    local n=$1 f=$2; shift 2
    timeout 120 ./strata bench -m "$f" "$@" --gpu --cpu-moe -t 16 --json "$J/$n.json" 2> "$J/$n.err" |
        grep -E "tg64" | awk -F'|' -v n="$n" '{print n ": " $7}'
}
cli() { # name file prompt-args...: one greedy decode, its rate and footer figures
    local n=$1 f=$2 x; shift 2
    x=$(timeout 120 ./strata -m "$f" "$@" -n 64 --temp 0 --ignore-eos --no-echo --gpu --cpu-moe -t 16 2>&1 >/dev/null)
    echo "$n: $(echo "$x" | grep -oE "[0-9.]+ tok/s" | tail -1) |" \
        "$(echo "$x" | grep -oE "[0-9]+ slot-rows from GPU memory|[0-9]+ on the CPU \(|[0-9.]+ us waited|[0-9.]+ us computed|prompt [^,]*" | tr '\n' ' ')"
}
M=/tmp/olmoe.gguf; [ "${Q3:-0}" = 1 ] && M=/tmp/q3.gguf
for rep in $(seq ${REPS:-3}); do
    row "bench_p0_$rep" $M -p 0 -n 64 -r 3
    row "bench_p512_$rep" $M -p 512 -n 64 -r 3
    row "bench_p512_nosplit_$rep" $M -p 512 -n 64 -r 3 --no-cpu-misses
    cli "cli_short_$rep" $M -p "Once upon a time"
    cli "cli_long_$rep" $M -f /tmp/p512.txt
    echo "(pass $rep at $(el)s)"
done
grep -h "cpu-misses" "$J"/bench_p512_1.err | cut -c1-250 | head -3
echo "all done at $(el)s"
