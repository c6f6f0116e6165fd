#!/usr/bin/env bash
# `cmake --install` of the build tree into a scratch DESTDIR: the binary, the mount helper link,
# the plugin and both man pages land where they belong, and iser-connect(1) documents every
# subcommand and every option that `iser-connect SUBCOMMAND --help` lists.
# Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/functions.sh"
dest=$(mktemp -d)
cleanup_push "rm -rf $dest"
DESTDIR=$dest cmake --install "$build" --prefix /usr >/dev/null
for f in usr/bin/iser-connect usr/sbin/mount.fuse.iser-connect usr/share/man/man1/iser-connect.1 \
         usr/share/man/man1/nbdkit-iser-plugin.1; do
  check "installed: /$f" test -e "$dest/$f"
done
check "the helper link leads to iser-connect" \
  test "$(readlink -f "$dest/usr/sbin/mount.fuse.iser-connect")" = "$(readlink -f "$dest/usr/bin/iser-connect")"

cli=$dest/usr/bin/iser-connect
page=$(MANWIDTH=200 man -l "$dest/usr/share/man/man1/iser-connect.1" 2>/dev/null)
subcommands=$("$cli" --help | awk '/^Subcommands:/{s=1; next} s && /^$/{exit} s && /^  [a-z]/{print $1}')
[ -n "$subcommands" ] || fail "no subcommands in --help"
for c in $subcommands; do
  check "iser-connect(1) has a section on $c" grep -Eq "^   $c( |$)" <<<"$page"
  for o in $("$cli" "$c" --help | grep -oE -- '--[a-z][a-z-]+' | grep -vx -- --help | sort -u); do
    check "iser-connect(1) names $c's option $o" grep -qF -- "$o" <<<"$page"
  done
done
checks_done
