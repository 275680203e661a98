#!/bin/sh
# `make demo`: two small comparisons, each with its report (raidlab.demo): DCD Table 2 in
# virtual time at the paper's trace length (its claims judged), then VC-RAID Table 2's
# PostMark "small" live at the quick size, md-raid5 vs VC-RAID scd in the lab VM (measured,
# not judged). Ends with both reports' paths.
set -eu
cd "$(dirname "$0")/.."
.venv/bin/raidlab doctor
reports=$(.venv/bin/raidlab demo)
echo
echo "reports (report.html beside each opens in a browser; the verdicts are at the top):"
for report in $reports; do
    echo "  $report"
done
