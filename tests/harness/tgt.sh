# tgt.sh: start and configure a private, unprivileged tgtd for a test (bash library).
#
#   . tests/harness/tgt.sh
#   tgt_start                     # tgtd on 127.0.0.1:$TGT_PORT, IPC socket in $TGT_DIR
#   tgt_target 1 iqn.2026-11.test:disk          # target tid 1, bound to ALL initiators
#   tgt_lun 1 1 64M [--blocksize=4096] [--params thin_provisioning=1] [--bstype null]
#   tgt_chap 1 user secret [target_user target_secret]
#   ... run the test against iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk/1
#   tgt_stop                      # also on the cleanup stack (functions.sh) tgt_start pushes to
#
# Restarts, for recovery tests: tgt.sh remembers every tgtadm step of tgt_target, tgt_lun and
# tgt_chap, so that
#   tgt_kill                      # SIGKILL (tgtd ignores SIGTERM), returns once the port is free
#   tgt_restart                   # tgtd again on the same port, same targets, LUNs (same backing
#                                 # files, data kept) and CHAP accounts
#   tgt_mirror                    # a second tgtd on $TGT_MIRROR_PORT serving the same targets and
#                                 # backing files: a second portal of each target (TCP only)
#
# With TGT_LLD=iser the target is tgtd's iSER target under softrdma, serving TCP discovery and
# RDMA CM on 127.0.0.1:3260 like a real portal: the script must run under
# tests/harness/iser-netns (its own network namespace, softrdma in front), and targets are also
# bound to $TGT_ISER_INITIATOR (tgt 1.0.85 admits iSER initiators only by name and address).
# TGT_WRAP, if set, is a command tgtd runs under (softrdma's own tests name softrdma-run there);
# TGT_ADDR, if set, is the portal address instead of 127.0.0.1 (an IPv6 one without brackets,
# with its zone if link-local: fe80::1%veth0). A script that must run under
# iser-netns and is not started there calls tgt_in_iser_netns first.
#
# Every step fails loudly: a missing tgtd or a tgtadm error aborts the calling script. Each
# fixture has its own directory, socket and port, so tests can run in parallel.

TGT_HARNESS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$TGT_HARNESS_DIR/functions.sh"

# tgt_in_iser_netns SOFTRDMA_RUN SECONDS ARGS...: unless it already runs there, runs the calling
# script again with ARGS under iser-netns (bash, under SOFTRDMA_RUN), bounded by SECONDS, in
# place of this process.
tgt_in_iser_netns() {
  [ "${ISER_TEST_NETNS:-}" != 1 ] || return 0
  local softrdma_run=$1 seconds=$2
  shift 2
  exec timeout "$seconds" "$TGT_HARNESS_DIR/iser-netns" "$softrdma_run" bash "$0" "$@"
}

# A free port for tgtd, outside the kernel's ephemeral range (free_port.py). Checked here, not
# in tgt_start: an iSER fixture has its port (3260), and scripts/demo runs without python3.
tgt_free_port() {
  requires python3
  python3 "$TGT_HARNESS_DIR/free_port.py"
}

# tgt_listening [PORT IPC_SOCKET]: that tgtd (default: the fixture's) answers tgtadm, accepts TCP
# connections and, for iSER, listens for RDMA CM.
tgt_listening() {
  local port=${1:-$TGT_PORT} ipc=${2:-$TGT_IPC_SOCKET}
  TGT_IPC_SOCKET=$ipc tgtadm --op show --mode system >/dev/null 2>&1 &&
    (exec 3<>"/dev/tcp/$TGT_ADDR/$port") 2>/dev/null &&
    { [ "$TGT_LLD" != iser ] || grep -q "@softrdma/.*/$port\$" /proc/net/unix; }
}

# Nothing listens on $TGT_ADDR:PORT any more, neither TCP nor (iSER) softrdma's RDMA CM.
tgt_port_free() {
  [ -z "$(ss -Hltn "src $TGT_ADDR:$1")" ] &&
    { [ "$TGT_LLD" != iser ] || ! grep -q "@softrdma/.*/$1\$" /proc/net/unix; }
}

