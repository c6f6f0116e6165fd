#!/bin/bash
# The iscsiadm workflow end to end over TCP: `discover -o new -l` records two targets and logs in
# to both (their files appear, data written reads back); `login --all` again is "session exists"
# (15); after `logout --all`, `login -T` logs in to that record only; a record whose target
# refuses the login is named in the error (exit 24) while the others log in; unknown records are
# exit 21; a URL and -T together, or neither, are exit 7.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 32M
tgt_target 2 "$T2"
tgt_lun 2 1 16M
CONF=$FUSE_DIR/conf
PORTAL=127.0.0.1:$TGT_PORT

out=$(ic discover -p "$PORTAL" -o new -l --config-dir "$CONF" 2>&1) || fail "discover -o new -l: $out"
echo "$out"
for t in "$T1" "$T2"; do
  grep -qF "Login to [target: $t, portal: $PORTAL] successful" <<<"$out" || fail "no login to $t"
  [ -f "$ROOT/$t/lun1" ] || fail "$ROOT/$t/lun1 is missing: $(ls -R "$ROOT")"
done
[ "$(ic node --config-dir "$CONF" | wc -l)" = 2 ] || fail "discover -o new -l did not record 2 nodes"
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=8 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$ROOT/$T2/lun1" bs=1M conv=fsync,notrunc status=none
cmp -n $((8 << 20)) "$FUSE_DIR/img" "$(tgt_lun_file 2 1)" || fail "data written through $T2/lun1"
echo "discover -o new -l: both targets logged in, data verified: ok"

expect_exit 15 "session exists" "$ISER_CONNECT" login --all --config-dir "$CONF"
echo "login --all with every session present: exit 15: ok"

ic logout --all || fail "logout --all"
sessions_assert_gone

ic login -T "$T1" --config-dir "$CONF" || fail "login -T $T1"
[ "$(ls "$ROOT")" = "$T1" ] || fail "login -T $T1 logged in to: $(ls "$ROOT")"
ic session --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert len(s) == 1 and s[0]["target"] == sys.argv[1], s
' "$T1" || fail "session after login -T"
ic logout --all || fail "logout --all"
sessions_assert_gone
echo "login -T: one record: ok"

# A record whose target now refuses this initiator: the error names the record.
ic node --config-dir "$CONF" -T "$T2" --op update -n node.session.auth.authmethod -v CHAP ||
  fail "authmethod CHAP"
ic node --config-dir "$CONF" -T "$T2" --op update -n node.session.auth.username -v nobody ||
  fail "username"
printf 'wrongsecret1234\n' >"$FUSE_DIR/secret"
ic node --config-dir "$CONF" -T "$T2" --op update -n node.session.auth.password \
  --value-file "$FUSE_DIR/secret" || fail "password"
tgt_chap 2 someone rightsecret123
set +e
out=$("$ISER_CONNECT" login --all --config-dir "$CONF" 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" = 24 ] || fail "login --all with a refused record: exit $rc, expected 24"
grep -qF "could not log in to [target: $T2, portal: $PORTAL] (record $CONF/nodes/$T2/" <<<"$out" ||
  fail "the error does not name the record"
grep -qF "wrongsecret1234" <<<"$out" && fail "the secret was printed"
[ -f "$ROOT/$T1/lun1" ] || fail "the good record was not logged in"
ic logout --all || fail "logout --all"
sessions_assert_gone
echo "a refused record is named, the others log in: ok"

expect_exit 21 "no records found for iqn.2026-11.test:nope" \
  "$ISER_CONNECT" login -T iqn.2026-11.test:nope --config-dir "$CONF"
expect_exit 7 "not both" "$ISER_CONNECT" login "$(sessions_url 1)" -T "$T1" --config-dir "$CONF"
expect_exit 7 "login needs a URL" "$ISER_CONNECT" login --config-dir "$CONF"
echo "bad requests: ok"
checks_done
