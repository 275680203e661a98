#!/bin/sh
# `make demo`: the default small comparison (VC-RAID Table 2's PostMark "small" at the quick
# size, md-raid5 vs VC-RAID scd, in the lab VM), then its report; ends with the report's path.
set -eu
cd "$(dirname "$0")/.."
.venv/bin/raidlab doctor
report=$(.venv/bin/raidlab demo)
echo
echo "report: $report"
