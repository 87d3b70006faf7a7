#!/usr/bin/env bash
# Start a private SLURM cluster on this host (for tests and demos): one node, or
# several slurmd daemons on this one host posing as nodes.
#
#   slurm/local/start.sh            # prints: export SLURM_CONF=...; source it or use env.sh
#   DREAMDDP_SLURM_NODES=2 slurm/local/start.sh   # two nodes, half of the CPUs and memory each
#   source "${DREAMDDP_SLURM_DIR:-/tmp/dreamddp-slurm}/env.sh"; sinfo
#   slurm/local/stop.sh
#
# Everything lives under $DREAMDDP_SLURM_DIR (default /tmp/dreamddp-slurm): a
# fresh munge key and socket, slurm.conf, state, spool, logs and pid files; no
# system file is touched and no service manager is needed. The one node is
# this host with the CPU count and memory that `slurmd -C` measures, so SLURM
# never over-commits it. With DREAMDDP_SLURM_NODES=N > 1 the nodes are named
# <host>-n1 .. <host>-nN, all at 127.0.0.1 (NodeAddr; a job reaches its first node
# by that address, as slurm/dreamddp.sbatch does), each with 1/N of the CPUs and
# memory. No accounting daemon (sacct is unavailable; submitit does not need it).
# Ports: $DREAMDDP_SLURM_PORT (slurmctld, default 6817), +1 (slurmd), +1+i (slurmd of node i).
# Requeued jobs may start again 20 s after the requeue (cred_expire), not 120 s.
# Needs root (slurmd starts job steps as the submitting user). Exit status 2 on a
# missing prerequisite, 1 when the node does not become idle within 30 s.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"

DIR="${DREAMDDP_SLURM_DIR:-/tmp/dreamddp-slurm}"
PORT="${DREAMDDP_SLURM_PORT:-6817}"
NODES="${DREAMDDP_SLURM_NODES:-1}"
die() { echo "slurm/local/start.sh: error: $*" >&2; exit "${2:-2}"; }

[ "$(id -u)" = 0 ] || die "needs root (slurmd runs job steps as other users)"
for cmd in munged slurmctld slurmd sinfo; do
  command -v "$cmd" >/dev/null || die "$cmd not found; run slurm/local/install.sh"
done
if [ -f "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
  die "a cluster is already running from $DIR (slurm/local/stop.sh first)"
fi

rm -rf "$DIR"
mkdir -p "$DIR"/{munge,state,spool,log}
chmod 700 "$DIR/munge"

# --- munge: own key, socket and pid file, so a system munged is never disturbed
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
  --seed-file="$DIR/munge/munge.seed"

# --- slurm.conf: this host as the only node, with what slurmd measures here
node_line="$(slurmd -C | head -1)"                      # NodeName=<host> CPUs=... RealMemory=...
node="$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$node_line")"
hw="$(sed -E 's/^NodeName=[^ ]+ //' <<<"$node_line")"
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "DREAMDDP_SLURM_NODES=$NODES: must be a whole number >= 1"
if [ "$NODES" = 1 ]; then
  names=("$node")
  node_lines="NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN"
  partition_nodes="$node"
else
  cpus="$(grep -oE 'CPUs=[0-9]+' <<<"$hw" | cut -d= -f2)"
  mem="$(grep -oE 'RealMemory=[0-9]+' <<<"$hw" | cut -d= -f2)"
  [ "$cpus" -ge "$NODES" ] || die "DREAMDDP_SLURM_NODES=$NODES: this host has $cpus CPUs, one per node at least"
  names=() node_lines=""
  for i in $(seq 1 "$NODES"); do  # each slurmd: its own port, spool and pid file (%n), a share of the host
    names+=("$node-n$i")
    node_lines+="NodeName=$node-n$i NodeHostname=$node NodeAddr=127.0.0.1 Port=$((PORT + 1 + i)) CPUs=$((cpus / NODES)) RealMemory=$((mem / NODES)) State=UNKNOWN"$'\n'
  done
  partition_nodes="$(IFS=,; echo "${names[*]}")"
fi
cat > "$DIR/slurm.conf" <<CONF
# Written by slurm/local/start.sh: a private cluster on this host, no accounting.
ClusterName=dreamddp-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=20
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
$node_lines
PartitionName=debug Nodes=$partition_nodes Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$DIR/slurm.conf"
echo "export SLURM_CONF=$SLURM_CONF" > "$DIR/env.sh"

# --- daemons in the foreground mode (-D) behind setsid, so $! is the daemon's own pid
setsid slurmctld -D -c -f "$SLURM_CONF" >>"$DIR/log/slurmctld.out" 2>&1 < /dev/null &
echo $! > "$DIR/slurmctld.pid"
for name in "${names[@]}"; do
  setsid slurmd -D -f "$SLURM_CONF" -N "$name" >>"$DIR/log/slurmd-$name.out" 2>&1 < /dev/null &
  echo $! > "$DIR/slurmd-$name.pid"
done

for _ in $(seq 1 150); do
  state="$(sinfo -h -o %t 2>/dev/null | sort -u | tr '\n' ' ' || true)"
  if [ "$state" = "idle " ]; then
    echo "slurm/local/start.sh: ${#names[@]} node(s) ${partition_nodes} idle ($(sinfo -h -N -o '%N CPUs=%c' | head -1 | cut -d' ' -f2) each); export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
echo "slurm/local/start.sh: nodes ${partition_nodes} not idle after 30 s (states '${state:-none}'); logs in $DIR/log" >&2
tail -n 5 "$DIR"/log/*.log >&2 || true
exit 1
