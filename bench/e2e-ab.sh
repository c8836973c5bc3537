#!/usr/bin/env bash
set -euo pipefail
# The capped end-to-end A/B of the data-path regression check
# (docs/perf.md, "The regression check"): a stock-tor network (3
# authorities, 4 entries, 4 exits, 4 clients), 32 circuits entry → weft →
# exit uploading 24 MiB each, weft with ConnectionThreads 1 under a CPU cap
# of 0.15 and then 0.5 CPU; A and B alternate in the same network (A B,
# B A, …), stock relay1 is measured before and after.
#
#   bash bench/e2e-ab.sh NAME A_BINARY B_BINARY [PAIRS] [CAPS]
#
# PAIRS defaults to 4, CAPS to "0.15 0.5". Writes
# bench/results/<date>-e2e-NAME-cap<C>.json and prints B ÷ A per pair.
cd "$(dirname "$0")/.."
name=$1 a=$2 b=$3
pairs=${4:-4}
caps=${5:-0.15 0.5}
for cap in $caps; do
  target/release/weft-bench e2e --circuits 32 --mib 24 --threads 1 \
    --entries 4 --exits 4 --clients 4 --cpu-cap "$cap" \
    --ab-weft "$a" --weft "$b" --ab-pairs "$pairs" --no-plots --tag "$name-cap$cap"
done
