#!/usr/bin/env bash
# Profile each weft run of an end-to-end A/B (`weft-bench e2e --ab-weft A
# --weft B --ab-pairs N …`): 6 s into every A or B run, `perf stat`
# (context switches, CPU clock, the syscalls of the data path) for 5 s,
# then `perf record -g` for 5 s, and the top symbols.
#
#   bash bench/profile-e2e-ab.sh OUT_DIR [weft-bench e2e args…]
#
# e.g. bash bench/profile-e2e-ab.sh /tmp/prof --circuits 32 --mib 48 \
#   --threads 1 --entries 4 --exits 4 --clients 4 --cpu-cap 0.15 \
#   --ab-weft OLD --weft NEW --ab-pairs 1
# Writes OUT_DIR/{e2e.log,stat-K-weft-X.txt,report-K-weft-X.txt}. Runs
# must last longer than 16 s (48 MiB streams at 0.15 CPU do). Stops only
# the weft-bench it started (by PID).
set -euo pipefail
out=${1:?out dir}
shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
target/release/weft-bench e2e --no-plots --results "$out" --tag prof "$@" >"$out/e2e.log" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT
n=0
seen=""
for _ in $(seq 1 3600); do
  kill -0 $bench 2>/dev/null || break
  line=$(grep -E "A/B pair [0-9]+ of [0-9]+: weft-[AB]" "$out/e2e.log" | tail -1 || true)
  if [ -n "$line" ] && [ "$line" != "$seen" ]; then
    seen=$line
    n=$((n + 1))
    side=$(echo "$line" | grep -oE "weft-[AB]")
    sleep 6
    pid=$(cat "/tmp/weft-bench-$bench/e2e/weft/pid")
    perf stat -e 'context-switches,cpu-clock,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_getsockopt,syscalls:sys_enter_ioctl' \
      -p "$pid" -- sleep 5 2>"$out/stat-$n-$side.txt" || true
    perf record -F 1999 -g -o "$out/perf-$n-$side.data" -p "$pid" -- sleep 5 2>/dev/null || true
    perf report -i "$out/perf-$n-$side.data" --no-children --sort symbol --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | head -60 >"$out/report-$n-$side.txt" || true
    rm -f "$out/perf-$n-$side.data"
  fi
  sleep 1
done
wait $bench || true
trap - EXIT
grep -E "^\[e2e\] weft" "$out/e2e.log" || true
