#!/usr/bin/env bash
# Install what weft's demo and tests need on a fresh Debian machine: stock tor
# (the reference relay/authority/client) and OpenSSL headers. Idempotent.
set -euo pipefail
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
# The ControlPort tests drive nyx in a terminal.
command -v tmux >/dev/null 2>&1 || need+=(tmux)
# The Debian package test installs the .deb into a debootstrapped bookworm.
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# stem and nyx (the ControlPort tests; PyPI's releases, pinned).
if ! python3 -c 'import stem, nyx' >/dev/null 2>&1; then
  python3 -m pip install -q stem==1.8.2 nyx==2.1.0 2>/dev/null \
    || python3 -m pip install -q --break-system-packages stem==1.8.2 nyx==2.1.0
fi
# cargo-deb builds the Debian package (pinned; crates.io).
if ! cargo deb --version >/dev/null 2>&1; then
  cargo install --locked -q cargo-deb --version 3.8.0
fi
tor --version | head -1
