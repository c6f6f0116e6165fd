# cli_lib.sh: assertions shared by the CLI end-to-end tests (bash library). Each failed check
# counts in $fails and the test ends with `cli_done`, which fails the script if any did.

fails=0
check() {  # check DESCRIPTION COMMAND... : the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
expect_exit() {  # expect_exit CODE PATTERN COMMAND...: exit code and a stderr pattern
  local code=$1 pattern=$2
  shift 2
  local out rc=0
  out=$(timeout 60 "$@" 2>&1) || rc=$?
  if [ "$rc" -eq "$code" ] && grep -qE "$pattern" <<<"$out"; then
    echo "ok: exit $code /$pattern/: $*"
  else
    echo "FAIL: expected exit $code and /$pattern/, got $rc: $out"
    fails=$((fails + 1))
  fi
}
cli_done() {
  echo "$fails failed"
  [ "$fails" -eq 0 ]
}
