#!/usr/bin/env bash
# System packages the test suite needs, installed by name when missing (idempotent; CI runs as
# root on a clean machine). Tests that need one of these fail loudly when it is absent, so a
# missing line here shows up as a red CI rather than a silent skip.
set -euo pipefail
need=()
command -v strace >/dev/null || need+=(strace)
command -v promtool >/dev/null || need+=(prometheus)  # promtool + server: tests/test_metrics_prometheus.py
if ((${#need[@]})); then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
