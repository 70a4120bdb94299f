#!/usr/bin/env bash
# Install what spikestream needs to build and test on Debian (run as root; idempotent, and quick
# when everything is there). The CUDA toolkit is optional: without it the CPU backend is built.
# clang builds the libFuzzer targets (scripts/fuzz.sh); chromium renders report.html headless in
# tests/test_report.c (skipped without it).
# SPIKESTREAM_NO_APT=1 skips the package step (machines whose packages come from elsewhere).
set -euo pipefail
pkgs="build-essential cmake pkg-config libhdf5-dev libcjson-dev libcmocka-dev clang-format clang chromium"
[ "${SPIKESTREAM_NO_APT:-0}" = 1 ] && exit 0
missing=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
