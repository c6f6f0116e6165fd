# Script mode (cmake -P), run at every build by cli/CMakeLists.txt's iser-version target:
# writes OUTPUT from TEMPLATE with ISER_VERSION_STRING set to VERSION, followed by
# " (git DESCRIPTION)" when SOURCE_DIR is a git checkout. configure_file leaves OUTPUT alone when
# its text would not change, so only a new commit rebuilds what includes it.
execute_process(
  COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE commit
  RESULT_VARIABLE rc
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(ISER_VERSION_STRING "${VERSION}")
if(rc EQUAL 0 AND commit)
  string(APPEND ISER_VERSION_STRING " (git ${commit})")
endif()
configure_file("${TEMPLATE}" "${OUTPUT}" @ONLY)
