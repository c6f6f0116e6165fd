#!/bin/bash
# Multipath through the FUSE frontends (docs/multipath.md): tgtd listens on a second portal,
# which the URL names with portal= (tgt's SendTargets reports only the portal a discovery arrives
# at). `iser-connect mount` of the target opens two sessions (I_T nexuses); 16 MiB written with dd
# through the LUN file are on the backing file and read back equal, each path having carried a
# share; unmounting logs out of both. `iser-connect login` into the session daemon does the same
# (the login request carries the URL's portal=, nr_sessions= and multipath=), `session` lists the
# target once, `session -P 1` and `--json` show both paths and the LUN on each, and `logout -p`
# with the second path's portal or `logout -T` ends every path of it while the daemon serves
# another target.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp ss
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 16M
tgt_target 2 "$T2"
tgt_lun 2 1 8M
P2=$(tgt_free_port)
tgt_adm --lld iscsi --op new --mode portal --param portal=127.0.0.1:$P2
URL="$(sessions_url 1)?portal=127.0.0.1:$P2"

# nexuses [TID]: the I_T nexuses (sessions) tgtd has, with target TID or with any.
nexuses() {
  tgtadm --lld iscsi --op show --mode target |
    awk -v tid="${1:-}" '/^Target [0-9]+:/ { t = (tid == "" || $2 == tid ":") }
                         t && /I_T nexus:/ { n++ } END { print n + 0 }'
}
nexuses_are() { [ "$(nexuses "${2:-}")" = "$1" ]; }
# expect_nexuses N WHEN [TID]: tgtd counts N (with target TID), at once or after the logouts it
# is still handling.
expect_nexuses() {
  wait_for 10 nexuses_are "$1" "${3:-}" ||
    fail "$2: tgtd has $(nexuses "${3:-}") I_T nexuses, expected $1:" \
      "$(tgtadm --lld iscsi --op show --mode target)"
}
# bytes_sent_to PORT: what each connection to 127.0.0.1:PORT (its initiator end) has sent and
# had acknowledged, one line per connection.
bytes_sent_to() {
  ss -tinH state established "( dport = :$1 )" | grep -o 'bytes_acked:[0-9]*' | cut -d: -f2
}

FUSE_MOUNT_COMMAND=("$ISER_CONNECT" mount)
fuse_mount "$URL" "$MNT"
expect_nexuses 2 "mount with portal= naming the second portal"
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=16 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$MNT/lun1" bs=1M oflag=direct conv=fsync,notrunc status=none ||
  fail "dd into $MNT/lun1"
cmp "$FUSE_DIR/img" "$(tgt_lun_file 1 1)" || fail "the backing file differs from the image written"
timeout 60 dd if="$MNT/lun1" of="$FUSE_DIR/back" bs=1M iflag=direct status=none ||
  fail "dd out of $MNT/lun1"
cmp "$FUSE_DIR/img" "$FUSE_DIR/back" || fail "read back through two paths differs"
echo "dd in and back through two paths: equal"
# Paths share the work (queue-length, ties in turn): each sent well over an eighth of the image.
for port in "$TGT_PORT" "$P2"; do
  sent=$(bytes_sent_to "$port")
  [ "$(grep -c . <<<"$sent")" = 1 ] ||
    fail "the mount has not one connection to port $port: '$sent'"
  [ "$sent" -gt $((2 << 20)) ] || fail "the path through port $port sent only $sent bytes"
  echo "path through port $port: $sent bytes sent"
done
fuse_unmount "$MNT"
expect_nexuses 0 "after the unmount (logged out of both paths)"
echo "mount: ok"

