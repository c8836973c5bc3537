#!/usr/bin/env bash
# The README's test command: formatting, lints, unit tests, spec vectors and
# the integration tests against stock tor on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean build gains nothing from incremental state, which is gigabytes.
export CARGO_INCREMENTAL=0
bash scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo build --workspace --bins
cargo test --workspace -- --test-threads=1
