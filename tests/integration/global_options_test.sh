#!/usr/bin/env bash
# Every global option (those `iser-connect --help` lists) on every subcommand, after the
# subcommand and before it: none is refused, each command gets as far as its own outcome (a
# refused connection, no sessions, the records listed). Where an option means something it takes
# effect: --config-dir is the store node, login and discover use, -I narrows node's records to a
# transport; -v stays node's --value (iscsiadm's), its --verbose is the global one.
# Usage: global_options_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/functions.sh"
requires python3 timeout
temp_dir work globalopts
# Sessions and trees of this test only; nothing listens on $closed.
export ISER_CONNECT_RUNTIME_DIR=$work/run
mkdir -m 0700 "$ISER_CONNECT_RUNTIME_DIR" "$work/tree" "$work/mnt"
closed=$(python3 "$here/../harness/free_port.py")
printf 'secret-for-options\n' >"$work/secret"
iqn=iqn.2026-11.io.iser-connect.test:opts

# record TRANSPORT PORT: a node record written by hand into $work/conf.
record() {
  local dir=$work/conf/nodes/$iqn-$1
  mkdir -p -m 0700 "$work/conf" "$work/conf/nodes" "$dir"
  printf 'node.name = %s\nnode.conn[0].address = 127.0.0.1\nnode.conn[0].port = %s\niface.transport_name = %s\n' \
    "$iqn-$1" "$2" "$1" >"$dir/127.0.0.1,$2,1"
  chmod 0600 "$dir/127.0.0.1,$2,1"
}
record tcp "$closed"
record iser "$closed"

# The global options the README and iser-connect(1) promise, with the value each gets here; one
# that --help lists and this table does not fails the test.
declare -A value=(
  [-i]=iqn.2026-11.io.iser-connect.test:someone [--initiator-name]=iqn.2026-11.io.iser-connect.test:someone
  [-v]= [--verbose]= [--log-level]=debug
  [--password-file]=$work/secret [--target-password-file]=$work/secret
  [--username]=someone [--target-username]=someone
  [-I]=tcp [--transport]=tcp [--login-timeout]=2 [--config-dir]=$work/conf
)
listed=$("$cli" --help | awk '/^Options:/{s=1; next} /^[A-Z]/{s=0} s' |
  grep -oE -- '(^|[ ,])--?[A-Za-z][a-z-]*' | tr -d ' ,' |
  grep -vxE -- '-h|--help|-V|--version' | sort -u)
[ -n "$listed" ] || fail "no options in iser-connect --help"
for o in $listed; do
  [ -n "${value[$o]+set}" ] || fail "global option $o has no value in this test: add it"
done
globals=$(printf '%s\n' "${!value[@]}" | sort)
subcommands=$("$cli" --help | awk '/^Subcommands:/{s=1; next} s && /^$/{exit} s && /^  [a-z]/{print $1}')

# Each subcommand's arguments and the exit code of its own outcome, reached only when every
# option was accepted: 5 (the portal refuses the connection), 21 (no sessions), 0 (the records).
declare -A args=(
  [discover]="-p 127.0.0.1:$closed" [ls]="127.0.0.1:$closed"
  [bench]="iscsi://127.0.0.1:$closed/$iqn-tcp/1 --time 1"
  [mount]="iscsi://127.0.0.1:$closed/$iqn-tcp $work/mnt"
  [login]="iscsi://127.0.0.1:$closed/$iqn-tcp --mountpoint $work/tree"
  [session]="" [logout]="--all" [node]="--config-dir $work/conf" [iname]=""
)
declare -A code=([discover]=5 [ls]=5 [bench]=5 [mount]=5 [login]=5 [session]=21 [logout]=21 [node]=0
  [iname]=0)
