# tgt-lib.sh: what the tgtd iSER tests share (bash library, sourced first by a test script).
# Sourcing runs the calling script again under tests/harness/iser-netns (bounded by
# TGT_LIB_TIMEOUT seconds, default 120), where 127.0.0.1:3260 serves TCP and iSER; there
# start_tgtd runs tgtd's iSER target through $SOFTRDMA_RUN with tests/harness/tgt.sh, and $WORK
# is a scratch directory removed at exit.
. "$(dirname "${BASH_SOURCE[0]}")/../harness/tgt.sh"
[ -n "${SOFTRDMA_RUN:-}" ] || fail "SOFTRDMA_RUN must name softrdma-run (CTest sets it)"
tgt_in_iser_netns "$SOFTRDMA_RUN" "${TGT_LIB_TIMEOUT:-120}" "$@"
requires timeout
temp_dir WORK softrdma
IQN=iqn.2026-11.org.iser-connect:softrdma
INITIATOR=iqn.2026-11.org.iser-connect:initiator
export TGT_LLD=iser TGT_ISER_INITIATOR=$INITIATOR TGT_WRAP=$SOFTRDMA_RUN

# start_tgtd LUN_SIZE_MB [LUNS]: one iSER target, tid 1, with LUNS file-backed LUNs (1..LUNS)
# whose backing files are lun_file N.
start_tgtd() {
  tgt_start
  tgt_target 1 "$IQN"
  for lun in $(seq "${2:-1}"); do
    tgt_lun 1 "$lun" "${1}M"
  done
}

lun_file() { tgt_lun_file 1 "$1"; }
