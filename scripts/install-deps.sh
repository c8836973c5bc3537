#!/usr/bin/env bash
# Install what weft's tests need on a fresh Debian machine: stock tor (the
# reference relay/authority/client), OpenSSL headers and the tests' tools.
# `install-deps.sh demo`: only what the demo needs (tor, the build's
# tools, python3 with matplotlib for its plots). Idempotent.
set -euo pipefail
mode="${1:-tests}"
need=()
command -v tor >/dev/null 2>&1 || need+=(tor)
command -v tor-gencert >/dev/null 2>&1 || need+=(tor)
# C's GeoIP files (the statistics' tests read them; tor only recommends them).
dpkg -s tor-geoipdb >/dev/null 2>&1 || need+=(tor-geoipdb)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
dpkg -s pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# openssl-src (the default vendored-openssl feature) builds OpenSSL with perl and make.
dpkg -s perl >/dev/null 2>&1 || need+=(perl)
dpkg -s make >/dev/null 2>&1 || need+=(make)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ "$mode" != demo ]; then
  # The ControlPort tests drive nyx in a terminal.
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  # The Debian package test installs the .deb into a debootstrapped bookworm.
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
fi
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages "$@"
}
# The demo's and the benches' plots (and the demo report's test).
python3 -c 'import matplotlib' >/dev/null 2>&1 || pip_install matplotlib
if [ "$mode" = demo ]; then
  tor --version | head -1
  exit 0
fi
# stem and nyx (the ControlPort tests; PyPI's releases, pinned).
if ! python3 -c 'import stem, nyx' >/dev/null 2>&1; then
  pip_install stem==1.8.2 nyx==2.1.0
fi
# cargo-deb builds the Debian package (pinned; crates.io).
if ! cargo deb --version >/dev/null 2>&1; then
  cargo install --locked -q cargo-deb --version 3.8.0
fi
tor --version | head -1
