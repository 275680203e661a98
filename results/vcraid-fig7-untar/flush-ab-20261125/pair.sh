#!/bin/bash
# A/B: the engine before (main) and after (wt) 569dbb5, native runner, Fig. 7 sync quick at scale 0.05
cd /tmp/flushcmp
for i in 1 2; do
  for v in old new; do
    if [ $v = new ]; then export PYTHONPATH=/work/wt; else unset PYTHONPATH; fi
    /work/main/.venv/bin/raidlab run fig7-q05.toml --runner native --quick --only scd,mcd --results res-$v --home /tmp/flushcmp/home-$v > log-$v-$i.txt 2>&1 < /dev/null
  done
done
