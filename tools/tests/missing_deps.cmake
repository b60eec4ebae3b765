# Configuring without the build dependencies (here CLI11 and rapidcheck hidden with CMAKE_DISABLE_FIND_PACKAGE)
# stops at once with one message naming each missing package and its Debian package, as `pip install .` shows.
# -DSOURCE=<repository root> -DWORK=<scratch directory>
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK} -DREPLAYSSM_ENABLE_CUDA=OFF -DREPLAYSSM_BUILD_TESTS=OFF
                        -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_rapidcheck=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE_RECURSE ${WORK})
if(rc EQUAL 0)
  message(FATAL_ERROR "configuring without CLI11 and rapidcheck succeeded")
endif()
foreach(expected "missing build dependencies" "CLI11 \\(Debian package libcli11-dev\\)"
                 "rapidcheck \\(Debian package librapidcheck-dev\\)" "scripts/install-deps.sh")
  if(NOT err MATCHES "${expected}")
    message(FATAL_ERROR "the configure error does not say '${expected}':\n${err}")
  endif()
endforeach()
if(err MATCHES "Eigen3 \\(Debian" OR err MATCHES "nlohmann_json \\(Debian")
  message(FATAL_ERROR "a package that is present was reported missing:\n${err}")
endif()
message(STATUS "missing dependencies named: CLI11, rapidcheck")
