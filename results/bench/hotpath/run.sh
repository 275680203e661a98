#!/bin/bash
# Before/after of the replay and engine hot paths, alternating the two sides ROUNDS times:
#   results/bench/hotpath/run.sh BEFORE_CHECKOUT AFTER_CHECKOUT [ROUNDS]
# Each checkout is a git worktree of this repository at the commit to measure, set up as
# `make setup` sets up a checkout (the after side with its compiled modules built:
# `pip install --no-deps -e .` in it, or `make venv`). Per side and round:
#   raidlab bench sim --requests 100000 --json   (one disk, raid5, dcd, vcraid; the after side
#                                                  with --against-python: the same replays with
#                                                  the compiled modules run from their source)
#   raidlab bench engine --arch raid0|raid5 --json   (needs root)
#   engine_cpu.py raid5 4k|1m                     (the engine's own CPU per write, no FUSE)
# Outputs beside this script: one JSON file per run, engine-cpu.jsonl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python3)}
before=$1 after=$2 rounds=${3:-2}
images=${IMAGES:-/dev/shm/raidlab-hotpath}
raidlab() { (cd "$1" && shift && PYTHONPATH="$PWD" "$python" -c "from raidlab.cli import main; main()" "$@"); }
for round in $(seq "$rounds"); do
    for side in before after; do
        tree=$([ $side = before ] && echo "$before" || echo "$after")
        rev=$(git -C "$tree" rev-parse --short HEAD)
        extra=$([ $side = after ] && echo --against-python || true)
        raidlab "$tree" bench sim --requests 100000 --arch disk --arch raid5 --arch dcd --arch vcraid $extra --json \
            > "$here/$side-$rev-sim-r$round.json"
        for arch in raid0 raid5; do
            raidlab "$tree" bench engine --arch $arch --runtime 10 --json > "$here/$side-$rev-engine-$arch-r$round.json"
        done
        for workload in "4k 20000" "1m 1000"; do
            line=$(cd "$tree" && PYTHONPATH="$tree" "$python" "$here/../raid5-write-cpu/engine_cpu.py" raid5 $workload "$images")
            echo "{\"side\": \"$side\", \"rev\": \"$rev\", \"round\": $round, \"run\": $line}" >> "$here/engine-cpu.jsonl"
        done
    done
done
