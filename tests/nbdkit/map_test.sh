#!/bin/bash
# map_test.sh PLUGIN: on a thin LUN (LBPME, LBPU, LBPWS, LBPRZ) a trim (UNMAP) and a zero that
# may trim (WRITE SAME with UNMAP) leave holes that nbdinfo --map shows (GET LBA STATUS) and that
# read as zeroes, while a zero that must not trim stays allocated; an unaligned trim leaves the
# partial blocks at its ends alone.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo nbdcopy qemu-io cmp

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 32M --blocksize=4096 --params thin_provisioning=1
nbd_start iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk/1

temp_dir WORK map
URI=$(nbd_uri)

map() { timeout 30 nbdinfo --map "$URI" | awk '{print $1, $2, $4}' | tr '\n' ' '; }
expect_map() {
  local got
  got=$(map)
  [ "$got" = "$1" ] || fail "map is '$got', expected '$1'"
}
qio() { timeout 60 qemu-io -f raw "$URI" "$@" >"$WORK/qio.out" || { cat "$WORK/qio.out"; fail "qemu-io $*"; }; }

head -c 32M /dev/urandom >"$WORK/image"
timeout 60 nbdcopy --flush "$WORK/image" "$URI"
expect_map "0 33554432 data "

qio -c 'discard 1M 2M'
qio -c 'read -P 0 1M 2M'
expect_map "0 1048576 data 1048576 2097152 hole,zero 3145728 30408704 data "

qio -c 'write -z -u 8M 1M'
qio -c 'write -z 12M 1M'
qio -c 'read -P 0 8M 1M' -c 'read -P 0 12M 1M'
expect_map "0 1048576 data 1048576 2097152 hole,zero 3145728 5242880 data 8388608 1048576 hole,zero 9437184 24117248 data "

# Unaligned trim: only the whole 4 KiB blocks inside it are deallocated; qemu-io does not align
# discards, so the plugin sees these offsets as they are.
qio -c 'discard 16386k 12k'
expect_map "0 1048576 data 1048576 2097152 hole,zero 3145728 5242880 data 8388608 1048576 hole,zero 9437184 7344128 data 16781312 8192 hole,zero 16789504 16764928 data "
dd if="$(tgt_lun_file 1 1)" bs=1024 skip=16386 count=2 status=none >"$WORK/kept-head"
dd if="$WORK/image" bs=1024 skip=16386 count=2 status=none | cmp - "$WORK/kept-head" ||
  fail "the partial block before the unaligned trim changed"
dd if="$(tgt_lun_file 1 1)" bs=1024 skip=16388 count=4 status=none | cmp - <(head -c 4096 /dev/zero) ||
  fail "the trimmed block does not read as zeroes in the backing file"
nbd_stop
echo PASS
