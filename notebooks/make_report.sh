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
out="$(realpath -m "$1")"; shift
executed="${out%.html}.ipynb"
mkdir -p "$(dirname "$out")"
papermill "$here/experiment_report.ipynb" "$executed" --cwd "$here" --log-level WARNING "$@"
jupyter nbconvert --to html --no-input --output "$(basename "$out")" --output-dir "$(dirname "$out")" "$executed"
echo "report: $out"
