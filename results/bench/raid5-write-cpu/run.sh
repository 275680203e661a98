#!/bin/bash
# Before/after of raid5's write path, alternating the two sides ROUNDS times (default 3):
#   results/bench/raid5-write-cpu/run.sh BEFORE_CHECKOUT AFTER_CHECKOUT [ROUNDS]
# Each checkout is a git worktree of this repository at the commit to measure. Per side and
# round: engine_cpu.py (the engine's own CPU per write, no FUSE) for raid5 4 KiB and 1 MiB
# writes, then `raidlab bench engine --arch raid5` (through FUSE and the loop device, beside
# the bare pass-through and the raw loop device, in the same run). One JSON line per run in
# engine-cpu.jsonl, one JSON file per bench run, beside this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python3)}
before=$1 after=$2 rounds=${3:-3}
for round in $(seq "$rounds"); do
    for side in before after; do
        tree=$([ $side = before ] && echo "$before" || echo "$after")
        rev=$(git -C "$tree" rev-parse --short HEAD)
        for workload in "4k 20000" "1m 1000"; do
            line=$(cd "$tree" && PYTHONPATH="$tree" "$python" "$here/engine_cpu.py" raid5 $workload)
            echo "{\"side\": \"$side\", \"rev\": \"$rev\", \"round\": $round, \"run\": $line}" >> "$here/engine-cpu.jsonl"
        done
        (cd "$tree" && PYTHONPATH="$tree" "$python" -c "from raidlab.cli import main; main()" \
            bench engine --arch raid5 --runtime 10 --json) > "$here/$side-$rev-engine-raid5-r$round.json"
    done
done
