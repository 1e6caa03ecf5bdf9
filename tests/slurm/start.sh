#!/usr/bin/env bash
# Start a single-node Slurm cluster on this machine for tests/slurm: munged, MariaDB + slurmdbd
# (accounting: sacct), slurmctld and slurmd, without systemd or cgroups. Needs root. Idempotent: daemons
# already running (by their pid files) are kept. Clients use the printed SLURM_CONF (also in $BASE/env.sh).
#   SLM_SLURM_BASE   config, state, logs, database, pid files   (default /tmp/slm-test-slurm)
#   SLM_SLURM_DB_PORT  the private MariaDB's port on 127.0.0.1  (default 13307)
# Settings that matter for the tests: AuthInfo cred_expire=10 (a requeued job may start again after
# 10 s instead of 120), KillWait=5 (submitit ignores SIGTERM, so a cancelled or requeued job is killed
# 5 s after it instead of 30), accounting through slurmdbd (sacct knows finished and dead jobs).
set -euo pipefail
BASE="${SLM_SLURM_BASE:-/tmp/slm-test-slurm}"
DB_PORT="${SLM_SLURM_DB_PORT:-13307}"
ETC="$BASE/etc"; RUN="$BASE/run"; LOG="$BASE/log"; DB="$BASE/db"
export SLURM_CONF="$ETC/slurm.conf"
say() { echo "[slurm start] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

alive() {  # alive NAME PIDFILE: the pid file names a live process called NAME
  [ -s "$2" ] && kill -0 "$(cat "$2")" 2>/dev/null && [ "$(cat /proc/"$(cat "$2")"/comm 2>/dev/null)" = "$1" ]
}
wait_until() {  # wait_until SECONDS WHAT CMD...
  local end=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.5; done
  say "$what ready"
}
daemon() {  # daemon NAME PIDFILE LOG CMD...: start CMD in the background unless NAME already runs
  local name=$1 pidf=$2 logf=$3; shift 3
  if alive "$name" "$pidf"; then say "$name already running"; return; fi
  nohup "$@" >>"$logf" 2>&1 </dev/null &
  echo $! >"$pidf"; sleep 0.5
  kill -0 "$(cat "$pidf")" 2>/dev/null || { tail -n 20 "$logf" >&2; die "$name exited at start (log $logf)"; }
  say "$name started (pid $(cat "$pidf"))"
}

for bin in munged slurmctld slurmd sinfo slurmdbd mariadbd mariadb-install-db sacctmgr; do
  command -v "$bin" >/dev/null || die "$bin not found: run tests/slurm/install.sh"
done
mkdir -p "$ETC" "$RUN" "$LOG" "$BASE/state" "$BASE/spool"

# munge: the shared key, and the daemon unless one already answers
if [ ! -s /etc/munge/munge.key ]; then mkdir -p /etc/munge; mungekey --create --keyfile=/etc/munge/munge.key; fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key; chmod 755 /run/munge
if ! (munge -n | unmunge) >/dev/null 2>&1; then
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged
  wait_until 10 munged sh -c 'munge -n | unmunge' || die "munged does not answer"
  cp /run/munge/munged.pid "$RUN/munged.pid"   # ours: stop.sh stops it
fi

# slurm.conf: this machine as the only node, its CPUs and most of its free memory
HOST=$(hostname -s)
HW=$(slurmd -C | head -n 1)
hw() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$HW"; }
MEM=$(awk '/^MemAvailable:/{print int($2 / 1024 * 0.8)}' /proc/meminfo)
cat >"$ETC/slurm.conf" <<CONF
ClusterName=slmtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6829
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
KillWait=5
SlurmctldPort=6827
SlurmdPort=6828
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(hw CPUs) Boards=1 SocketsPerBoard=$(hw SocketsPerBoard) CoresPerSocket=$(hw CoresPerSocket) ThreadsPerCore=$(hw ThreadsPerCore) RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
echo "export SLURM_CONF=$SLURM_CONF" >"$BASE/env.sh"

# accounting: a private MariaDB and slurmdbd (slurmdbd.conf sits next to slurm.conf, mode 600)
if [ ! -d "$DB/mysql" ]; then
  mkdir -p "$DB"
  mariadb-install-db --user=root --datadir="$DB" --auth-root-authentication-method=socket --skip-test-db \
    >"$LOG/mariadb-install.log" 2>&1 || { tail "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
fi
SOCK="$RUN/mysqld.sock"
daemon mariadbd "$RUN/mariadbd.pid" "$LOG/mariadbd.out" mariadbd --no-defaults --user=root --datadir="$DB" \
  --socket="$SOCK" --pid-file="$RUN/mariadbd.own.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
  --log-error="$LOG/mariadb.err" --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900
wait_until 60 mariadbd mariadb-admin --no-defaults --socket="$SOCK" -uroot ping || die "mariadbd does not answer"
mariadb --no-defaults --socket="$SOCK" -uroot -e "
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
cat >"$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6829
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
CONF
chmod 600 "$ETC/slurmdbd.conf"
daemon slurmdbd "$RUN/slurmdbd.pid" "$LOG/slurmdbd.out" slurmdbd -D
wait_until 60 slurmdbd sacctmgr -n show cluster || die "slurmdbd does not answer (log $LOG/slurmdbd.log)"

daemon slurmctld "$RUN/slurmctld.pid" "$LOG/slurmctld.out" slurmctld -D
wait_until 30 slurmctld sh -c 'scontrol ping | grep -q UP' || die "slurmctld does not answer (log $LOG/slurmctld.log)"
daemon slurmd "$RUN/slurmd.pid" "$LOG/slurmd.out" slurmd -D

end=$(( $(date +%s) + 60 )); resumed=0
while :; do
  state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n 1)
  case "$state" in
    idle|mixed|allocated) break ;;
    *drain*|down*|fail*) [ $resumed = 1 ] || { scontrol update NodeName="$HOST" State=RESUME || true; resumed=1; } ;;
  esac
  [ "$(date +%s)" -lt "$end" ] || die "node $HOST is '$state' after 60 s (logs in $LOG)"
  sleep 0.5
done
say "cluster up: node $HOST $state; export SLURM_CONF=$SLURM_CONF"
