# functions.sh: what every shell test and benchmark shares (bash library, sourced after
# set -euo pipefail; sourcing it twice is harmless).
#
#   . tests/harness/functions.sh
#   requires CMD...              # each CMD is on PATH, or the script fails naming the missing ones
#   fail MESSAGE                 # "FAIL: MESSAGE" on stderr, exit 1
#   cleanup_push 'COMMAND'       # COMMAND runs at exit, latest pushed first, pass or fail
#   temp_dir VAR [NAME]          # VAR=a new /tmp/iser-NAME.XXXXXX, removed at exit
#   wait_for [--pid PID] SECONDS COMMAND...   # polls COMMAND; see below
#   exited PID                   # process PID has ended (a COMMAND for wait_for)
#   check DESCRIPTION COMMAND...               # soft checks: see below
#   expect_exit CODE PATTERN COMMAND...
#   checks_done
#   sanitizer_preload VAR LIBRARY              # VAR=(the environment a program not built with
#                                              # sanitizers needs to load LIBRARY of such a build)
#
# A test never skips: a missing program, file or device is a failure that says what is missing.
# The cleanup stack runs from the EXIT trap this library installs, also when the script fails or
# is interrupted. While it runs, CLEANUP_STATUS is the script's exit status (so a cleanup can show
# a log only on failure), and a cleanup command that fails makes a passing script fail.
#
# Traps compose: `trap COMMAND EXIT` in a script (or a library it sources) after this one is
# cleanup_push COMMAND, so it cannot replace the stack and leave what the stack would stop (a
# tgtd, a mount) running. Removing the EXIT trap (`trap - EXIT`, `trap '' EXIT`) is refused.
# Other signals' traps are bash's own.

if ! declare -F cleanup_push >/dev/null; then

  fail() {
    echo "FAIL: $*" >&2
    exit 1
  }

  requires() {
    local cmd missing=()
    for cmd in "$@"; do
      command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    [ ${#missing[@]} -eq 0 ] ||
      fail "required but not installed: ${missing[*]} (scripts/deps test installs what the tests need)"
  }

  CLEANUP_STACK=()

  cleanup_push() {
    CLEANUP_STACK+=("$1")
  }

  cleanup_run() {
    CLEANUP_STATUS=$?
    local status=$CLEANUP_STATUS i
    builtin trap - EXIT
    # A failing step must not skip the ones after it: `||` keeps errexit out of each.
    for ((i = ${#CLEANUP_STACK[@]} - 1; i >= 0; i--)); do
      eval "${CLEANUP_STACK[i]}" || {
        echo "FAIL: cleanup step '${CLEANUP_STACK[i]}' failed" >&2
        [ "$status" -ne 0 ] || status=1
      }
    done
    CLEANUP_STACK=()
    exit "$status"
  }

  # trap [-lp] | trap [--] ACTION SIGNAL...: bash's trap, except that an ACTION for EXIT (or 0)
  # goes on the cleanup stack; the other SIGNALs get it from bash. A subshell starts with no
  # traps (so none of the stack's) and keeps bash's.
  trap() {
    [ "${1:-}" != -- ] || shift
    if [ "$BASH_SUBSHELL" -gt 0 ] || [ $# -lt 2 ] || [ "$1" = -l ] || [ "$1" = -p ]; then
      builtin trap "$@"
      return
    fi
    local action=$1 sig others=() on_exit=0
    shift
    for sig in "$@"; do
      case "${sig^^}" in
        EXIT | SIGEXIT | 0) on_exit=1 ;;
        *) others+=("$sig") ;;
      esac
    done
    if [ "$on_exit" = 1 ]; then
      if [ "$action" = - ] || [ -z "$action" ]; then
        echo "FAIL: trap '$action' EXIT would drop the cleanup stack (tests/harness/functions.sh)" >&2
        exit 1
      fi
      cleanup_push "$action"
    fi
    [ ${#others[@]} -eq 0 ] || builtin trap -- "$action" "${others[@]}"
  }

  builtin trap cleanup_run EXIT
  # Bash runs no EXIT trap when a signal kills it: turn the usual ones into an exit.
  builtin trap 'exit 129' HUP
  builtin trap 'exit 130' INT
  builtin trap 'exit 143' TERM

  temp_dir() {
    local dir
    dir=$(mktemp -d "/tmp/iser-${2:-test}.XXXXXX")
    printf -v "$1" %s "$dir"
    cleanup_push "rm -rf '$dir'"
  }

  # wait_for [--pid PID] SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds (status
  # 0); status 1 once SECONDS have passed, or at once when process PID has exited.
  wait_for() {
    local pid=
    if [ "$1" = --pid ]; then
      pid=$2
      shift 2
    fi
    local tries=$(($1 * 10)) i
    shift
    for ((i = 0; i < tries; i++)); do
      "$@" && return 0
      [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
      sleep 0.1
    done
    return 1
  }

  exited() {
    ! kill -0 "$1" 2>/dev/null
  }

  # Soft checks, for a script that reports every failed case before it fails: each one that
  # fails counts in CHECKS_FAILED, and checks_done (the script's last command) fails if any did.
  CHECKS_FAILED=0

  check() {  # check DESCRIPTION COMMAND...: the command must succeed
    local what=$1
    shift
    if "$@"; then
      echo "ok: $what"
    else
      echo "FAIL: $what"
      CHECKS_FAILED=$((CHECKS_FAILED + 1))
    fi
  }

  expect_exit() {  # expect_exit CODE PATTERN COMMAND...: that exit code, output matching PATTERN
    local code=$1 pattern=$2 out rc=0
    shift 2
    out=$(timeout 60 "$@" 2>&1) || rc=$?
    if [ "$rc" -eq "$code" ] && grep -qE "$pattern" <<<"$out"; then
      echo "ok: exit $code /$pattern/: $*"
    else
      echo "FAIL: expected exit $code and /$pattern/, got $rc: $out"
      CHECKS_FAILED=$((CHECKS_FAILED + 1))
    fi
  }

  checks_done() {
    echo "$CHECKS_FAILED failed"
    [ "$CHECKS_FAILED" -eq 0 ]
  }

  # A library of a sanitizer build (-DISER_SANITIZE=ON, -DISER_TSAN=ON: an nbdkit plugin) needs
  # its sanitizer's runtime loaded before anything else, which a program built without one (nbdkit)
  # does not do: LD_PRELOAD it. Leak checking is off, since that program's allocations are not
  # ours to judge. Empty for a build without sanitizers.
  sanitizer_preload() {
    local -n sanitizer_preload_out=$1
    local needed
    needed=$(readelf -d "$2")
    sanitizer_preload_out=()
    if grep -q 'NEEDED.*libasan' <<<"$needed"; then
      sanitizer_preload_out=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)"
                             ASAN_OPTIONS=detect_leaks=0)
    elif grep -q 'NEEDED.*libtsan' <<<"$needed"; then
      sanitizer_preload_out=(LD_PRELOAD="$(gcc -print-file-name=libtsan.so)")
    fi
  }

fi
