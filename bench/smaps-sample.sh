#!/usr/bin/env bash
# Copy /proc/PID/smaps of the newest process named BIN once a second into
# DIR/<unix time> until it exits (used with `weft-bench scale` to see which
# mappings grow between phases; docs/perf.md, fifteenth session).
# Usage: bench/smaps-sample.sh BIN DIR
set -u
bin=$(basename "$1"); dir=$2; mkdir -p "$dir"
pid=
for _ in $(seq 1 1200); do pid=$(pgrep -n -x "${bin:0:15}") && break; sleep 0.25; done
[ -n "$pid" ] || { echo "no process named $bin" >&2; exit 1; }
while [ -e "/proc/$pid/smaps" ]; do
  cp "/proc/$pid/smaps" "$dir/$(date +%s.%N)" 2>/dev/null
  sleep 1
done
