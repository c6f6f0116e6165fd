#!/bin/bash
# rootless.sh: login, session and logout where open-iscsi cannot run (its kernel interface is not
# namespaced): as the unprivileged user nobody in user, network and mount namespaces of its own
# (`unshare -rnm`), uid 0 there but not the system's root, so /run is not its own. With nothing
# set but what a user's session has (HOME, XDG_RUNTIME_DIR; no ISER_CONNECT_RUNTIME_DIR), login
# serves the tree in $XDG_RUNTIME_DIR/iser-connect, the data written through it reads back,
# `session` lists it, `logout --all` unmounts it and nothing is left: no process, no mount, no
# state. /run's iser-connect entries, which root's own use may have made, stay as they were. tgtd
# runs inside the namespace too (tests/harness/tgt.sh needs no privilege).
#
# Runs as root (CTest in CI does) and switches to nobody itself. What nobody runs is copied to a
# directory nobody can read first: a fresh clone may sit in a folder only root can enter.
set -euo pipefail

inner() {
  . "$ROOTLESS_DIR/harness/tgt.sh"
  ip link set lo up || fail "cannot bring up lo in the new network namespace"
  [ "$(id -u)" = 0 ] || fail "not uid 0 in the user namespace: $(id)"
  read -r inside outside count </proc/self/uid_map
  [ "$inside $outside $count" = "0 $ROOTLESS_UID 1" ] ||
    fail "not in a user namespace mapping 0 to nobody: $(cat /proc/self/uid_map)"
  [ -z "${ISER_CONNECT_RUNTIME_DIR:-}" ] || fail "ISER_CONNECT_RUNTIME_DIR is set"

  local iqn=iqn.2026-11.test:rootless root=$XDG_RUNTIME_DIR/iser-connect
  local state=$XDG_RUNTIME_DIR/iser-connect.d run_before
  run_before=$(run_state)
  tgt_start
  tgt_target 1 "$iqn"
  tgt_lun 1 1 32M
  cleanup_push "ic logout --all >/dev/null 2>&1 || true"

  ic login "iscsi://127.0.0.1:$TGT_PORT/$iqn" || fail "login as uid 0 of a user namespace"
  grep -qF " $root " /proc/self/mountinfo || fail "$root is not mounted"
  [ -f "$root/$iqn/lun1" ] || fail "no $root/$iqn/lun1: $(ls -R "$XDG_RUNTIME_DIR")"
  [ "$(stat -c %a "$state")" = 700 ] || fail "state directory $state: mode $(stat -c %a "$state")"
  [ "$(run_state)" = "$run_before" ] ||
    fail "something was made or changed in /run: before: $run_before, now: $(run_state)"
  dd if=/dev/urandom of="$ROOTLESS_DIR/data" bs=1M count=4 status=none
  timeout 60 dd if="$ROOTLESS_DIR/data" of="$root/$iqn/lun1" bs=1M conv=fsync,notrunc status=none
  cmp -n $((4 << 20)) "$ROOTLESS_DIR/data" "$root/$iqn/lun1" || fail "read back through the tree"
  cmp -n $((4 << 20)) "$ROOTLESS_DIR/data" "$(tgt_lun_file 1 1)" || fail "the backing file"
  echo "login in a user namespace: $root/$iqn/lun1, data read back: ok"

  local out
  out=$(ic session) || fail "session"
  grep -q "^tcp: \[[0-9]*\] 127.0.0.1:$TGT_PORT,1 $iqn (non-flash)$" <<<"$out" || fail "session: $out"
  out=$(ic session -P 1) || fail "session -P 1"
  grep -qF "Files: $root/$iqn/lun1" <<<"$out" || fail "session -P 1 lacks the file: $out"
  echo "session: ok"

  out=$(ic logout --all) || fail "logout --all"
  grep -qxF "Logout of [target: $iqn] successful: $root" <<<"$out" || fail "logout --all: $out"
  ! grep -qF " $root " /proc/self/mountinfo || fail "$root is still mounted after logout"
  [ -z "$(ls -A "$state")" ] || fail "state left in $state: $(ls -A "$state")"
  wait_for 20 no_daemon || fail "a session daemon is still running: $(daemons)"
  echo "logout --all: unmounted, nothing left: ok"
}

