#!/bin/bash
# iser_test.sh PLUGIN SOFTRDMA_RUN: the same plugin over iSER, unchanged. tgtd's iSER target and
# nbdkit both run under softrdma (RDMA between processes, no hardware) in a private network
# namespace where 127.0.0.1:3260 serves iSER; nbdinfo sees the LUN, nbdcopy round-trips a random
# image (compared with tgtd's backing file) and fio verifies random writes over 2 connections.
set -euo pipefail
if [ "${ISER_TEST_IN_NETNS:-}" != 1 ]; then
  unshare_opts=-n
  [ "$(id -u)" = 0 ] || unshare_opts=-rn
  exec env ISER_TEST_IN_NETNS=1 timeout 240 unshare $unshare_opts bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh" "$1"
SOFTRDMA_RUN=$2
[ -x "$SOFTRDMA_RUN" ] || fail "no softrdma-run at $SOFTRDMA_RUN"
need tgtd tgtadm ip nbdinfo nbdcopy fio cmp
ip link set lo up

IQN=iqn.2026-11.test:iser
INITIATOR=iqn.2026-11.test:nbdkit
TGT_DIR=$(mktemp -d /tmp/iser-tgt.XXXXXX)
export TGT_IPC_SOCKET=$TGT_DIR/ipc
"$SOFTRDMA_RUN" tgtd -f --iscsi portal=127.0.0.1:3260 --iser port=3260,pool_sz_mb=128 \
  >"$TGT_DIR/tgtd.log" 2>&1 &
TGT_PID=$!
trap tgt_stop EXIT
for i in $(seq 1 100); do
  tgtadm --op show --mode system >/dev/null 2>&1 && break
  sleep 0.1
done
grep -q "Failed to initialize RDMA" "$TGT_DIR/tgtd.log" && fail "tgtd: $(cat "$TGT_DIR/tgtd.log")"
# tgtd's RDMA CM listener (softrdma shows it as an abstract Unix socket).
for i in $(seq 1 100); do
  grep -q "@softrdma/.*/3260\$" /proc/net/unix && break
  [ "$i" -lt 100 ] || fail "tgtd has no iSER listener on port 3260"
  sleep 0.1
done
tgt_adm --lld iser --op new --mode target --tid 1 -T "$IQN"
truncate -s 32M "$TGT_DIR/lun1.img"
tgt_adm --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$TGT_DIR/lun1.img"
tgt_adm --lld iser --op bind --mode target --tid 1 -I ALL
# tgt 1.0.85's iSER target also needs the initiator name bound.
tgt_adm --lld iser --op bind --mode target --tid 1 --initiator-name "$INITIATOR"

NBD_WRAP=("$SOFTRDMA_RUN")
nbd_start -v -D iser.verbose=1 -- "iser://127.0.0.1:3260/$IQN/1" initiator="$INITIATOR"
WORK=$(mktemp -d /tmp/iser-rdma.XXXXXX)
trap 'rm -rf "$WORK"; nbd_cleanup' EXIT

[ "$(timeout 30 nbdinfo --size "$(nbd_uri)")" = 33554432 ] || fail "size over iSER"
head -c 32M /dev/urandom >"$WORK/image"
timeout 120 nbdcopy --flush "$WORK/image" "$(nbd_uri)"
cmp "$WORK/image" "$TGT_DIR/lun1.img" || fail "backing file differs after nbdcopy over iSER"
timeout 120 nbdcopy "$(nbd_uri)" "$WORK/back"
cmp "$WORK/image" "$WORK/back" || fail "image read back over iSER differs"
timeout 120 fio --name=iser --ioengine=nbd --uri="$(nbd_uri)" --rw=randwrite --bs=4k \
  --iodepth=16 --numjobs=2 --size=8M --offset_increment=8M --verify=crc32c --verify_fatal=1 \
  --do_verify=1 --output-format=terse >/dev/null || fail "fio verify over iSER"
nbd_stop
echo PASS