tgt_start() {
  requires tgtd tgtadm ss
  temp_dir TGT_DIR tgt
  export TGT_IPC_SOCKET=$TGT_DIR/ipc
  TGT_LLD=${TGT_LLD:-iscsi}
  if [ "$TGT_LLD" = iser ]; then
    [ "${ISER_TEST_NETNS:-}" = 1 ] || fail "TGT_LLD=iser needs tests/harness/iser-netns"
    [ -n "${TGT_ISER_INITIATOR:-}" ] || fail "TGT_LLD=iser needs TGT_ISER_INITIATOR"
    TGT_PORT=3260
  fi
  TGT_PORT=${TGT_PORT:-$(tgt_free_port)}
  TGT_ADDR=${TGT_ADDR:-127.0.0.1}
  TGT_STEPS=()
  TGT_PID=
  cleanup_push tgt_stop
  tgt_launch "$TGT_PORT" "$TGT_IPC_SOCKET" "$TGT_DIR/tgtd.log"
  TGT_PID=$TGT_LAUNCHED
}

# tgt_launch PORT IPC_SOCKET LOG: a tgtd on $TGT_ADDR:PORT, controlled through IPC_SOCKET, its
# output appended to LOG; returns once it listens, with its pid in TGT_LAUNCHED.
tgt_launch() {
  local port=$1 ipc=$2 log=$3 lld_args=() addr=$TGT_ADDR
  [ "$TGT_LLD" != iser ] || lld_args=(--iser "port=$port,pool_sz_mb=128")
  [[ $addr != *:* ]] || addr="[$addr]"
  TGT_IPC_SOCKET=$ipc ${TGT_WRAP:-} tgtd -f --iscsi "portal=$addr:$port" "${lld_args[@]}" \
    >>"$log" 2>&1 &
  TGT_LAUNCHED=$!
  wait_for --pid "$TGT_LAUNCHED" 10 tgt_listening "$port" "$ipc" ||
    fail "tgtd did not start listening on $TGT_ADDR:$port: $(cat "$log")"
}

# tgt_adm ARGS...: tgtadm ARGS on the fixture's tgtd, remembered for tgt_restart and tgt_mirror.
tgt_adm() {
  tgtadm "$@" || fail "tgtadm $* failed"
  local step
  printf -v step '%q ' "$@"
  TGT_STEPS+=("$step")
}

# tgt_replay IPC_SOCKET: every remembered step again, on the tgtd behind IPC_SOCKET, while it
# refuses connections (system state offline): an initiator that logs in meanwhile finds either
# no target or the whole configuration, never a target without its LUNs.
tgt_replay() {
  local step
  TGT_IPC_SOCKET=$1 tgtadm --op update --mode sys --name State -v offline || fail "tgtd offline"
  for step in "${TGT_STEPS[@]}"; do
    eval "TGT_IPC_SOCKET=\$1 tgtadm $step" || fail "tgtadm $step failed (replaying)"
  done
  TGT_IPC_SOCKET=$1 tgtadm --op update --mode sys --name State -v ready || fail "tgtd ready"
}

tgt_target() {
  local tid=$1 iqn=$2
  tgt_adm --lld "$TGT_LLD" --op new --mode target --tid "$tid" -T "$iqn"
  tgt_adm --lld "$TGT_LLD" --op bind --mode target --tid "$tid" -I ALL
  if [ "$TGT_LLD" = iser ]; then
    tgt_adm --lld iser --op bind --mode target --tid "$tid" --initiator-name "$TGT_ISER_INITIATOR"
  fi
}

