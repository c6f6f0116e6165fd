#!/bin/bash
# errors_test.sh PLUGIN: nbdkit iser refuses to start, with a message that says why, when the
# URL is malformed, the portal is unreachable, the target or LUN does not exist, the LUN is not a
# disk, or CHAP fails; and starts when the CHAP secret comes by nbdkit_read_password (+FILE, -FD).
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 16M
tgt_target 2 iqn.2026-11.test:chap
tgt_lun 2 1 16M
tgt_chap 2 alice alice-secret-1 bob bob-secret-22
U=iscsi://127.0.0.1:$TGT_PORT

# Malformed URLs and parameters: refused in config, before any network traffic.
nbd_fails "must start with iscsi:// or iser://" http://127.0.0.1/iqn.2026-11.test:disk
nbd_fails "LUN 'x' is not a number" "$U/iqn.2026-11.test:disk/x"
nbd_fails "unknown argument 'foo'" "$U/iqn.2026-11.test:disk?foo=1"
nbd_fails "unknown parameter 'bogus'" "$U/iqn.2026-11.test:disk" bogus=1
nbd_fails "digest: expected crc32c" "$U/iqn.2026-11.test:disk" digest=md5
nbd_fails "transport: expected tcp or iser" "$U/iqn.2026-11.test:disk" transport=fc
nbd_fails "an iSCSI URL is required" initiator=iqn.2026-11.test:x

# Unreachable portal: nothing listens on that port.
NOPORT=$(tgt_free_port)
nbd_fails "cannot connect to portal 127.0.0.1:$NOPORT: Connection refused" \
  "iscsi://127.0.0.1:$NOPORT/iqn.2026-11.test:disk" timeout=5

# Unknown target, missing LUN, a LUN that is not a disk.
nbd_fails "no such target" "$U/iqn.2026-11.test:nope"
nbd_fails "LUN 9 is not connected" "$U/iqn.2026-11.test:disk/9"
nbd_fails "LUN 0 is a STORAGE_ARRAY_CONTROLLER device, not a disk" "$U/iqn.2026-11.test:disk/0"

# CHAP: none given, a wrong secret, a user without a secret, a wrong mutual secret.
nbd_fails "requires authentication: give a CHAP user and password" "$U/iqn.2026-11.test:chap"
nbd_fails "failed in security negotiation.*CHAP user 'alice'" \
  "$U/iqn.2026-11.test:chap?auth=md5" user=alice password=wrong-secret-1
nbd_fails "CHAP user 'alice' has no password: give password=- \\(prompt\\), password=\\+FILE or password=-FD, or set LIBISCSI_CHAP_PASSWORD" \
  "$U/iqn.2026-11.test:chap" user=alice
nbd_fails "mutual CHAP user 'bob' has no password: give target-password=- \\(prompt\\), target-password=\\+FILE or target-password=-FD, or set LIBISCSI_CHAP_TARGET_PASSWORD" \
  "$U/iqn.2026-11.test:chap" user=alice password=alice-secret-1 target-user=bob
temp_dir SECRETS secrets
echo alice-secret-1 >"$SECRETS/alice"
echo not-bobs-secret >"$SECRETS/wrongbob"
echo bob-secret-22 >"$SECRETS/bob"
nbd_fails "mutual|target.*authenticat|authenticat.*target" "$U/iqn.2026-11.test:chap?auth=md5" \
  user=alice password=+"$SECRETS/alice" target-user=bob target-password=+"$SECRETS/wrongbob"

# The right secrets, from a file and from a file descriptor: nbdkit serves.
nbd_start "$U/iqn.2026-11.test:chap?auth=md5" user=alice password=+"$SECRETS/alice"
size=$(timeout 30 nbdinfo --size "$(nbd_uri)")
[ "$size" = 16777216 ] || fail "CHAP export size $size"
nbd_stop
exec 9<"$SECRETS/alice"
nbd_start "$U/iqn.2026-11.test:chap?auth=md5" user=alice password=-9 target-user=bob \
  target-password=+"$SECRETS/bob"
exec 9<&-
size=$(timeout 30 nbdinfo --size "$(nbd_uri)")
[ "$size" = 16777216 ] || fail "mutual CHAP export size $size"
echo PASS
