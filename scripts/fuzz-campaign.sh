#!/usr/bin/env bash
# Fuzzing campaign: run every cargo-fuzz target for SECS seconds (default
# 600), JOBS at a time (default: the number of cores), then minimise each
# grown corpus into fuzz/corpus/<target>/ and pack it into
# fuzz/corpus/<target>.tar.gz (committed; the unit tests in
# crates/*/tests/fuzz_corpus.rs replay the archives on stable;
# scripts/fuzz-corpus.sh). Crashes land in fuzz/artifacts/<target>/ and
# fail the script.
#
# Usage: scripts/fuzz-campaign.sh [SECS] [JOBS] [TARGET...]
# Writes bench/results/<date>-fuzz/summary.txt: executions, corpus size and
# outcome per target.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
jobs=${2:-$(nproc)}
shift 2 || shift $# || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_targets/*.rs; do
    t=$(basename "$f" .rs)
    [ "$t" = common ] || targets+=("$t")
  done
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
# cargo-fuzz passes -Z flags (sanitizers); the stable toolchain accepts
# them with RUSTC_BOOTSTRAP.
export RUSTC_BOOTSTRAP=1
out=bench/results/$(date -u +%F)-fuzz
mkdir -p "$out"
(cd fuzz && cargo fuzz build -O 2>&1 | tail -3)
# The committed archives into the directories cargo fuzz reads.
bash scripts/fuzz-corpus.sh unpack "${targets[@]}" >/dev/null

run_one() {
  local t=$1 log=$out/$1.log
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "/tmp/weft-fuzz-grown/$t"
  # Grow into a scratch directory seeded by the committed corpus.
  set +e
  (cd fuzz && cargo fuzz run -O "$t" "/tmp/weft-fuzz-grown/$t" "corpus/$t" -- \
    -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 \
    -artifact_prefix="artifacts/$t/") >"$log" 2>&1
  local rc=$?
  set -e
  local execs
  execs=$(grep -m1 "stat::number_of_executed_units" "$log" | awk '{print $2}')
  # Keep only the grown inputs that add coverage to the committed corpus.
  if (cd fuzz && cargo fuzz run -O "$t" "corpus/$t" "/tmp/weft-fuzz-grown/$t" -- -merge=1 \
      -artifact_prefix="artifacts/$t/") >>"$log" 2>&1; then :; fi
  local n
  n=$(find "fuzz/corpus/$t" -type f | wc -l)
  bash scripts/fuzz-corpus.sh pack "$t" >/dev/null
  local outcome=ok
  [ "$rc" -eq 0 ] || outcome="FAILED (exit $rc, see $log)"
  echo "$t: ${execs:-?} executions in ${secs}s, corpus $n files, $outcome" | tee -a "$out/summary.txt"
  return "$rc"
}

echo "fuzz campaign $(date -u +%FT%TZ): ${#targets[@]} targets × ${secs}s, $jobs at a time" | tee -a "$out/summary.txt"
fail=0
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || fail=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || fail=1
  running=$((running - 1))
done
exit $fail
