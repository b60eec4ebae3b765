# `cmake --install`: the libraries as exported targets (replayssm::core, ::mrope, ::recurrence, ::lifecycle,
# ::fixtures, ::reference (the three together), ::fuzz,
# ::engine_level, ::engine_fuzz, ::exec and,
# in CUDA builds, ::cuda, ::cuda_bench, ::cuda_target), their headers, the CLI, the committed fixtures under
# share/replayssm/fixtures and a package config, so an engine's test can
#   find_package(replayssm CONFIG REQUIRED)  and  target_link_libraries(my_test PRIVATE replayssm::fuzz)
# (packaging/consumer/ is such a project; scripts/test.sh builds it against a fresh install).
# Included last by the top-level CMakeLists.txt. Components: "development" (libraries, headers, package
# config), "cli" (the executable) and "fixtures".
include(CMakePackageConfigHelpers)

set(REPLAYSSM_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/replayssm")

# target -> exported name (replayssm::<name>)
set(replayssm_exports core mrope recurrence lifecycle fixtures reference fuzz engine_level engine_fuzz exec_target:exec)
if(REPLAYSSM_HAS_CUDA)
  list(APPEND replayssm_exports cuda cuda_bench cuda_target)
endif()
set(replayssm_exported)
foreach(entry ${replayssm_exports})
  string(REPLACE ":" ";" pair ${entry})
  list(GET pair 0 target)
  list(GET pair -1 name)
  set_target_properties(replayssm_${target} PROPERTIES EXPORT_NAME ${name})
  list(APPEND replayssm_exported replayssm_${target})
endforeach()

install(TARGETS ${replayssm_exported} EXPORT replayssm-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# A wheel (`pip install .`, scikit-build-core) puts the CLI in the environment's bin/ (scripts) and the fixtures
# in its share/ (data), where the CLI finds them next to its own directory.
if(SKBUILD)
  set(replayssm_bindir ${SKBUILD_SCRIPTS_DIR})
  set(replayssm_fixturedir ${SKBUILD_DATA_DIR}/${CMAKE_INSTALL_DATADIR}/replayssm/fixtures)
else()
  set(replayssm_bindir ${CMAKE_INSTALL_BINDIR})
  set(replayssm_fixturedir ${CMAKE_INSTALL_DATADIR}/replayssm/fixtures)
endif()
install(TARGETS replayssm RUNTIME DESTINATION ${replayssm_bindir} COMPONENT cli)

# Headers: one directory tree per library under include/replayssm.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/replayssm
                  ${PROJECT_SOURCE_DIR}/reference/recurrence/include/replayssm
                  ${PROJECT_SOURCE_DIR}/reference/lifecycle/include/replayssm
                  ${PROJECT_SOURCE_DIR}/reference/fixtures/include/replayssm
                  ${PROJECT_SOURCE_DIR}/reference/engine_level/include/replayssm
                  ${PROJECT_SOURCE_DIR}/reference/mrope/include/replayssm
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/reference/fuzz/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayssm/fuzz
        COMPONENT development FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/conformance/exec/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayssm/exec
        COMPONENT development FILES_MATCHING PATTERN "*.hpp")
if(REPLAYSSM_HAS_CUDA)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/optimized/include/replayssm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT development FILES_MATCHING PATTERN "*.hpp")
  install(FILES ${PROJECT_SOURCE_DIR}/conformance/cuda_target.hpp
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/replayssm/conformance COMPONENT development)
endif()

# The committed fixtures, where `replayssm conform` looks outside the source tree (tools/CMakeLists.txt).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/fixtures/ DESTINATION ${replayssm_fixturedir} COMPONENT fixtures)

install(EXPORT replayssm-targets NAMESPACE replayssm:: DESTINATION ${REPLAYSSM_CMAKE_DIR} COMPONENT development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/replayssmConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/replayssmConfig.cmake INSTALL_DESTINATION ${REPLAYSSM_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/replayssmConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/replayssmConfig.cmake ${PROJECT_BINARY_DIR}/replayssmConfigVersion.cmake
        DESTINATION ${REPLAYSSM_CMAKE_DIR} COMPONENT development)
