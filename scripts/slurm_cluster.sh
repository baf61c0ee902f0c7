#!/usr/bin/env bash
# A throwaway single-node SLURM cluster on localhost, for CI and for trying `snakemake --profile slurm` on a laptop.
#
#   scripts/slurm_cluster.sh start    install slurm-wlm + munge if missing, write the config, start munged,
#                                     slurmctld and slurmd, wait until the node is idle (else exit 1, with the
#                                     daemons' last log lines, and stop what was started)
#   scripts/slurm_cluster.sh status   daemons, node state, queue; exit 0 only if the cluster accepts jobs
#   scripts/slurm_cluster.sh stop     stop the daemons (by PID; then by name, but only processes using this config)
#
# Runs as root (the daemons need it: slurmd starts jobs as the submitting user). Nothing is written into the
# repository. Everything lives under $MARS_SLURM_DIR (default /tmp/mars-slurm): config, munge key and socket,
# daemon logs (log/NAME.out, the previous start's in log/NAME.out.prev), PID files, slurmctld state, slurmd spool.
# The only file outside it is the symlink /etc/slurm/slurm.conf -> $MARS_SLURM_DIR/etc/slurm.conf, which the SLURM
# client commands (sbatch, srun, squeue, sinfo, scontrol) need: the Snakemake SLURM jobstep plugin strips SLURM_*
# variables (SLURM_CONF too) before its inner `srun`, so an environment variable alone is not enough. A real
# /etc/slurm/slurm.conf (not our symlink) is never touched: `start` refuses to run on such a machine. `stop` removes
# the symlink (while it exists and slurmctld is down, every SLURM command, and so every `snakemake` start, which
# loads the SLURM plugin, waits ~10 s for a controller that is not there).
#
# Settings (environment):
#   MARS_SLURM_DIR        state dir                                   (/tmp/mars-slurm)
#   MARS_SLURM_PARTITION  name of the single, default partition       (debug)
#   MARS_SLURM_WAIT       seconds to wait for the node to become idle (60)
#   MARS_SLURM_CTLD_PORT / MARS_SLURM_D_PORT   slurmctld / slurmd TCP ports on 127.0.0.1   (6817 / 6818)
set -euo pipefail

STATE_DIR=${MARS_SLURM_DIR:-/tmp/mars-slurm}
PARTITION=${MARS_SLURM_PARTITION:-debug}
WAIT_S=${MARS_SLURM_WAIT:-60}
CTLD_PORT=${MARS_SLURM_CTLD_PORT:-6817}
D_PORT=${MARS_SLURM_D_PORT:-6818}

CONF=$STATE_DIR/etc/slurm.conf
SYS_CONF=/etc/slurm/slurm.conf
RUN=$STATE_DIR/run
LOG=$STATE_DIR/log
MUNGE_DIR=$STATE_DIR/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MUNGE_KEY=$MUNGE_DIR/munge.key
DAEMONS=(munged slurmctld slurmd)
CONF_MARKER="# Written by scripts/slurm_cluster.sh"

say() { printf 'slurm_cluster: %s\n' "$*"; }
die() { printf 'slurm_cluster: ERROR: %s\n' "$*" >&2; exit 1; }

# --- install ---------------------------------------------------------------------------------------------------------
have_binaries() {
    local b
    for b in slurmctld slurmd sbatch srun squeue sinfo scontrol munged munge unmunge; do
        command -v "$b" >/dev/null 2>&1 || return 1
    done
}

install_packages() {
    have_binaries && return 0
    [ "$(id -u)" = 0 ] || die "slurm-wlm/munge are missing and installing them needs root"
    command -v apt-get >/dev/null 2>&1 || die "slurm-wlm/munge are missing and there is no apt-get to install them"
    export DEBIAN_FRONTEND=noninteractive
    local apt_opts=(-y -qq -o Dpkg::Use-Pty=0 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
                    --no-install-recommends)
    say "installing slurm-wlm and munge with apt-get (once per machine)"
    # `apt-get update` only when the package lists do not know the packages, or an install from them fails.
    if ! apt-cache show slurm-wlm munge >/dev/null 2>&1; then
        apt-get update -qq >/dev/null || die "apt-get update failed"
    fi
    if ! apt-get install "${apt_opts[@]}" slurm-wlm munge >"$LOG/apt.log" 2>&1; then
        apt-get update -qq >/dev/null || die "apt-get update failed"
        apt-get install "${apt_opts[@]}" slurm-wlm munge >"$LOG/apt.log" 2>&1 \
            || { tail -20 "$LOG/apt.log" >&2; die "apt-get install slurm-wlm munge failed (log: $LOG/apt.log)"; }
    fi
    have_binaries || die "slurm-wlm/munge installed, but some binaries are still missing from PATH"
}

# --- PIDs ------------------------------------------------------------------------------------------------------------
pid_of() { [ -s "$RUN/$1.pid" ] && cat "$RUN/$1.pid" || true; }

alive() {  # alive NAME: the recorded PID exists and is that program
    local pid; pid=$(pid_of "$1")
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}

