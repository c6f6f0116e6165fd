#!/bin/bash
# portal_test.sh PLUGIN [SOFTRDMA_RUN]: `nbdkit iser iscsi://PORTAL`, a URL without a target, serves every disk
# LUN of every target the portal reports as an export named TARGET-IQN/LUN. Two targets (one
# with two LUNs): nbdinfo --list shows the three exports with their INQUIRY descriptions; the
# default export is the first; sessions are opened when first needed, one per target however
# many connections use it; nbdcopy copies one export out equal to its backing file and writes
# another whose backing file and read-back are equal to the image; unknown export names fail
# clearly; an unreachable portal stops nbdkit at start-up. With SOFTRDMA_RUN the same over iSER
# (iser:// URL, tgtd's iSER target; the discovery itself runs over TCP), in the private network
# namespace of tests/harness/iser-netns.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
SCHEME=iscsi
PARAMS=()
if [ $# -ge 2 ]; then
  tgt_in_iser_netns "$2" 240 "$@"
  export TGT_LLD=iser TGT_ISER_INITIATOR=iqn.2026-11.test:nbdkit-portal
  SCHEME=iser
  PARAMS=(initiator="$TGT_ISER_INITIATOR")
fi
requires nbdinfo nbdcopy cmp

A=iqn.2026-11.test:alpha
B=iqn.2026-11.test:beta
tgt_start
tgt_target 1 $A
tgt_lun 1 1 16M
tgt_lun 1 2 8M --blocksize=4096
tgt_target 2 $B
tgt_lun 2 1 12M
temp_dir WORK portal
head -c 8M /dev/urandom >"$WORK/alpha2"
dd if="$WORK/alpha2" of="$(tgt_lun_file 1 2)" conv=notrunc status=none

# sessions TID: how many I_T nexuses (sessions) tgtd has for target TID.
sessions() {
  tgtadm --lld "$TGT_LLD" --op show --mode target |
    awk -v tid="$1" '/^Target [0-9]+:/ { t = ($2 == tid ":") } t && /I_T nexus:/ { n++ }
                     END { print n + 0 }'
}
# expect_sessions A B WHEN: tgtd counts A sessions on alpha and B on beta, within 10 s (tgtd's
# iSER target ends the I_T nexus of a logged-out session a moment after the logout).
sessions_are() { [ "$(sessions 1) $(sessions 2)" = "$1 $2" ]; }
expect_sessions() {
  wait_for 10 sessions_are "$1" "$2" ||
    fail "$3: sessions alpha/beta are $(sessions 1)/$(sessions 2), expected $1/$2"
}

nbd_start "$SCHEME://127.0.0.1:$TGT_PORT" "${PARAMS[@]}"
expect_sessions 0 0 "after start-up (get_ready logs out again, nothing opened yet)"

[ "$(timeout 30 nbdinfo --size "$(nbd_uri $B/1)")" = 12582912 ] || fail "size of $B/1"
expect_sessions 0 1 "after opening $B/1 only"

list=$(timeout 30 nbdinfo --list "$(nbd_uri)")
echo "$list"
names=$(sed -n 's/^export="\(.*\)":$/\1/p' <<<"$list" | tr '\n' ' ')
[ "$names" = "$A/1 $A/2 $B/1 " ] || fail "exports are '$names'"
for want in "LUN 1, 16777216 bytes" "LUN 2, 8388608 bytes" "LUN 1, 12582912 bytes"; do
  grep -q "description: IET VIRTUAL-DISK .*$want" <<<"$list" || fail "no description '$want'"
done
# nbdinfo --list opened every export on its own connection: still one session per target.
expect_sessions 1 1 "after nbdinfo --list"

# The default export (empty name) is the first one.
[ "$(timeout 30 nbdinfo --size "$(nbd_uri)")" = 16777216 ] || fail "default export is not $A/1"
info=$(timeout 30 nbdinfo "$(nbd_uri $A/2)")
expect_info "$info" block_size_minimum 4096

timeout 60 nbdcopy "$(nbd_uri $A/2)" "$WORK/out"
cmp "$WORK/out" "$(tgt_lun_file 1 2)" || fail "$A/2 copied out differs from its backing file"
echo "nbdcopy out of $A/2: equal"

head -c 12M /dev/urandom >"$WORK/beta1"
timeout 60 nbdcopy --flush "$WORK/beta1" "$(nbd_uri $B/1)"
cmp "$WORK/beta1" "$(tgt_lun_file 2 1)" || fail "$B/1's backing file differs from the image"
timeout 60 nbdcopy "$(nbd_uri $B/1)" "$WORK/back"
cmp "$WORK/beta1" "$WORK/back" || fail "$B/1 read back differs"
echo "nbdcopy into $B/1 and back: equal"
expect_sessions 1 1 "after the copies"

# bad_export NAME LOG_PATTERN: opening NAME fails, and nbdkit says why.
bad_export() {
  local out
  if out=$(timeout 30 nbdinfo --size "$(nbd_uri "$1")" 2>&1); then
    fail "export '$1' opened: $out"
  fi
  echo "export '$1': $out"
  grep -Eq "$2" "$NBD_DIR/log" || fail "nbdkit's log has no error matching '$2'"
}
bad_export iqn.2026-11.test:gamma/1 "export 'iqn.2026-11.test:gamma/1': the portal reported no target iqn.2026-11.test:gamma"
bad_export 1 "export '1': export names are TARGET-IQN/LUN"
bad_export "$A/x" "export '$A/x': export names are TARGET-IQN/LUN"
bad_export "$A/9" "LUN 9"
nbd_stop
expect_sessions 0 0 "after nbdkit exited (logged out of every target)"

# A portal where nothing listens stops nbdkit before it serves.
port=$(tgt_free_port)
nbd_fails "127\.0\.0\.1:$port.*(refused|connect)" "$SCHEME://127.0.0.1:$port" timeout=3 "${PARAMS[@]}"
echo PASS
