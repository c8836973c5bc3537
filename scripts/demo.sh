#!/usr/bin/env bash
# The README's demo command: a local Tor network of stock tor plus weft on
# loopback. By default weft in each of its roles with a stock client's
# traffic through it, then the same bulk load through stock tor, weft-1 and
# weft-2 under the same CPU cap, weft's node-delay histogram, a printed
# summary and an HTML report (`weft-bench demo`; its options pass through,
# e.g. `--no-roles`). `--quick`: one circuit through weft as the middle,
# 5 MiB each way (`weft-testnet demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh demo
cargo build --release -p weft -p weft-bench -p weft-testnet --bins
if [ "${1:-}" = --quick ]; then
  shift
  exec target/release/weft-testnet demo --weft target/release/weft "$@"
fi
exec target/release/weft-bench demo --weft target/release/weft "$@"