# PIDs of processes named NAME that belong to this cluster: their command line (daemons: our config, munge socket)
# or environment (slurmstepd: SLURM_CONF=our config) mentions this cluster's state dir.
our_pids_by_name() {
    local pid
    for pid in $(pgrep -x "$1" 2>/dev/null || true); do
        { tr '\0' '\n' <"/proc/$pid/cmdline"; tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null \
            | grep -qF -- "$STATE_DIR/" && echo "$pid"
    done
    return 0
}

# start_daemon NAME CMD...: start CMD in its own session (so Ctrl-C in the caller's terminal or the end of the
# caller's process group does not reach it), stdin closed, stdout/stderr to $LOG/NAME.out, PID recorded.
start_daemon() {
    local name=$1 f; shift
    for f in "$LOG/$name.out" "$LOG/$name.log"; do [ -e "$f" ] && mv -f "$f" "$f.prev"; done  # one old run kept
    setsid "$@" </dev/null >"$LOG/$name.out" 2>&1 &
    echo $! >"$RUN/$name.pid"
}

# --- config ----------------------------------------------------------------------------------------------------------
write_munge_key() {
    # This cluster's own key (the system's /etc/munge is left alone); created once, kept across restarts.
    if [ ! -s "$MUNGE_KEY" ]; then
        say "creating munge key $MUNGE_KEY"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
        fi
    fi
    chmod 0400 "$MUNGE_KEY"
}

write_slurm_conf() {
    local node_line node cpus real_mem mem def_mem host
    # First line of `slurmd -C`: NodeName=... CPUs=... Boards=... SocketsPerBoard=... CoresPerSocket=...
    # ThreadsPerCore=... RealMemory=...
    node_line=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=') || die "\`slurmd -C\` printed no NodeName line"
    node=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node_line")
    cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")
    real_mem=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
    [ -n "$node" ] && [ -n "$cpus" ] && [ -n "$real_mem" ] || die "cannot parse \`slurmd -C\`: $node_line"
    # Declare a bit less memory than the kernel reports (5 %, at least 256 MB): if the configured RealMemory ever
    # exceeds what slurmd measures, slurmctld drains the node ("Low RealMemory") and jobs never start.
    mem=$(( real_mem - (real_mem / 20 > 256 ? real_mem / 20 : 256) ))
    [ "$mem" -gt 0 ] || mem=$real_mem
    def_mem=$(( mem / cpus ))
    node_line=$(sed "s/RealMemory=[0-9]*/RealMemory=$mem/" <<<"$node_line")
    host=$(hostname -s)

    mkdir -p "$(dirname "$CONF")"
    cat >"$CONF.tmp" <<EOF
$CONF_MARKER for a throwaway single-node cluster on localhost. Do not use elsewhere.
ClusterName=mars-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$D_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=$RUN/slurmctld.daemon.pid
SlurmdPidFile=$RUN/slurmd.daemon.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: plain /proc process tracking and CPU affinity
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SwitchType=switch/none
LaunchType=launch/slurm
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$def_mem
# no slurmdbd: sacct cannot work, so Snakemake must query job states with squeue (--slurm-status-command squeue),
# and finished jobs must stay visible to squeue long enough: MinJobAge seconds
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
# a node that went down comes back by itself once slurmd answers again
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
Waittime=0
MailProg=/bin/true
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"
    echo "$node" >"$RUN/node"
}

check_sys_conf() {  # dies unless $SYS_CONF is absent or a link that this script made
    if [ -L "$SYS_CONF" ]; then
        [ "$(readlink "$SYS_CONF")" = "$CONF" ] && return 0
        # a link left by this script for another state dir (dangling, or to a config it wrote) may be replaced
        if [ -e "$SYS_CONF" ] && ! head -1 "$SYS_CONF" | grep -q "^$CONF_MARKER"; then
            die "$SYS_CONF is a symlink to $(readlink "$SYS_CONF"), not to this cluster's $CONF; not touching it"
        fi
    elif [ -e "$SYS_CONF" ]; then
        die "$SYS_CONF exists (a real SLURM installation?); not touching it. Remove it to use this local cluster."
    fi
}

link_sys_conf() {
    check_sys_conf
    [ "$(readlink "$SYS_CONF" 2>/dev/null)" = "$CONF" ] && return 0
    mkdir -p "$(dirname "$SYS_CONF")"
    ln -sfn "$CONF" "$SYS_CONF"
}

# --- status ----------------------------------------------------------------------------------------------------------
node_state() {  # e.g. idle, mixed, allocated, down*, drained, unknown*; empty if slurmctld does not answer
    local node; node=$(cat "$RUN/node" 2>/dev/null || true)
    [ -n "$node" ] || return 0
    timeout 10 sinfo -h -N -n "$node" -o %T 2>/dev/null | head -1 || true
}

accepting_jobs() {
    alive munged && alive slurmctld && alive slurmd || return 1
    case "$(node_state)" in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac
}

munge_works() { munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

show_logs() {  # the last lines each daemon wrote (stdout/stderr: it logs there in the foreground, crashes too)
    local d
    for d in "${DAEMONS[@]}"; do
        [ -s "$LOG/$d.out" ] && { echo "----- last lines of $LOG/$d.out" >&2; tail -15 "$LOG/$d.out" >&2; }
    done
    return 0
}

# --- commands --------------------------------------------------------------------------------------------------------
cmd_start() {
    [ "$(id -u)" = 0 ] || die "run as root: slurmd and munged need it"
    check_sys_conf
    mkdir -p "$RUN" "$LOG" "$MUNGE_DIR" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
    if accepting_jobs; then
        say "already running (node $(cat "$RUN/node"): $(node_state)); nothing to do"
        return 0
    fi
    install_packages
    write_munge_key
    # (re)write the config only while slurmctld is down, so a half-running cluster keeps the config it started with
    alive slurmctld && [ -s "$CONF" ] || write_slurm_conf
    link_sys_conf

    if ! alive munged; then
        rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
        chmod 0755 "$MUNGE_DIR"  # clients of any user must reach the socket
        start_daemon munged munged --foreground --force --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCKET" \
            --pid-file="$RUN/munged.daemon.pid" --seed-file="$MUNGE_DIR/munged.seed"
        local i
        for i in $(seq 1 50); do munge_works && break; sleep 0.2; done
        munge_works || { show_logs; stop_all >/dev/null 2>&1; die "munged did not start"; }
    fi
    if ! alive slurmctld; then
        start_daemon slurmctld slurmctld -D -i -f "$CONF"
    fi
    if ! alive slurmd; then
        start_daemon slurmd slurmd -D -f "$CONF"
    fi

    say "waiting up to ${WAIT_S}s for node $(cat "$RUN/node") to be idle"
    local deadline=$(( SECONDS + WAIT_S )) state="" d
    while [ "$SECONDS" -lt "$deadline" ]; do
        for d in "${DAEMONS[@]}"; do
            alive "$d" || { show_logs; stop_all >/dev/null 2>&1; die "$d exited during start-up (logs: $LOG/)"; }
        done
        state=$(node_state)
        case "$state" in
            idle|mixed|allocated|completing)
                say "up: partition $PARTITION, node $(cat "$RUN/node") $state; config $CONF (linked from $SYS_CONF);" \
                    "logs $LOG/"
                return 0 ;;
        esac
        sleep 1
    done
    show_logs
    stop_all >/dev/null 2>&1
    die "node not idle after ${WAIT_S}s (last state: '${state:-no answer from slurmctld}'); cluster stopped again"
}

stop_all() {
    local d pid pids i
    # cancel what is still queued or running, so no job step outlives its slurmd
    if alive slurmctld && [ -n "$(timeout 10 squeue -h -o %i 2>/dev/null || true)" ]; then
        timeout 10 scancel --quiet $(timeout 10 squeue -h -o %i 2>/dev/null) 2>/dev/null || true
        for i in $(seq 1 25); do
            [ -z "$(our_pids_by_name slurmstepd)" ] && break
            sleep 0.2
        done
        say "cancelled the remaining jobs"
    fi
    # slurmd first (it may still run job steps), munged last (the others need it to say goodbye)
    for d in slurmd slurmctld munged; do
        pids="$(pid_of "$d") $(our_pids_by_name "$d")"
        pids=$(tr ' ' '\n' <<<"$pids" | grep -E '^[0-9]+$' | sort -u | tr '\n' ' ')
        [ -n "${pids// /}" ] || { rm -f "$RUN/$d.pid"; continue; }
        for pid in $pids; do
            [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$d" ] && kill -TERM "$pid" 2>/dev/null || true
        done
        for i in $(seq 1 50); do  # up to 10 s, then SIGKILL
            pids=$(for pid in $pids; do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$d" ] && echo "$pid"; done || true)
            [ -z "$pids" ] && break
            sleep 0.2
        done
        for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
        rm -f "$RUN/$d.pid"
        say "stopped $d"
    done
    # a job step (slurmstepd and its children) that survived the cancellation: kill its whole process group
    local pgid
    for pid in $(our_pids_by_name slurmstepd); do
        pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ' || true)
        if [ "$pgid" = "$pid" ]; then kill -KILL -- "-$pid" 2>/dev/null || true; fi  # only its own group, never others
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -L "$SYS_CONF" ] && [ "$(readlink "$SYS_CONF")" = "$CONF" ]; then rm -f "$SYS_CONF"; fi
    return 0
}

cmd_stop() {
    stop_all
    say "stopped (state and logs kept in $STATE_DIR)"
}

cmd_status() {
    local d ok=0
    for d in "${DAEMONS[@]}"; do
        if alive "$d"; then say "$d running, PID $(pid_of "$d")"; else say "$d not running"; ok=1; fi
    done
    if alive slurmctld; then
        timeout 10 sinfo 2>/dev/null || true
        timeout 10 squeue 2>/dev/null || true
    fi
    accepting_jobs || ok=1
    [ "$ok" = 0 ] && say "cluster accepts jobs (config $CONF)" || say "cluster is NOT accepting jobs"
    return "$ok"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
