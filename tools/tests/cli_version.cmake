# `replayssm --version` prints the VERSION file's version. -DCLI=... -DVERSION_FILE=...
file(STRINGS ${VERSION_FILE} version LIMIT_COUNT 1)
execute_process(COMMAND ${CLI} --version RESULT_VARIABLE rc OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR NOT out STREQUAL "replayssm ${version}")
  message(FATAL_ERROR "replayssm --version printed '${out}' (exit ${rc}), expected 'replayssm ${version}'")
endif()
