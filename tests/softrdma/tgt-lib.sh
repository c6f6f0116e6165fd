# Shared helpers for the tgtd iSER tests: sourced inside a private network namespace.
# Needs SOFTRDMA_RUN; starts tgtd under softrdma with a private control port and stops it on exit.
set -eu

need() {
  for p in "$@"; do
    command -v "$p" >/dev/null || { echo "FAIL: required program $p is missing" >&2; exit 1; }
  done
}

need tgtd tgtadm ip timeout
ip link set lo up
WORK=$(mktemp -d)
CTL=$((1000 + $$ % 30000))  # tgtd control port: tgtadm takes at most 32767
TGTD_PID=
IQN=iqn.2026-11.org.iser-connect:softrdma
INITIATOR=iqn.2026-11.org.iser-connect:initiator

stop_tgtd() {
  if [ -n "$TGTD_PID" ]; then
    tgtadm -C "$CTL" --op delete --mode system --force >/dev/null 2>&1 || true
    sleep 0.2
    kill -KILL "$TGTD_PID" 2>/dev/null || true
    wait "$TGTD_PID" 2>/dev/null || true
    TGTD_PID=
  fi
  rm -rf "$WORK"
}
trap stop_tgtd EXIT

tadm() { tgtadm -C "$CTL" --lld iser "$@"; }

# start_tgtd LUN_SIZE_MB [LUNS]: one iSER target with LUNS file-backed LUNs (1..LUNS).
start_tgtd() {
  "$SOFTRDMA_RUN" tgtd -f -C "$CTL" --iscsi portal=127.0.0.1:3260 --iser port=3260,pool_sz_mb=128 \
    >"$WORK/tgtd.log" 2>&1 &
  TGTD_PID=$!
  for _ in $(seq 50); do
    tgtadm -C "$CTL" --op show --mode system >/dev/null 2>&1 && break
    sleep 0.1
  done
  tadm --op new --mode target --tid 1 -T "$IQN"
  for lun in $(seq "${2:-1}"); do
    truncate -s "${1}M" "$WORK/lun$lun.img"
    tadm --op new --mode logicalunit --tid 1 --lun "$lun" -b "$WORK/lun$lun.img"
  done
  tadm --op bind --mode target --tid 1 -I ALL
  # tgt 1.0.85's iSER target also needs the initiator name bound (fixed upstream later).
  tadm --op bind --mode target --tid 1 --initiator-name "$INITIATOR"
}
