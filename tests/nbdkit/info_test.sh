#!/bin/bash
# info_test.sh PLUGIN: what nbdinfo sees matches each LUN: size, block sizes, can_* flags,
# read-only, the export list (one export per disk LUN, named by number, described from
# INQUIRY, the controller at LUN 0 left out) and the default export (URL's LUN, else the first
# disk LUN).
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 64M
tgt_lun 1 2 32M --blocksize=4096 --params thin_provisioning=1
tgt_lun 1 3 8M --params readonly=1
U=iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk

nbd_start "$U"
list=$(timeout 30 nbdinfo --list "$(nbd_uri)")
echo "$list"
names=$(sed -n 's/^export="\(.*\)":$/\1/p' <<<"$list" | tr '\n' ' ')
[ "$names" = "1 2 3 " ] || fail "exports are '$names', expected LUNs 1 2 3"
grep -q 'description: IET VIRTUAL-DISK .*LUN 2, 33554432 bytes' <<<"$list" ||
  fail "no INQUIRY description for LUN 2"

# Default export: the first disk LUN. A thick LUN with 512-byte blocks: no trim, no fast zero.
info=$(timeout 30 nbdinfo "$(nbd_uri)")
expect_info "$info" export-size "67108864 (64M)"
expect_info "$info" block_size_minimum 512
expect_info "$info" is_read_only false
expect_info "$info" can_trim false
expect_info "$info" can_fast_zero false
expect_info "$info" can_zero true
expect_info "$info" can_flush true
expect_info "$info" can_fua true
expect_info "$info" can_multi_conn true
expect_info "$info" can_cache true
expect_info "$info" is_rotational false
max=$(sed -n 's/^[[:space:]]*block_size_maximum: //p' <<<"$info")
pref=$(sed -n 's/^[[:space:]]*block_size_preferred: //p' <<<"$info")
[ "$max" -ge "$pref" ] && [ $((max & (max - 1))) -eq 0 ] || fail "block_size_maximum $max"

# Thin LUN with 4 KiB blocks: trim (LBPU), fast zero (LBPWS + LBPRZ), extents (LBPME).
info=$(timeout 30 nbdinfo "$(nbd_uri 2)")
expect_info "$info" export-size "33554432 (32M)"
expect_info "$info" block_size_minimum 4096
expect_info "$info" block_size_preferred 4096
expect_info "$info" can_trim true
expect_info "$info" can_fast_zero true
map=$(timeout 30 nbdinfo --map "$(nbd_uri 2)")
[ "$(echo $map)" = "0 33554432 3 hole,zero" ] || fail "map of the unwritten thin LUN: $map"

# Read-only LUN (write-protected in MODE SENSE).
info=$(timeout 30 nbdinfo "$(nbd_uri 3)")
expect_info "$info" is_read_only true

# An export name that is not a LUN of the target.
if timeout 30 nbdinfo "$(nbd_uri 7)" 2>/dev/null; then fail "export 7 opened"; fi
if timeout 30 nbdinfo "$(nbd_uri disk)" 2>/dev/null; then fail "export 'disk' opened"; fi
nbd_stop

# The URL's LUN is the default export.
nbd_start "$U/2"
[ "$(timeout 30 nbdinfo --size "$(nbd_uri)")" = 33554432 ] || fail "default export is not LUN 2"
nbd_stop
echo PASS