# tgt_lun TID LUN SIZE [tgtadm options...]: backing file $TGT_DIR/lun-TID-LUN.img of SIZE.
# "--params P" is applied in a separate update (tgt 1.0.85 refuses it when creating a LUN).
tgt_lun() {
  local tid=$1 lun=$2 size=$3
  shift 3
  local img=$TGT_DIR/lun-$tid-$lun.img
  local create=() params=
  while [ $# -gt 0 ]; do
    if [ "$1" = --params ]; then
      params=$2
      shift 2
    else
      create+=("$1")
      shift
    fi
  done
  truncate -s "$size" "$img"
  tgt_adm --lld "$TGT_LLD" --op new --mode logicalunit --tid "$tid" --lun "$lun" -b "$img" "${create[@]}"
  if [ -n "$params" ]; then
    tgt_adm --lld "$TGT_LLD" --op update --mode logicalunit --tid "$tid" --lun "$lun" --params "$params"
  fi
}

tgt_lun_file() { echo "$TGT_DIR/lun-$1-$2.img"; }

# tgt_chap TID USER SECRET [TARGET_USER TARGET_SECRET]
tgt_chap() {
  local tid=$1
  tgt_adm --lld "$TGT_LLD" --op new --mode account --user "$2" --password "$3"
  tgt_adm --lld "$TGT_LLD" --op bind --mode account --tid "$tid" --user "$2"
  if [ $# -ge 5 ]; then
    tgt_adm --lld "$TGT_LLD" --op new --mode account --user "$4" --password "$5"
    tgt_adm --lld "$TGT_LLD" --op bind --mode account --tid "$tid" --user "$4" --outgoing
  fi
}

# tgt_halt PID IPC_SOCKET: asks that tgtd to exit (tgt_stop), kills it if it does not.
tgt_halt() {
  TGT_IPC_SOCKET=$2 tgtadm --op delete --mode system >/dev/null 2>&1 || true
  wait_for 1 exited "$1" || true
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

tgt_stop() {
  [ -n "${TGT_PID:-}" ] || return 0
  tgt_halt "$TGT_PID" "$TGT_IPC_SOCKET"
  TGT_PID=
}

# tgt_kill: the fixture's tgtd dies at once, as in a crash: its connections are reset, nothing
# is logged out. Returns once nothing listens on the port.
tgt_kill() {
  [ -n "${TGT_PID:-}" ] || fail "tgt_kill: no tgtd running"
  kill -KILL "$TGT_PID"
  wait "$TGT_PID" 2>/dev/null || true
  TGT_PID=
  wait_for 10 tgt_port_free "$TGT_PORT" ||
    fail "$TGT_ADDR:$TGT_PORT is still in use 10 s after tgtd was killed"
}

# tgt_restart: after tgt_kill, tgtd again on the same port with every remembered step replayed.
# The portal listens a moment before the targets exist, as with a real restart (tgt_replay).
tgt_restart() {
  [ -z "${TGT_PID:-}" ] || fail "tgt_restart: tgtd $TGT_PID is still running"
  tgt_launch "$TGT_PORT" "$TGT_IPC_SOCKET" "$TGT_DIR/tgtd.log"
  TGT_PID=$TGT_LAUNCHED
  tgt_replay "$TGT_IPC_SOCKET"
}

# tgt_mirror: a second tgtd on $TGT_MIRROR_PORT (pid $TGT_MIRROR_PID) with every step replayed:
# the same IQNs on the same backing files, i.e. a second portal of each target. Call it once the
# fixture is configured; stopped at exit.
tgt_mirror() {
  [ "$TGT_LLD" != iser ] || fail "tgt_mirror serves TCP only"
  TGT_MIRROR_PORT=$(tgt_free_port)
  TGT_MIRROR_IPC=$TGT_DIR/ipc-mirror
  TGT_MIRROR_PID=
  cleanup_push tgt_mirror_stop
  tgt_launch "$TGT_MIRROR_PORT" "$TGT_MIRROR_IPC" "$TGT_DIR/tgtd-mirror.log"
  TGT_MIRROR_PID=$TGT_LAUNCHED
  tgt_replay "$TGT_MIRROR_IPC"
}

tgt_mirror_stop() {
  [ -n "${TGT_MIRROR_PID:-}" ] || return 0
  tgt_halt "$TGT_MIRROR_PID" "$TGT_MIRROR_IPC"
  TGT_MIRROR_PID=
}
