#!/usr/bin/env bash
# Stop the Slurm daemons that up.sh started (slurmd, slurmctld, slurmdbd); with --all, MariaDB and munged too.
set -u
stop() {  # pid files: TERM each daemon, wait up to 10 s for all, then KILL what is left
  local file pid i alive pids=()
  for file in "$@"; do
    [ -s "$file" ] && pid=$(cat "$file") && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$file"
  done
  for i in $(seq 100); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  return 0
}
stop /run/slurmd.pid /run/slurmctld.pid /run/slurmdbd.pid
if [ "${1:-}" = "--all" ]; then
  mysqladmin ping >/dev/null 2>&1 && mysqladmin shutdown
  stop /run/munge/munged.pid
fi
echo "slurm: stopped"
