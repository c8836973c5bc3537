#!/usr/bin/env bash
# Relay cell crypto per cell, weft beside stock tor in the same run: a
# relay's layer on a cell passing through (tor1 and CGO) and on a cell it
# originates (CGO's rolls its keys, as every cell at an exit does), from
# weft's `cgo_per_cell_cost` measurement and from tor's own
# `src/test/bench` (cell_ops_tor1, cell_ops_cgo), built once from Debian's
# source of the tor package the other benches run. Three rounds each;
# the medians and their ratios are printed (docs/perf.md, "Relay cell
# crypto per cell").
#
#   bash bench/cell-crypto.sh
#
# TOR_BENCH_DIR (default /tmp/weft-tor-bench) keeps tor's build.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${TOR_BENCH_DIR:-/tmp/weft-tor-bench}
if [ ! -x "$work/bench" ]; then
  # Debian's source lists, next to its binary ones, if there are none.
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ \
    && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      > /etc/apt/sources.list.d/weft-deb-src.sources
  fi
  apt-get update -qq
  apt-get install -y -qq dpkg-dev build-essential pkg-config libevent-dev \
    libssl-dev zlib1g-dev > /dev/null
  rm -rf "$work/src" && mkdir -p "$work/src"
  (cd "$work/src" && apt-get source -qq tor > /dev/null)
  src=$(ls -d "$work"/src/tor-0.* | head -1)
  (cd "$src" && ./configure -q --disable-asciidoc --disable-manpage \
    --disable-html-manual --disable-zstd --disable-lzma --disable-seccomp \
    --disable-systemd --disable-libscrypt > /dev/null \
    && make -s -j"$(nproc)" src/test/bench > "$work/make.log" 2>&1)
  cp "$src/src/test/bench" "$work/bench"
  basename "$src" > "$work/version"
fi
weft=$(cargo test --release -q -p weft-crypto --lib cgo_per_cell_cost -- --ignored --nocapture 2>&1)
tor=$(for _ in 1 2 3; do "$work/bench" cell_ops_tor1 cell_ops_cgo; done)
python3 - "$weft" "$tor" "$(cat "$work/version")" <<'EOF'
import re, statistics, sys
weft, tor, version = sys.argv[1:4]
def med(pattern, text):
    v = [float(x) for x in re.findall(pattern, text)]
    if len(v) < 3:
        sys.exit(f"expected three rounds of {pattern!r}")
    return statistics.median(v)
w = {
    "tor1 passing": med(r"tor1 ([\d.]+) \(CGO", weft),
    "CGO passing": med(r"passing CGO ([\d.]+) ns/cell", weft),
    "tor1 originating": med(r"originating CGO [\d.]+, tor1 ([\d.]+)", weft),
    "CGO originating": med(r"originating CGO ([\d.]+),", weft),
}
t = {
    "tor1 passing": med(r"Outbound cells: ([\d.]+) ns", tor),
    "CGO passing": med(r"CGO outbound at relay: ([\d.]+)", tor),
    "tor1 originating": med(r"originate inbound : ([\d.]+) ns", tor),
    "CGO originating": med(r"CGO originate at relay: ([\d.]+)", tor),
}
print(f"relay cell crypto, ns per cell (median of three rounds); stock tor: {version}'s src/test/bench")
print("| layer | weft | tor | weft ÷ tor |")
print("|---|---:|---:|---:|")
for k in w:
    print(f"| {k} | {w[k]:.0f} | {t[k]:.0f} | {w[k] / t[k]:.2f} |")
print(f"weft's CGO ÷ weft's tor1, passing: {w['CGO passing'] / w['tor1 passing']:.2f}; "
      f"tor's: {t['CGO passing'] / t['tor1 passing']:.2f}")
EOF
