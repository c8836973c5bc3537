#!/usr/bin/env bash
# The README's demo command: a local Tor network of stock tor plus weft on
# loopback, traffic through weft, and a printed summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --bins
exec target/release/weft-testnet demo --weft target/release/weft "$@"
