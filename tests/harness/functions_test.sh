#!/bin/bash
# functions_test.sh: the shell test library itself (tests/harness/functions.sh). Each case runs a
# small script using the library in a child bash and checks its exit status and output: requires
# fails loudly (never skips), fail exits 1 with its message, the cleanup stack runs latest first
# on failure, on success and on SIGTERM, a failing cleanup step fails a passing script, wait_for
# gives up at its deadline or when the watched process exits, soft checks are counted, and a
# script's own EXIT trap adds to the cleanup stack instead of replacing it.
set -euo pipefail
LIB=$(cd "$(dirname "$0")" && pwd)/functions.sh
. "$LIB"
temp_dir WORK functions-test

# run_child SCRIPT: runs SCRIPT (bash, after set -euo pipefail and the library) in a child; its
# exit status in STATUS, stdout and stderr together in OUT.
run_child() {
  STATUS=0
  OUT=$(bash -c "set -euo pipefail; . '$LIB'; $1" 2>&1) || STATUS=$?
}

expect_status() {  # expect_status CODE WHAT
  [ "$STATUS" -eq "$1" ] || fail "$2: exit status $STATUS, expected $1; output: $OUT"
}

expect_out() {  # expect_out TEXT WHAT: the child's output has TEXT (fixed string)
  grep -qF -- "$1" <<<"$OUT" || fail "$2: no '$1' in the output: $OUT"
}

run_child 'requires bash no-such-command-1 also-missing-2; echo AFTER'
expect_status 1 "requires with missing commands"
expect_out "FAIL: required but not installed: no-such-command-1 also-missing-2" "requires"
! grep -q AFTER <<<"$OUT" || fail "requires let the script go on: $OUT"
echo "requires no-such-command: exit 1, names the missing commands: ok"

run_child 'requires bash sh; echo AFTER'
expect_status 0 "requires with installed commands"
expect_out AFTER "requires with installed commands"
echo "requires of installed commands: ok"

run_child 'fail "the reason"; echo AFTER'
expect_status 1 "fail"
[ "$OUT" = "FAIL: the reason" ] || fail "fail printed '$OUT'"
echo "fail: exit 1 with its message: ok"

steps="cleanup_push 'echo first'; cleanup_push 'echo second'; cleanup_push 'echo third'"
run_child "$steps; fail broken"
expect_status 1 "cleanup on failure"
[ "$(tr '\n' ' ' <<<"$OUT")" = "FAIL: broken third second first " ] ||
  fail "cleanup on failure ran out of order: $OUT"
echo "cleanup stack on failure: latest first, status kept: ok"

run_child "$steps; exit 3"
expect_status 3 "cleanup on exit 3"
[ "$(tr '\n' ' ' <<<"$OUT")" = "third second first " ] || fail "cleanup on exit: $OUT"
run_child "$steps; false"
expect_status 1 "cleanup after a failed command (set -e)"
expect_out third "cleanup after a failed command"
run_child "$steps"
expect_status 0 "cleanup on success"
[ "$(tr '\n' ' ' <<<"$OUT")" = "third second first " ] || fail "cleanup on success: $OUT"
echo "cleanup stack on exit N, on set -e and on success: ok"

run_child "cleanup_push 'echo first'; cleanup_push 'false'; cleanup_push 'echo third'"
expect_status 1 "a failing cleanup step"
[ "$(tr '\n' ' ' <<<"$OUT")" = "third FAIL: cleanup step 'false' failed first " ] ||
  fail "a failing cleanup step: $OUT"
echo "a failing cleanup step fails the script and the rest still run: ok"

run_child 'cleanup_push "echo status \$CLEANUP_STATUS"; exit 5'
expect_status 5 "CLEANUP_STATUS"
expect_out "status 5" "CLEANUP_STATUS"
echo "CLEANUP_STATUS: ok"

