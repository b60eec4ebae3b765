# RapidCheck's "Using configuration:" line: absent from the CLI's output (campaigns run from their own --seed),
# still printed by a property test (its seed reproduces it). -DCLI=... -DPROPERTY=<a RapidCheck gtest executable>
# -DFILTER=<gtest filter selecting one RapidCheck property>.
set(ENV{RC_PARAMS} "seed=42 max_success=5")
execute_process(COMMAND ${CLI} fuzz --target replay --preset tiny-gdn --layers 1 --cases 2 --max-commands 5
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
# Two cases pass and exercise too little for a verdict: INCOMPLETE, exit 3.
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "replayssm fuzz did not end INCOMPLETE (${rc}):\n${out}\n${err}")
endif()
if("${out}${err}" MATCHES "Using configuration" OR "${out}${err}" MATCHES "seed=42")  # the line, or any part of it
  message(FATAL_ERROR "the CLI printed RapidCheck's configuration line:\n${out}\n${err}")
endif()
execute_process(COMMAND ${PROPERTY} --gtest_filter=${FILTER} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROPERTY} failed (${rc}):\n${out}\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "Using configuration: [^\n]*seed=42")
  message(FATAL_ERROR "the property test no longer prints RapidCheck's configuration line:\n${out}\n${err}")
endif()
# A failing campaign: RapidCheck's exit message ("Some of your RapidCheck properties had failures ...
# RC_PARAMS=\"reproduce=...\"") would not reproduce it (campaigns run from --seed; the dump replays the case).
execute_process(COMMAND ${CLI} fuzz --target replay --preset tiny-gdn --layers 1 --cases 100 --fault off_by_one_accepted
                        --dump-dir ${CMAKE_CURRENT_BINARY_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT out MATCHES "replay the shrunk case")
  message(FATAL_ERROR "the faulty campaign did not fail as expected (${rc}):\n${out}\n${err}")
endif()
if("${out}${err}" MATCHES "RapidCheck properties had failures" OR "${out}${err}" MATCHES "reproduce=")
  message(FATAL_ERROR "the CLI printed RapidCheck's reproduce message:\n${out}\n${err}")
endif()
set(ENV{RC_PARAMS} "seed=42 max_success=5")
# A malformed RC_PARAMS still reaches the user through the CLI (RapidCheck's own error, then its exit).
set(ENV{RC_PARAMS} "seed=notanumber")
execute_process(COMMAND ${CLI} --version RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "Error parsing configuration")
  message(FATAL_ERROR "a malformed RC_PARAMS was not reported (${rc}):\n${out}\n${err}")
endif()
message(STATUS "RapidCheck configuration line: silent in the CLI, printed by the property test")
