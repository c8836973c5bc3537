#!/usr/bin/env bash
set -euo pipefail
# Alternating runs of two weft binaries (A, then B, in each pair) under the
# compare procedure (cap 0.5 CPU, target on CPU 0, load on CPU 1).
# Usage: [THREADS=n] bench/ab-pairs.sh NAME A_BINARY B_BINARY [PAIRS] [extra weft-bench run args...]
# (THREADS: weft's ConnectionThreads, default 1)
# Writes bench/results/<date>-NAME/{a,b}-<pair>.json and summary.txt; prints
# each run's CPU-s/GiB, each pair's B / A ratio and their median.
cd "$(dirname "$0")/.."
name=$1 a=$2 b=$3
pairs=${4:-4}
shift 3; shift || true
out=bench/results/$(date -u +%F)-$name
mkdir -p "$out"
ratios=()
for r in $(seq 1 "$pairs"); do
  declare -A cost=()
  for side in a b; do
    bin=$a; [ "$side" = b ] && bin=$b
    line=$(target/release/weft-bench run --target weft --threads "${THREADS:-1}" --cpu-quota 0.5 --no-plots --floor-secs 0 \
      --weft "$bin" --out "$out/$side-$r.json" "$@" 2>&1 | tee "$out/$side-$r.log" | grep "^| weft")
    cost[$side]=$(echo "$line" | awk -F'|' '{gsub(/ /,"",$5); print $5}')
    # The share of cells that crossed workers: placement moves it from run
    # to run, and with it the cost (docs/perf.md, "The regression check").
    crossed=$(grep -h 'cells crossed workers' "$out/$side-$r.log" | sed -n 's/.*weft: \([0-9.]*%\) of .*/\1/p' | head -1 || true)
    echo "$side pair $r: $(echo "$line" | awk -F'|' '{print $3 "MiB/s," $5 "CPU-s/GiB"}')${crossed:+, $crossed of cells crossing}" | tee -a "$out/summary.txt"
  done
  ratio=$(awk -v x="${cost[b]}" -v y="${cost[a]}" 'BEGIN{printf "%.3f", x/y}')
  ratios+=("$ratio")
  echo "pair $r: B / A = $ratio" | tee -a "$out/summary.txt"
  unset cost
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v a="$a" -v b="$b" '{x[NR]=$1} END{m=(NR%2)?x[(NR+1)/2]:(x[NR/2]+x[NR/2+1])/2; printf "median B / A over %d pairs: %.3f (min %.3f, max %.3f); A = %s, B = %s\n", NR, m, x[1], x[NR], a, b}' | tee -a "$out/summary.txt"
