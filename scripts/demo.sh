#!/bin/sh
# `make demo`: a small default run that ends with the path of its report.
set -eu
cd "$(dirname "$0")/.."
.venv/bin/raidlab doctor
report=$(.venv/bin/raidlab demo)
echo
echo "report: $report"
