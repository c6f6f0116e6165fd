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
# With TGT_LLD=iser the target is tgtd's iSER target under softrdma, serving TCP discovery and
# RDMA CM on 127.0.0.1:3260 like a real portal: the script must run under
# tests/harness/iser-netns (its own network namespace, softrdma in front), and targets are also
# bound to $TGT_ISER_INITIATOR (tgt 1.0.85 admits iSER initiators only by name and address).
# TGT_WRAP, if set, is a command tgtd runs under (softrdma's own tests name softrdma-run there);
# TGT_ADDR, if set, is the portal address instead of 127.0.0.1. A script that must run under
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

# A free port for tgtd, outside the kernel's ephemeral range (free_port.py).
tgt_free_port() {
  python3 "$TGT_HARNESS_DIR/free_port.py"
}

# tgtd answers tgtadm, accepts TCP connections and, for iSER, listens for RDMA CM.
tgt_listening() {
  tgtadm --op show --mode system >/dev/null 2>&1 &&
    (exec 3<>"/dev/tcp/$TGT_ADDR/$TGT_PORT") 2>/dev/null &&
    { [ "$TGT_LLD" != iser ] || grep -q "@softrdma/.*/$TGT_PORT\$" /proc/net/unix; }
}

tgt_start() {
  requires tgtd tgtadm python3
  temp_dir TGT_DIR tgt
  export TGT_IPC_SOCKET=$TGT_DIR/ipc
  TGT_LLD=${TGT_LLD:-iscsi}
  local lld_args=()
  if [ "$TGT_LLD" = iser ]; then
    [ "${ISER_TEST_NETNS:-}" = 1 ] || fail "TGT_LLD=iser needs tests/harness/iser-netns"
    [ -n "${TGT_ISER_INITIATOR:-}" ] || fail "TGT_LLD=iser needs TGT_ISER_INITIATOR"
    TGT_PORT=3260
    lld_args=(--iser "port=$TGT_PORT,pool_sz_mb=128")
  fi
  TGT_PORT=${TGT_PORT:-$(tgt_free_port)}
  TGT_ADDR=${TGT_ADDR:-127.0.0.1}
  ${TGT_WRAP:-} tgtd -f --iscsi portal=$TGT_ADDR:$TGT_PORT "${lld_args[@]}" >"$TGT_DIR/tgtd.log" 2>&1 &
  TGT_PID=$!
  cleanup_push tgt_stop
  wait_for --pid "$TGT_PID" 10 tgt_listening ||
    fail "tgtd did not start listening on $TGT_ADDR:$TGT_PORT: $(cat "$TGT_DIR/tgtd.log")"
}

tgt_adm() {
  tgtadm "$@" || fail "tgtadm $* failed"
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

tgt_stop() {
  [ -n "${TGT_PID:-}" ] || return 0
  tgtadm --op delete --mode system >/dev/null 2>&1 || true
  wait_for 1 exited "$TGT_PID" || true
  kill -9 "$TGT_PID" 2>/dev/null || true
  wait "$TGT_PID" 2>/dev/null || true
  TGT_PID=
}
