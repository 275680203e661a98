#!/bin/sh
# The replay's speed on both schedulers, in one run (see NOTES.md). From the repository:
#   PYTHON=.venv/bin/python results/bench/sim-kernel/run.sh
set -e
here=$(dirname "$0")
py=${PYTHON:-python3}
$py -c 'from raidlab.cli import main; import sys; sys.exit(main())' bench sim --requests 100000 --json > "$here/bench-sim.json"
$py "$here/passes.py" 200000 > "$here/passes.jsonl"
$py "$here/where.py" 20000 disk raid5 dcd vcraid > "$here/where.jsonl"
