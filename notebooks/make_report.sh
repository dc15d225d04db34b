#!/usr/bin/env bash
# One command, one HTML report: execute experiment_report.ipynb with papermill (any -p NAME VALUE
# parameters after the output file), then render it with nbconvert, code cells hidden.
#   bash notebooks/make_report.sh report.html -p policies fifo,hived -p jobs 300
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 OUT.html [papermill options, e.g. -p jobs 300 -p policies fifo,hived]" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
# papermill and nbconvert live in the checkout's venv (make up / make test create it): use it
# when they are not on PATH, so no one has to activate it first
venv_bin="$(dirname "$here")/.venv/bin"
if ! command -v papermill >/dev/null 2>&1 && [ -x "$venv_bin/papermill" ]; then
    PATH="$venv_bin:$PATH"
fi
if ! command -v papermill >/dev/null 2>&1; then
    echo "$0: papermill not found: run 'make up' (it creates .venv) or pip install -e '.[dev]'" >&2
    exit 2
fi
out="$(realpath -m "$1")"; shift
executed="${out%.html}.ipynb"
mkdir -p "$(dirname "$out")"
papermill "$here/experiment_report.ipynb" "$executed" --cwd "$here" --log-level WARNING "$@"
jupyter nbconvert --to html --no-input --output "$(basename "$out")" --output-dir "$(dirname "$out")" "$executed"
echo "report: $out"
