cd /work/main
for mode in serial jobs2 local2; do
  start=$(date +%s.%N)
  for t in 2 3 4 5; do
    case $mode in
      serial) .venv/bin/raidlab run scenarios/dcd-table$t.toml --results /tmp/bench68/$mode > /dev/null 2>>/tmp/bench68/$mode.err ;;
      jobs2) .venv/bin/raidlab run scenarios/dcd-table$t.toml --results /tmp/bench68/$mode --jobs 2 > /dev/null 2>>/tmp/bench68/$mode.err ;;
      local2) .venv/bin/raidlab run scenarios/dcd-table$t.toml --results /tmp/bench68/$mode --scheduler local:2 > /dev/null 2>>/tmp/bench68/$mode.err ;;
    esac
  done
  end=$(date +%s.%N)
  echo "$mode $(echo "$end - $start" | bc)" >> /tmp/bench68/times.txt
done
echo done >> /tmp/bench68/times.txt
