#!/usr/bin/env bash
set -euo pipefail
# Alternating weft-1 / weft-2 runs under the compare procedure (cap 0.5 CPU).
cd "$(dirname "$0")/.."
mkdir -p bench/results/$(date -u +%F)-weft1-weft2-pairs
for r in 1 2 3; do
 for t in 1 2; do
  line=$(target/release/weft-bench run --target weft --threads $t --cpu-quota 0.5 --no-plots --floor-secs 0 --out bench/results/$(date -u +%F)-weft1-weft2-pairs/weft-$t-$r.json 2>&1 | grep "^| weft")
  echo "weft-$t $r $(echo $line | awk -F'|' '{print $3, $5}')"
 done
done