# The daemon holds $T2 throughout, so each logout of $T1 below ends its paths while the process
# lives on: what ends them is the logout, not the exit.
ic login "$(sessions_url 2)" || fail "login to $T2"
ic login "$URL" || fail "login to $URL"
expect_nexuses 1 "login to $T2 (its one portal that SendTargets reports)" 2
expect_nexuses 2 "login with portal= naming the second portal" 1
cmp -n $((16 << 20)) "$FUSE_DIR/img" "$ROOT/$T1/lun1" || fail "$ROOT/$T1/lun1 differs"
out=$(ic session) || fail "session: $out"
[ "$(grep -c " $T1 (non-flash)$" <<<"$out")" = 1 ] || fail "session does not list $T1 once: $out"
# session -P 1 shows both paths (each healthy, at its own port) and the LUN served by each,
# active/optimized (tgt reports no ALUA); --json has the same as "paths" and "luns".
out=$(ic session -P 1) || fail "session -P 1: $out"
t1=$(awk -v t="Target: $T1 (non-flash)" '$0 == t { on = 1; next } /^Target: / { on = 0 } on' <<<"$out")
grep -q "Paths: 2 (queue-length)" <<<"$t1" || fail "session -P 1 shows not two paths of $T1: $out"
for port in "$TGT_PORT" "$P2"; do
  grep -Eq "path [12]: 127\.0\.0\.1:$port,1 via 127\.0\.0\.1:$port,1 logged in healthy" <<<"$t1" ||
    fail "session -P 1 shows no healthy path at port $port: $t1"
done
grep -Eq "LUN 1: naa\.[0-9a-f]+, no ALUA" <<<"$t1" || fail "session -P 1 shows no identity of LUN 1: $t1"
[ "$(grep -Ec "path [12]: group 0 active/optimized" <<<"$t1")" = 2 ] ||
  fail "session -P 1 shows LUN 1 not active/optimized on both paths: $t1"
echo "session -P 1 of $T1:"
echo "$t1"
json=$(ic session --json) || fail "session --json: $json"
python3 - "$json" "$T1" "$TGT_PORT" "$P2" <<'PY' || fail "session --json: $json"
import json, sys
doc, target, ports = json.loads(sys.argv[1]), sys.argv[2], {int(sys.argv[3]), int(sys.argv[4])}
sessions = doc["sessions"] if isinstance(doc, dict) else doc
s = [s for s in sessions if s["target"] == target]
assert len(s) == 1, f"{target} listed {len(s)} times"
paths = s[0]["paths"]
assert {p["portal"]["port"] for p in paths} == ports, paths
assert all(p["healthy"] and p["commands"] > 0 for p in paths), paths
luns = s[0]["luns"]
assert [l["lun"] for l in luns] == [1] and all(p["serves"] for p in luns[0]["paths"]), luns
PY
# -p names the second path's portal, not the first's: the target matches by any of its paths.
out=$(ic logout -p "127.0.0.1:$P2") || fail "logout -p 127.0.0.1:$P2: $out"
grep -q "Logout of \[target: $T1\] successful" <<<"$out" || fail "logout -p the second portal: $out"
expect_nexuses 0 "after the logout of $T1 by its second portal (both paths)" 1
echo "login, session -P 1 and logout -p with portal=: ok"

ic login "$(sessions_url 1)?nr_sessions=2" || fail "login with nr_sessions=2"
expect_nexuses 2 "login with nr_sessions=2" 1
[ "$(bytes_sent_to "$TGT_PORT" | wc -l)" = 3 ] ||
  fail "nr_sessions=2: not two connections to $TGT_PORT beside $T2's"
out=$(ic logout -T "$T1") || fail "logout -T $T1: $out"
expect_nexuses 0 "after the logout of $T1 (nr_sessions=2)" 1
ic login "$URL&multipath=off" || fail "login with multipath=off"
expect_nexuses 1 "login with multipath=off" 1
out=$(ic logout -T "$T1") || fail "logout -T $T1: $out"
expect_nexuses 0 "after the logout of $T1 (multipath=off)" 1
expect_nexuses 1 "$T2 after the logouts of $T1" 2
ic logout --all || fail "logout --all"
expect_nexuses 0 "after logout --all"
sessions_assert_gone
echo "login with nr_sessions=2 and multipath=off: ok"
echo PASS
