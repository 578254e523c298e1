#!/usr/bin/env bash
# Starts N processes of a binary on this machine as one data-parallel run, with the variables
# torchrun would set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
# and a run id of its own (FT_RUN_ID). When one process fails, the others get FT_LAUNCH_GRACE
# seconds (default 90) to finish on their own, which they do with an error within their
# collective timeout (--comm-timeout); whatever is still there then (a stopped process) is
# killed. The exit status is the first failure's.
#   scripts/launch.sh N BINARY [ARGS...]
# Environment: MASTER_PORT (default: a free-looking port from the process id), FT_STORE_DIR
# (Gloo's rendezvous folder), CUDA_VISIBLE_DEVICES as usual. With CUDA, rank r uses GPU r.
set -uo pipefail
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N BINARY [ARGS...]  (N >= 1 processes)" >&2
  exit 2
fi
n=$1
shift
export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-$((20000 + ($$ % 20000)))}
export FT_RUN_ID=${FT_RUN_ID:-launch-$$-$(date +%s%N)}
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r "$@" &
  pids+=($!)
done
status=0
remaining=$n
watchdog=
live=("${pids[@]}")
while [ $remaining -gt 0 ]; do
  wait -n -p done_pid "${live[@]}"
  rc=$?
  remaining=$((remaining - 1))
  live=("${live[@]/$done_pid/}")
  read -ra live <<<"${live[*]}"
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then
    status=$rc
    echo "launch.sh: a process (pid $done_pid) exited with status $rc; the others have ${FT_LAUNCH_GRACE:-90} s" >&2
    (exec >/dev/null 2>&1; sleep "${FT_LAUNCH_GRACE:-90}"; kill -KILL "${pids[@]}") &
    watchdog=$!
  fi
done
if [ -n "$watchdog" ]; then
  pkill -P "$watchdog" 2>/dev/null
  kill "$watchdog" 2>/dev/null
fi
exit $status
