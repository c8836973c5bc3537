#!/usr/bin/env bash
set -euo pipefail
# Alternating weft-1 / weft-2 runs under the compare procedure (cap 0.5 CPU,
# target on CPU 0, load on CPU 1). Usage: [WEFT=binary] [WEFT_PAIRS_SUFFIX=-name]
# bench/weft1-weft2-pairs.sh [PAIRS] [extra weft-bench run args...]
# Prints (and writes to <out>/summary.txt) each run's CPU-s/GiB and share of
# cells that crossed workers, each pair's weft-2 / weft-1 ratio and their median.
cd "$(dirname "$0")/.."
pairs=${1:-3}
shift || true
out=bench/results/$(date -u +%F)-weft1-weft2-pairs${WEFT_PAIRS_SUFFIX:-}
mkdir -p "$out"
ratios=()
for r in $(seq 1 "$pairs"); do
 declare -A cost=()
 for t in 1 2; do
  line=$(target/release/weft-bench run --target weft --threads $t --weft "${WEFT:-target/release/weft}" --cpu-quota 0.5 --no-plots --floor-secs 0 --out "$out/weft-$t-$r.json" "$@" 2>&1 | grep "^| weft")
  cost[$t]=$(echo "$line" | awk -F'|' '{gsub(/ /,"",$5); print $5}')
  echo "weft-$t pair $r: $(echo "$line" | awk -F'|' '{print $3 "MiB/s," $5 "CPU-s/GiB," $12 "of cells crossed workers"}')" | tee -a "$out/summary.txt"
 done
 ratio=$(awk -v a="${cost[2]}" -v b="${cost[1]}" 'BEGIN{printf "%.3f", a/b}')
 ratios+=("$ratio")
 echo "pair $r: weft-2 / weft-1 = $ratio" | tee -a "$out/summary.txt"
 unset cost
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "median weft-2 / weft-1 over %d pairs: %.3f (min %.3f, max %.3f)\n", NR, m, a[1], a[NR]}' | tee -a "$out/summary.txt"
