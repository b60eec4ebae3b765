# Runs `replayssm bench kernels` on one tiny configuration (-DCLI=<replayssm binary>).
#   No usable CUDA device: the exit status must be 2 and stderr must say that no CUDA device was found.
#   With a device: the exit status must be 0 and stdout must hold the table row of batch 1, T 2.
execute_process(COMMAND "${CLI}" bench kernels --batches 1 --T 2 --repeats 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "no CUDA device" no_device)
if(NOT no_device EQUAL -1)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "no device: expected exit status 2, got ${rc}\n${err}")
  endif()
  message(STATUS "no CUDA device: exit status 2 as expected")
else()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit status ${rc}:\n${out}\n${err}")
  endif()
  string(FIND "${out}" "| 1 | 2 | 2 |" row)
  if(row EQUAL -1)
    message(FATAL_ERROR "no table row for batch 1, T 2:\n${out}")
  endif()
endif()
