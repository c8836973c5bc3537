#!/usr/bin/env bash
# Profile weft as the middle of the end-to-end run through stock tor
# (`weft-bench e2e`): while weft's streams flow, attach `perf stat` (syscall
# counts, context switches, CPU clock) and `perf record` (call graph) to
# weft's process for SECONDS, then print the top symbols and syscall counts.
#
#   bash bench/profile-e2e.sh NAME THREADS [SECONDS] [extra weft-bench e2e args]
#
# Writes bench/results/<date>-profile-e2e-NAME/{stat.txt,report.txt,e2e.log}.
# Stops only the weft-bench it started (by PID).
set -euo pipefail
name=${1:?name}
threads=${2:?threads}
secs=${3:-10}
shift 3 || shift $#
bin=${WEFT_BENCH:-target/release/weft-bench}
out="bench/results/$(date -u +%F)-profile-e2e-$name"
mkdir -p "$out"
# Long streams, so weft is busy well past the profile window.
"$bin" e2e --threads "$threads" --mib 120 --no-plots --results "$out" --tag "profile-$name" "$@" \
    >"$out/e2e.log" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT
dir=/tmp/weft-bench-$bench/e2e
for _ in $(seq 1 600); do
    grep -q "through weft" "$out/e2e.log" 2>/dev/null && break
    kill -0 $bench 2>/dev/null || { cat "$out/e2e.log"; exit 1; }
    sleep 1
done
grep -q "through weft" "$out/e2e.log" || { echo "weft's streams never started"; exit 1; }
sleep 3
pid=$(cat "$dir/weft/pid")
echo "profiling weft pid $pid for ${secs}s ($threads workers)"
perf stat -e 'raw_syscalls:sys_enter,context-switches,cpu-clock,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_getsockopt,syscalls:sys_enter_ioctl,syscalls:sys_enter_clock_gettime' \
    -p "$pid" -- sleep "$secs" 2>"$out/stat.txt" || true
perf record -F 2999 -g -o "$out/perf.data" -p "$pid" -- sleep "$secs" 2>/dev/null || true
perf report -i "$out/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null \
    >"$out/report-full.txt" || true
grep -E '^# (Samples|Event count)' "$out/report-full.txt" >"$out/report.txt" || true
grep -E '^ +[0-9]' "$out/report-full.txt" | head -80 >>"$out/report.txt" || true
rm -f "$out/perf.data"
wait $bench || true
trap - EXIT
cat "$out/stat.txt"
head -40 "$out/report.txt"
grep -E "^\[e2e\] weft" "$out/e2e.log" || true
