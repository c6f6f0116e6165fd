#!/bin/bash
# settings_test.sh PLUGIN: the recovery settings as nbdkit parameters (replacement_timeout=,
# command_timeout=) and as URL arguments: bad values stop nbdkit at start-up with an error naming
# the parameter and the value; good ones, with a second portal in the URL, serve the LUN.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 16M
U=iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk

for p in replacement_timeout command_timeout; do
  nbd_fails "$p '-1': not a number of seconds" "$U" $p=-1
  nbd_fails "$p '1e300': not a number of seconds" "$U" $p=1e300
  nbd_fails "$p '0.0001': at most 3 digits after the point" "$U" $p=0.0001
  nbd_fails "$p '31536001': must be between 0 and 31536000 seconds" "$U" $p=31536001
  nbd_fails "$p '': not a number of seconds" "$U" $p=
  nbd_fails "url: .*$p 'soon': not a number of seconds" "$U?$p=soon"
done
nbd_fails "argument 'command_timeout' given twice" "$U?command_timeout=1&command_timeout=1"
nbd_fails "portal 'h:99999'" "$U?portal=h:99999"

help=$(env "${NBD_ENV[@]}" timeout -k 2 30 nbdkit "$NBD_PLUGIN" --help 2>&1 || true)
grep -q "^replacement_timeout=SECONDS" <<<"$help" || fail "--help lacks replacement_timeout"
grep -q "^command_timeout=SECONDS" <<<"$help" || fail "--help lacks command_timeout"

nbd_start "$U?replacement_timeout=60&portal=127.0.0.1:$(tgt_free_port)" replacement_timeout=0.5 \
  command_timeout=10
size=$(timeout 30 nbdinfo --size "$(nbd_uri)")
[ "$size" = 16777216 ] || fail "export size $size with the recovery settings"
echo PASS
