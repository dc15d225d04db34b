#!/usr/bin/env bash
# System packages the test suite needs, installed by name when missing (idempotent; CI runs as
# root on a clean machine). Tests that need one of these fail loudly when it is absent, so a
# missing line here shows up as a red CI rather than a silent skip.
set -euo pipefail
need=()
command -v strace >/dev/null || need+=(strace)
# the job service's store tests run against a throwaway PostgreSQL server (initdb + postgres)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
# the kernel extension's browser test drives Debian's chromium through Playwright
[ -x /usr/bin/chromium ] || need+=(chromium)
# promtool and a Prometheus server: tests/test_metrics_*.py check the rules and scrape the service
command -v promtool >/dev/null || need+=(prometheus)
# the hub tests (and `labhive up`) run JupyterHub's proxy, configurable-http-proxy, from npm
command -v npm >/dev/null || need+=(npm)
# the Slurm executor's tests bring up a real Slurm (slurmctld + a slurmd per namespaced node)
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
# podman with runc (crun refuses cgroup v1/hybrid hosts) runs jobs that name an image;
# mmdebstrap builds images from Debian packages; busybox-static makes the tiny test image
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
# `make native` compiles the simulator's hot modules with mypyc: a C compiler and Python's headers
command -v gcc >/dev/null || need+=(gcc)
python3 -c 'import sys, sysconfig, pathlib
sys.exit(not (pathlib.Path(sysconfig.get_paths()["include"]) / "Python.h").exists())' ||
    need+=(python3-dev)
if ((${#need[@]})); then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if ! command -v configurable-http-proxy >/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo npm install -g --no-fund --no-audit configurable-http-proxy
fi
