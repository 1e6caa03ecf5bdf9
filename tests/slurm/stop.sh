#!/usr/bin/env bash
# Stop what tests/slurm/start.sh started (by its pid files only), after cancelling any job left.
#   --wipe   also delete $SLM_SLURM_BASE (state, logs, accounting database)
set -uo pipefail
BASE="${SLM_SLURM_BASE:-/tmp/slm-test-slurm}"
RUN="$BASE/run"
export SLURM_CONF="$BASE/etc/slurm.conf"
say() { echo "[slurm stop] $*" >&2; }

stop() {  # stop NAME PIDFILE: TERM the process the pid file names if it is NAME, KILL it after 30 s
  local name=$1 pidf=$2 pid
  [ -s "$pidf" ] || return 0
  pid=$(cat "$pidf")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$name" ]; then
    kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { say "$name ignored TERM; KILL"; kill -KILL "$pid"; }
    say "$name stopped"
  fi
  rm -f "$pidf"
}

if [ -s "$RUN/slurmctld.pid" ] && kill -0 "$(cat "$RUN/slurmctld.pid")" 2>/dev/null; then
  jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    say "cancelling jobs $jobs"
    scancel $jobs 2>/dev/null
    for _ in $(seq 40); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.5; done
  fi
fi
stop slurmd "$RUN/slurmd.pid"
stop slurmctld "$RUN/slurmctld.pid"
stop slurmdbd "$RUN/slurmdbd.pid"
stop mariadbd "$RUN/mariadbd.pid"
stop munged "$RUN/munged.pid"   # only when start.sh started it
if [ "${1:-}" = --wipe ]; then rm -rf "$BASE"; say "wiped $BASE"; fi
