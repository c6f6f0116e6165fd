# tgt-lib.sh: what the tgtd iSER tests share (bash library, sourced first by a test script).
# Sourcing re-runs the calling script in a network namespace of its own (bounded by
# TGT_LIB_TIMEOUT seconds, default 120), where 127.0.0.1:3260 serves TCP and iSER; there
# start_tgtd runs tgtd's iSER target through $SOFTRDMA_RUN with tests/harness/tgt.sh.
set -eu
if [ "${ISER_TEST_NETNS:-}" != 1 ]; then
  unshare_opts=-n
  [ "$(id -u)" = 0 ] || unshare_opts=-rn
  exec env ISER_TEST_NETNS=1 timeout "${TGT_LIB_TIMEOUT:-120}" unshare $unshare_opts "$0" "$@"
fi

need() {
  for p in "$@"; do
    command -v "$p" >/dev/null || { echo "FAIL: required program $p is missing" >&2; exit 1; }
  done
}

need tgtd tgtadm ip timeout
ip link set lo up
# Our own sanitized programs (iser-connect) run here too: softrdma's quarantined objects are not
# their leaks.
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")/../harness" && pwd)/lsan-softrdma.supp:print_suppressions=0"
. "$(dirname "${BASH_SOURCE[0]}")/../harness/tgt.sh"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
IQN=iqn.2026-11.org.iser-connect:softrdma
INITIATOR=iqn.2026-11.org.iser-connect:initiator
export TGT_LLD=iser TGT_ISER_INITIATOR=$INITIATOR TGT_WRAP=$SOFTRDMA_RUN

# start_tgtd LUN_SIZE_MB [LUNS]: one iSER target, tid 1, with LUNS file-backed LUNs (1..LUNS)
# whose backing files are lun_file N.
start_tgtd() {
  tgt_start
  trap 'tgt_stop; rm -rf "$WORK"' EXIT
  tgt_target 1 "$IQN"
  for lun in $(seq "${2:-1}"); do
    tgt_lun 1 "$lun" "${1}M"
  done
}

lun_file() { tgt_lun_file 1 "$1"; }
