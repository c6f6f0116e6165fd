#!/bin/bash
# multipath_test.sh PLUGIN: nbdkit serves a LUN through every path its URL asks for
# (docs/multipath.md). tgtd listens on a second portal, which the URL names with portal= (tgt's
# SendTargets reports only the portal a discovery arrives at): once a client has connected, tgtd
# counts two I_T nexuses; 16 MiB written with nbdcopy are on the backing file and read back equal,
# and each path's connection carried a share of them; with multipath=off one nexus; with
# nr_sessions=2 and no portal= two, both through the URL's portal; every nexus ends when nbdkit
# exits.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo nbdcopy cmp

IQN=iqn.2026-11.test:multipath
tgt_start
tgt_target 1 $IQN
tgt_lun 1 1 16M
P2=$(tgt_free_port)
tgt_adm --lld iscsi --op new --mode portal --param portal=127.0.0.1:$P2
URL=iscsi://127.0.0.1:$TGT_PORT/$IQN/1
temp_dir WORK multipath

# I_T nexuses (sessions) tgtd has, over every target.
nexuses() {
  tgtadm --lld iscsi --op show --mode target | grep -c "I_T nexus:" || true
}
nexuses_are() { [ "$(nexuses)" = "$1" ]; }
# expect_nexuses N WHEN: tgtd counts N, at once or after the logouts it is still handling.
expect_nexuses() {
  wait_for 10 nexuses_are "$1" ||
    fail "$2: tgtd has $(nexuses) I_T nexuses, expected $1:" \
      "$(tgtadm --lld iscsi --op show --mode target)"
}
# bytes_sent_to PORT: what each connection to 127.0.0.1:PORT (its initiator end) has sent and
# had acknowledged, one line per connection.
bytes_sent_to() {
  ss -tinH state established "( dport = :$1 )" | grep -o 'bytes_acked:[0-9]*' | cut -d: -f2
}

nbd_start "$URL?portal=127.0.0.1:$P2"
[ "$(timeout 30 nbdinfo --size "$(nbd_uri 1)")" = 16777216 ] || fail "size of LUN 1"
expect_nexuses 2 "with portal= naming the second portal"

head -c 16M /dev/urandom >"$WORK/img"
timeout 60 nbdcopy --flush "$WORK/img" "$(nbd_uri 1)"
cmp "$WORK/img" "$(tgt_lun_file 1 1)" || fail "the backing file differs from the image written"
timeout 60 nbdcopy "$(nbd_uri 1)" "$WORK/back"
cmp "$WORK/img" "$WORK/back" || fail "read back through two paths differs"
echo "nbdcopy in and back through two paths: equal"
# Paths share the work (queue-length, ties in turn): each sent well over an eighth of the image.
for port in "$TGT_PORT" "$P2"; do
  sent=$(bytes_sent_to "$port")
  [ "$(grep -c . <<<"$sent")" = 1 ] || fail "nbdkit has not one connection to port $port: '$sent'"
  [ "$sent" -gt $((2 << 20)) ] || fail "the path through port $port sent only $sent bytes"
  echo "path through port $port: $sent bytes sent"
done
expect_nexuses 2 "after the copies (every NBD connection shares the paths)"
nbd_stop
expect_nexuses 0 "after nbdkit exited (logged out of both paths)"

nbd_start "$URL?portal=127.0.0.1:$P2&multipath=off"
[ "$(timeout 30 nbdinfo --size "$(nbd_uri 1)")" = 16777216 ] || fail "size with multipath=off"
expect_nexuses 1 "with multipath=off"
timeout 60 nbdcopy "$(nbd_uri 1)" "$WORK/back"
cmp "$WORK/img" "$WORK/back" || fail "read back with multipath=off differs"
nbd_stop
expect_nexuses 0 "after nbdkit with multipath=off exited"

nbd_start "$URL?nr_sessions=2"
[ "$(timeout 30 nbdinfo --size "$(nbd_uri 1)")" = 16777216 ] || fail "size with nr_sessions=2"
expect_nexuses 2 "with nr_sessions=2"
[ "$(bytes_sent_to "$TGT_PORT" | wc -l)" = 2 ] ||
  fail "nr_sessions=2: not two connections to the URL's portal"
[ -z "$(bytes_sent_to "$P2")" ] || fail "nr_sessions=2 without portal= reached the second portal"
nbd_stop
expect_nexuses 0 "after nbdkit with nr_sessions=2 exited"
echo PASS