# A CHAP secret alone is refused for naming no user, a user alone for having no secret, a mutual
# one without the initiator's: the environment gives each option what it lacks.
declare -A env_for=(
  [--password-file]="LIBISCSI_CHAP_USERNAME=someone"
  [--target-password-file]="LIBISCSI_CHAP_USERNAME=someone LIBISCSI_CHAP_PASSWORD=x LIBISCSI_CHAP_TARGET_USERNAME=someone"
  [--username]="LIBISCSI_CHAP_PASSWORD=x"
  [--target-username]="LIBISCSI_CHAP_USERNAME=someone LIBISCSI_CHAP_PASSWORD=x LIBISCSI_CHAP_TARGET_PASSWORD=y"
)

# accepted DESCRIPTION EXPECTED_CODE ARGS...: exits with EXPECTED_CODE, no option refused.
accepted() {
  local what=$1 want=$2 out rc=0
  shift 2
  # shellcheck disable=SC2086 # the variables are words
  out=$(env ${ENV_FOR_OPTION:-} timeout 60 "$cli" "$@" 2>&1) || rc=$?
  if [ "$rc" = "$want" ] && ! grep -qiE "not expected|unknown option|extraneous|Could not convert" <<<"$out"; then
    echo "ok: $what"
  else
    echo "FAIL: $what: exit $rc (expected $want): $out"
    CHECKS_FAILED=$((CHECKS_FAILED + 1))
  fi
}

# The check above must see a refused option.
expect_exit 7 "not expected" "$cli" session --no-such-option

for c in $subcommands; do
  [ -n "${code[$c]+set}" ] || fail "subcommand $c has no expected outcome in this test: add it"
  for o in $globals; do
    opt=("$o")
    [ -z "${value[$o]}" ] || opt+=("${value[$o]}")
    ENV_FOR_OPTION=${env_for[$o]:-}
    # shellcheck disable=SC2086 # the arguments are words
    accepted "$o $c" "${code[$c]}" "${opt[@]}" "$c" ${args[$c]}
    # node's -v is --value (iscsiadm's -v); its --verbose is the global one. node's own
    # --config-dir (its arguments) is the one under test here.
    [ "$c:$o" != node:-v ] || continue
    [ "$c:$o" != node:--config-dir ] || args[node]=
    # shellcheck disable=SC2086
    accepted "$c $o" "${code[$c]}" "$c" ${args[$c]} "${opt[@]}"
    args[node]="--config-dir $work/conf"
  done
done
ENV_FOR_OPTION=

# Where the options take effect.
out=$("$cli" node --config-dir "$work/conf" -i iqn.2026-11.io.iser-connect.test:someone 2>&1) || true
check "node --config-dir lists that store's two records" test "$(wc -l <<<"$out")" -eq 2
out=$("$cli" --config-dir "$work/conf" node -I iser 2>&1) || true
check "node -I iser lists the iSER record only" test "$out" = "127.0.0.1:$closed,1 $iqn-iser"
out=$("$cli" node --config-dir "$work/conf" --transport tcp 2>&1) || true
check "node --transport tcp lists the TCP record only" test "$out" = "127.0.0.1:$closed,1 $iqn-tcp"
expect_exit 21 "no record for target $iqn-tcp over iser" \
  "$cli" node --config-dir "$work/conf" -T "$iqn-tcp" -I iser
expect_exit 0 "node.conn\[0\].address = 127.0.0.1" \
  "$cli" node --config-dir "$work/conf" -T "$iqn-iser" --verbose --log-level info
expect_exit 5 "could not log in to \[target: $iqn-tcp, portal: 127.0.0.1:$closed\] \(record $work/conf/nodes/" \
  "$cli" login -T "$iqn-tcp" --config-dir "$work/conf" --mountpoint "$work/tree" --login-timeout 2
expect_exit 21 "no records found for $iqn-tcp" \
  "$cli" login -T "$iqn-tcp" --config-dir "$work/empty" --mountpoint "$work/tree"
check "no session process is left" test -z "$(ls "$ISER_CONNECT_RUNTIME_DIR"/iser-connect.d 2>/dev/null | grep '\.sock$' || true)"
checks_done
