#!/usr/bin/env bash
# A one-node Slurm cluster on this machine for the tests marked `slurm` (make slurm): installs Slurm, munge and
# MariaDB from Debian where missing, writes slurm.conf for this machine's cores and memory with one partition, starts
# munged, MariaDB, slurmdbd (so that sacct, which submitit reads job states from, answers), slurmctld and slurmd as
# plain daemons (no systemd), and waits until the node is idle. Run as root; running it again restarts Slurm.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PARTITION=${SLURM_PARTITION:-debug}
TIMEOUT=${SLURM_UP_TIMEOUT:-60}
DBPASS=${SLURM_DBPASS:-sandboxes}

wait_for() {  # what, command...: until the command succeeds, or fail after TIMEOUT seconds
  local what=$1 i
  shift
  for i in $(seq $((TIMEOUT * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "slurm: no $what after $TIMEOUT s (logs in /var/log/slurm)" >&2
  return 1
}

missing=()
for binary in slurmctld slurmd slurmdbd sbatch sacct munged mariadbd; do
  command -v "$binary" >/dev/null || missing+=("$binary")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm: installing slurmctld slurmd slurm-client slurmdbd munge mariadb-server (missing: ${missing[*]})"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server; } >/tmp/sandboxes-slurm-apt.log 2>&1; then
    tail -5 /tmp/sandboxes-slurm-apt.log >&2
    echo "slurm: could not install the packages (log: /tmp/sandboxes-slurm-apt.log)" >&2
    exit 1
  fi
fi

if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 755 /run/munge
  su -s /bin/sh munge -c "/usr/sbin/munged --force"
  wait_for munged sh -c 'munge -n | unmunge'
fi

if ! mysqladmin ping >/dev/null 2>&1; then
  install -d -o mysql -g mysql /run/mysqld
  setsid mysqld_safe --user=mysql >/dev/null 2>&1 </dev/null &
  wait_for MariaDB mysqladmin ping
fi
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
  ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

HOST=$(hostname -s)
# this machine as slurmd sees it: CPUs, boards, sockets, cores, threads, memory (MB; 95 % of it offered)
read -r CPUS BOARDS SOCKETS CORES THREADS MEMORY < <(slurmd -C | head -1 | sed -E 's/.*CPUs=([0-9]+) Boards=([0-9]+) '\
'SocketsPerBoard=([0-9]+) CoresPerSocket=([0-9]+) ThreadsPerCore=([0-9]+) RealMemory=([0-9]+).*/\1 \2 \3 \4 \5 \6/')
install -d -o slurm -g slurm /var/spool/slurmctld /var/log/slurm
install -d /var/spool/slurmd
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=sandboxes
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MpiDefault=none
MailProg=/bin/true
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS Boards=$BOARDS SocketsPerBoard=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$((MEMORY * 95 / 100)) State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
CONF
chown slurm:slurm /etc/slurm/slurmdbd.conf
chmod 600 /etc/slurm/slurmdbd.conf

"$HERE/down.sh" >/dev/null
# job ids restart with slurmctld's state and sacct reads them from the database: the two go together, so state of
# another cluster (or none) starts both afresh, and a restart of this one keeps both
if [ "$(cat /var/spool/slurmctld/clustername 2>/dev/null)" != sandboxes ]; then
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
  mysql -e "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;"
fi
slurmdbd
wait_for slurmdbd sacctmgr -n show cluster
slurmctld
slurmd
wait_for "idle node" sh -c "sinfo -h -n $HOST -o %T | grep -qx idle"
wait_for sacct sacct -n -X -S now
echo "slurm: up, $(sinfo -h -o '%P %D node(s) %T')"
