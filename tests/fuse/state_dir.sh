#!/bin/bash
# The state directory (docs/sessions.md) is checked by every command that uses it, not by login
# alone: session, session --rescan, logout -T and logout --all refuse one that is world-writable,
# a symbolic link, or another user's (as anyone could make it first in /tmp), with exit 7 and a
# message naming it, instead of talking to whatever sockets it holds. Needs no target: the check
# comes before any connection.
set -euo pipefail
. "$(dirname "$0")/../harness/functions.sh"
[ -n "${ISER_CONNECT:-}" ] && [ -x "$ISER_CONNECT" ] || fail "ISER_CONNECT must name the iser-connect binary"
[ "$(id -u)" = 0 ] || fail "run as root: the case of another user's directory needs chown"
temp_dir WORK state-dir
export ISER_CONNECT_RUNTIME_DIR=$WORK/run
mkdir -m 0755 "$ISER_CONNECT_RUNTIME_DIR"
STATE=$ISER_CONNECT_RUNTIME_DIR/iser-connect.d
url=iscsi://127.0.0.1:9/iqn.2026-11.test:t1

# Every command, against the state directory as it is now.
all_refuse() {
  local why=$1
  expect_exit 7 "refusing the state directory $STATE: $why" "$ISER_CONNECT" session
  expect_exit 7 "refusing the state directory $STATE: $why" "$ISER_CONNECT" session --rescan
  expect_exit 7 "refusing the state directory $STATE: $why" "$ISER_CONNECT" logout --all
  expect_exit 7 "refusing the state directory $STATE: $why" "$ISER_CONNECT" logout -T iqn.2026-11.test:t1
  expect_exit 7 "refusing the state directory $STATE: $why" "$ISER_CONNECT" login "$url" \
    --mountpoint "$WORK/mnt"
}
mkdir "$WORK/mnt"

expect_exit 21 "no active sessions" "$ISER_CONNECT" session
expect_exit 21 "no active sessions" "$ISER_CONNECT" logout --all
[ ! -e "$STATE" ] || fail "session or logout created $STATE"

mkdir -m 0777 "$STATE"
chmod 0777 "$STATE"
all_refuse "its mode is 0777, not 0700"
rmdir "$STATE"

mkdir -m 0700 "$WORK/elsewhere"
ln -s "$WORK/elsewhere" "$STATE"
all_refuse "it is a symbolic link"
rm "$STATE"

mkdir -m 0700 "$STATE"
chown nobody "$STATE"
all_refuse "it belongs to uid $(id -u nobody), not to this user"
checks_done