bash -c ". '$LIB'; cleanup_push 'echo cleaned >$WORK/term'; sleep 30 & cleanup_push \"kill \$!\"; wait" &
child=$!
sleep 0.5
kill -TERM "$child"
STATUS=0
wait "$child" || STATUS=$?
OUT=$(cat "$WORK/term" 2>/dev/null || true)
expect_status 143 "SIGTERM"
[ "$OUT" = cleaned ] || fail "the cleanup stack did not run on SIGTERM"
echo "cleanup stack on SIGTERM: ok"

run_child "temp_dir D probe; echo \$D; test -d \"\$D\""
expect_status 0 temp_dir
[[ $OUT == /tmp/iser-probe.* ]] || fail "temp_dir made '$OUT'"
[ ! -e "$OUT" ] || fail "temp_dir left $OUT behind"
echo "temp_dir: made, removed at exit: ok"

start=$SECONDS
wait_for 1 false && fail "wait_for of a command that never succeeds returned 0"
[ $((SECONDS - start)) -le 3 ] || fail "wait_for 1 took $((SECONDS - start)) s"
wait_for 1 true || fail "wait_for of true"
sleep 0.2 &
start=$SECONDS
wait_for --pid $! 30 false && fail "wait_for --pid returned 0"
[ $((SECONDS - start)) -le 3 ] || fail "wait_for --pid did not give up when the process exited"
echo "wait_for: deadline, success, watched process: ok"

run_child 'check "passes" true; check "fails" false; expect_exit 3 "^x$" sh -c "echo x; exit 3"
  expect_exit 0 "" false; checks_done'
expect_status 1 "soft checks"
expect_out "ok: passes" "check"
expect_out "FAIL: fails" "check"
expect_out "ok: exit 3 /^x$/" "expect_exit"
expect_out "FAIL: expected exit 0 and //, got 1" "expect_exit"
expect_out "2 failed" "checks_done"
run_child 'check "passes" true; checks_done'
expect_status 0 "soft checks all passing"
echo "check, expect_exit, checks_done: ok"

# Traps compose: a script's own EXIT trap (scripts/demo had one) joins the cleanup stack instead
# of replacing it, so what the stack stops (here a dummy process standing for tgtd) is stopped,
# on success and on failure.
for end in "echo body" "fail broken"; do
  run_child "sleep 300 >/dev/null 2>&1 & echo \$! >'$WORK/dummy'
    cleanup_push 'kill \$(cat $WORK/dummy)'; cleanup_push 'echo stack'
    trap 'echo mine' EXIT; $end"
  dummy=$(cat "$WORK/dummy")
  if ! wait_for 5 exited "$dummy"; then
    kill "$dummy"
    fail "an EXIT trap of the script's own dropped the cleanup stack: its process $dummy ran on"
  fi
  case $end in
    echo*) expect_status 0 "EXIT trap of the script's own"
           [ "$(tr '\n' ' ' <<<"$OUT")" = "body mine stack " ] || fail "EXIT trap composed: $OUT" ;;
    fail*) expect_status 1 "EXIT trap of the script's own, failing"
           [ "$(tr '\n' ' ' <<<"$OUT")" = "FAIL: broken mine stack " ] ||
             fail "EXIT trap composed, failing: $OUT" ;;
  esac
done
echo "a script's own EXIT trap joins the cleanup stack: ok"

run_child "cleanup_push 'echo stack'; trap - EXIT; echo AFTER"
expect_status 1 "trap - EXIT"
expect_out "would drop the cleanup stack" "trap - EXIT"
expect_out stack "trap - EXIT"
! grep -q AFTER <<<"$OUT" || fail "trap - EXIT let the script go on: $OUT"
run_child "trap 'echo got int' INT EXIT; trap -p INT; (trap 'echo sub' EXIT; true); echo main"
expect_status 0 "trap of INT and EXIT together"
[ "$(tr '\n' ' ' <<<"$OUT")" = "trap -- 'echo got int' SIGINT sub main got int " ] ||
  fail "trap of INT and EXIT together, and in a subshell: $OUT"
echo "trap - EXIT refused; other signals and subshells keep bash's trap: ok"
echo PASS
