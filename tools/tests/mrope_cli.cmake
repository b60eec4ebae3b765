# Runs `replayssm mrope positions` once and checks the result.
#   -DCLI=<replayssm binary> -DREQUEST=<file.json>
#   either -DEXPECTED=<file.out.json>: stdout must equal the file byte for byte, exit status 0
#              (the model is read from the expected output's "model" field);
#   or     -DMODEL=<name> -DERROR_FIELD=<field>: the exit status must be non-zero and stderr must start with
#              "replayssm: error: <field>:".
if(DEFINED EXPECTED)
  file(READ "${EXPECTED}" want)
  string(JSON MODEL GET "${want}" model)
endif()
execute_process(COMMAND "${CLI}" mrope positions --model "${MODEL}" --request "${REQUEST}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(DEFINED EXPECTED)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit status ${rc}: ${err}")
  endif()
  if(NOT out STREQUAL want)
    message(FATAL_ERROR "output differs from ${EXPECTED}:\n${out}")
  endif()
else()
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected a failure naming ${ERROR_FIELD}, got exit status 0:\n${out}")
  endif()
  string(FIND "${err}" "replayssm: error: ${ERROR_FIELD}:" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "stderr does not name ${ERROR_FIELD}:\n${err}")
  endif()
endif()
