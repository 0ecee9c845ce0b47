#!/bin/bash
# Watch the ten runs for at most $1 seconds; print progress every 20 s; pack them into $OUT when all have ended.
LIMIT=${1:-560}
T0=$(date +%s)
while :; do
  ALIVE=$(pgrep -f 'llm_policy_gen train' | wc -l)
  NOW=$(( $(date +%s) - T0 ))
  LINE="t+${NOW}s alive=$ALIVE"
  for S in 0 1 2 3 4 5 6 7 8 9; do
    E=/tmp/runs/FrozenLake-v1/lora8_s$S/events.jsonl
    N=$( [ -f $E ] && wc -l < $E || echo 0 )
    LINE="$LINE s$S:$N"
  done
  echo "$LINE"
  [ "$ALIVE" -eq 0 ] && break
  [ $NOW -ge $LIMIT ] && break
  sleep 20
done
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv,noheader
if [ "$(pgrep -f 'llm_policy_gen train' | wc -l)" -eq 0 ]; then
  for S in 0 1 2 3 4 5 6 7 8 9; do tail -n 3 /tmp/runs/s$S.log; done
  cd /tmp/runs && tar czf $OUT/lora_runs.tgz --exclude=checkpoint.npz code_sha versions.txt s*.log FrozenLake-v1 && ls -l $OUT
else
  tail -n 2 /tmp/runs/s0.log
fi
