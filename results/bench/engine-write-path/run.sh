#!/bin/bash
# Before/after of the engine's write path, on one machine, one after the other:
#   results/bench/engine-write-path/run.sh BEFORE_CHECKOUT AFTER_CHECKOUT
# Each checkout is a git worktree of this repository at the commit to measure; every run is
# `raidlab bench engine` (the engine volume against a bare FUSE pass-through in the same run)
# and `raidlab bench sim`, written as JSON beside this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python3)}
for side in before after; do
    tree=$1; shift || true
    rev=$(git -C "$tree" rev-parse --short HEAD)
    for arch in raid0 raid5; do
        (cd "$tree" && PYTHONPATH="$tree" "$python" -c "from raidlab.cli import main; main()" \
            bench engine --arch "$arch" --runtime 10 --json) > "$here/$side-$rev-engine-$arch.json"
    done
    (cd "$tree" && PYTHONPATH="$tree" "$python" -c "from raidlab.cli import main; main()" \
        bench sim --json) > "$here/$side-$rev-sim.json"
done