# /run's iser-connect entries, each with its inode and times, or that it cannot be seen (absent,
# or root's own mount, which no other user may look into: each side compares only with what it
# saw itself). Root may have used iser-connect on this machine, so they may exist: this test must
# neither make nor change them.
run_state() {
  local p
  for p in /run/iser-connect /run/iser-connect.d; do
    stat -c '%n %i %y %z' "$p" 2>/dev/null || echo "$p: absent or not ours to see"
  done
}

# The processes started by `ic` (the session daemon among them), by a marker in their environment
# that only `ic` sets.
daemons() {
  local f
  for f in $(grep -lzxF "ROOTLESS_MARK=$ROOTLESS_TAG" /proc/[0-9]*/environ 2>/dev/null); do
    f=${f%/environ}
    [ "$(awk '{print $3}' "$f/stat" 2>/dev/null)" = Z ] || echo "${f#/proc/}"
  done
}
no_daemon() {
  [ -z "$(daemons)" ]
}
ic() {
  ROOTLESS_MARK=$ROOTLESS_TAG timeout 120 "$ISER_CONNECT" "$@"
}

if [ "${ROOTLESS_STAGE:-}" = inner ]; then
  inner
  echo PASS
  exit 0
fi

. "$(dirname "$0")/../harness/functions.sh"
[ -n "${ISER_CONNECT:-}" ] && [ -x "$ISER_CONNECT" ] || fail "ISER_CONNECT must name the iser-connect binary"
[ "$(id -u)" = 0 ] || fail "run as root: the test becomes user nobody itself"
requires setpriv unshare ip tgtd tgtadm fusermount3 python3 timeout cmp
[ -c /dev/fuse ] || fail "/dev/fuse is missing"
id nobody >/dev/null 2>&1 && getent group nogroup >/dev/null || fail "no user nobody or group nogroup"
temp_dir ROOTLESS_DIR rootless
chmod 0755 "$ROOTLESS_DIR"
mkdir "$ROOTLESS_DIR/harness" "$ROOTLESS_DIR/home" "$ROOTLESS_DIR/xdg"
HARNESS=$(cd "$(dirname "$0")/../harness" && pwd)
cp "$HARNESS/functions.sh" "$HARNESS/tgt.sh" "$HARNESS/free_port.py" "$ROOTLESS_DIR/harness/"
cp "$0" "$ROOTLESS_DIR/rootless.sh"
cp "$ISER_CONNECT" "$ROOTLESS_DIR/iser-connect"
run_before=$(run_state)
chmod -R a+rX "$ROOTLESS_DIR"
chown nobody:nogroup "$ROOTLESS_DIR" "$ROOTLESS_DIR/home" "$ROOTLESS_DIR/xdg"
chmod 0700 "$ROOTLESS_DIR/xdg"
ROOTLESS_TAG=iser-rootless-$$-$RANDOM
cleanup_push 'for p in $(daemons); do kill -9 "$p" 2>/dev/null || true; done'

# What a user's login session has, and no ISER_CONNECT_RUNTIME_DIR.
rc=0
(cd "$ROOTLESS_DIR" &&
  env -u ISER_CONNECT_RUNTIME_DIR -u XDG_CONFIG_HOME HOME="$ROOTLESS_DIR/home" \
    XDG_RUNTIME_DIR="$ROOTLESS_DIR/xdg" ROOTLESS_STAGE=inner ROOTLESS_DIR="$ROOTLESS_DIR" \
    ROOTLESS_TAG="$ROOTLESS_TAG" ROOTLESS_UID="$(id -u nobody)" \
    ISER_CONNECT="$ROOTLESS_DIR/iser-connect" \
    timeout 400 setpriv --reuid=nobody --regid=nogroup --clear-groups \
    unshare -rnm bash "$ROOTLESS_DIR/rootless.sh") || rc=$?
[ "$rc" = 0 ] || fail "as nobody in unshare -rnm: exit $rc"
wait_for 10 no_daemon || fail "processes left: $(daemons)"
[ "$(run_state)" = "$run_before" ] ||
  fail "something was made or changed in /run: before: $run_before, after: $(run_state)"
echo PASS
