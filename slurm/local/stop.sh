#!/usr/bin/env bash
# Stop the cluster slurm/local/start.sh started: slurmd, slurmctld, munged, by
# the pid files under $DREAMDDP_SLURM_DIR (default /tmp/dreamddp-slurm), never
# by name. Jobs still running are killed with slurmd. Safe to run twice.
set -uo pipefail
DIR="${DREAMDDP_SLURM_DIR:-/tmp/dreamddp-slurm}"

stop_pid() {  # stop_pid <pidfile>: TERM, wait up to 10 s, then KILL
  local file="$1" pid
  [ -f "$file" ] || return 0
  pid="$(cat "$file")"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

if [ -f "$DIR/slurm.conf" ] && command -v scancel >/dev/null; then
  SLURM_CONF="$DIR/slurm.conf" timeout 5 scancel --full --state=RUNNING -u "$(id -un)" 2>/dev/null || true
fi
for pidfile in "$DIR"/slurmd*.pid; do stop_pid "$pidfile"; done  # one slurmd per node
stop_pid "$DIR/slurmctld.pid"
stop_pid "$DIR/munge/munged.pid"
echo "slurm/local/stop.sh: stopped the cluster in $DIR"
