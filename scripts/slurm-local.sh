#!/usr/bin/env bash
# Starts (`up`) or stops (`down`) a single-node Slurm cluster on 127.0.0.1 for the
# `--executor slurm` tests and benchmark: Debian's slurm-wlm + munge, one node with 2 CPUs
# oversubscribed (many small jobs at once), process tracking without cgroups, every state,
# spool and log folder under one temporary folder.
#
#   scripts/slurm-local.sh up       # idempotent: does nothing when the cluster answers
#   scripts/slurm-local.sh down     # stops the daemons it started, removes nothing else
#   scripts/slurm-local.sh status   # exit 0 when the controller answers and the node is up
#
# Environment: DELTA_SLURM_DIR (default /tmp/delta-slurm) holds slurm.conf, the munge key,
# state, spool, logs and pid files; DELTA_SLURM_JOBS_PER_CPU (default 16) is how many jobs
# share one CPU. Needs root (the daemons run as root here); the clients (sbatch, squeue...)
# find the configuration through /etc/slurm/slurm.conf, which `up` writes.
set -euo pipefail

DIR="${DELTA_SLURM_DIR:-/tmp/delta-slurm}"
JOBS_PER_CPU="${DELTA_SLURM_JOBS_PER_CPU:-16}"
NODE=delta-node
CONF="$DIR/slurm.conf"
MUNGE_SOCKET="/run/munge/munge.socket.2"

die() { echo "slurm-local: $*" >&2; exit 1; }

need_tools() {
  for tool in slurmctld slurmd munged sbatch squeue scancel scontrol sinfo; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] ||
      die "$tool not found; install the packages first: apt-get install -y slurm-wlm munge"
  done
  [ "$(id -u)" = "0" ] || die "run as root (the daemons of this single-node cluster run as root)"
}

# True when the controller answers and the node accepts jobs.
cluster_ready() {
  scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
  local state
  state="$(sinfo -h -n "$NODE" -o '%t' 2>/dev/null | head -n1)"
  case "$state" in idle|mix|alloc|comp) return 0 ;; *) return 1 ;; esac
}

# Polls `$1` (a function) up to `$2` seconds.
wait_for() {
  local check="$1" limit="$2" waited=0
  until "$check"; do
    [ "$waited" -ge "$((limit * 5))" ] && return 1
    sleep 0.2
    waited=$((waited + 1))
  done
}

munge_ready() { munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

write_conf() {
  local cpus=2
  cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a single-node test cluster on 127.0.0.1.
ClusterName=delta-local
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmdSpoolDir=$DIR/spool/slurmd
StateSaveLocation=$DIR/state
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Quick turnarounds for tests: schedule often, kill soon after SIGTERM, forget ended jobs.
SchedulerParameters=defer_batch=0,sched_interval=2,bf_interval=2
KillWait=5
MinJobAge=60
MaxArraySize=1001
MaxJobCount=20000
InactiveLimit=0
Waittime=0
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:$JOBS_PER_CPU
EOF
}

up() {
  need_tools
  if cluster_ready; then
    echo "slurm-local: already up ($CONF)"
    return 0
  fi
  mkdir -p "$DIR"/{run,spool/slurmd,state,log,munge} /run/munge /etc/slurm
  chmod 700 "$DIR/munge"
  if ! munge_ready; then
    if [ ! -s "$DIR/munge/munge.key" ]; then
      dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
      chmod 400 "$DIR/munge/munge.key"
    fi
    munged --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCKET" \
      --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/munge/munged.seed"
    wait_for munge_ready 10 || die "munged did not start; see $DIR/log/munged.log"
  fi
  write_conf
  # The clients read the default path; a conf there that is not ours is kept aside once.
  if [ -e /etc/slurm/slurm.conf ] && ! grep -q 'scripts/slurm-local.sh' /etc/slurm/slurm.conf; then
    cp /etc/slurm/slurm.conf /etc/slurm/slurm.conf.before-delta
  fi
  cp "$CONF" /etc/slurm/slurm.conf
  stop_daemons quiet
  slurmctld -f "$CONF" -i
  slurmd -f "$CONF" -N "$NODE"
  if ! wait_for cluster_ready 30; then
    scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
    wait_for cluster_ready 15 || {
      tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
      die "the cluster did not come up; logs in $DIR/log"
    }
  fi
  echo "slurm-local: up ($CONF, node $NODE, $JOBS_PER_CPU jobs per CPU)"
}

stop_pidfile() {
  local file="$1" pid
  [ -s "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

stop_daemons() {
  stop_pidfile "$DIR/run/slurmd.pid"
  stop_pidfile "$DIR/run/slurmctld.pid"
  [ "${1:-}" = quiet ] || echo "slurm-local: slurmd and slurmctld stopped"
}

down() {
  # Jobs still running would outlive slurmd with linuxproc tracking: cancel them first.
  if scontrol ping 2>/dev/null | grep -q 'is UP'; then
    scancel --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  stop_daemons
  stop_pidfile "$DIR/run/munged.pid"
  echo "slurm-local: down (state kept in $DIR)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) cluster_ready ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
