# The build dependencies, all Debian packages (scripts/install-deps.sh installs them). Every missing one is
# collected first, so a build without them (`pip install .` included) stops once, naming each missing
# package and the Debian package that provides it, instead of at the first find_package.
set(replayssm_missing)
macro(replayssm_require pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    list(APPEND replayssm_missing "${pkg} (Debian package ${debian})")
  endif()
endmacro()

replayssm_require(Eigen3 libeigen3-dev 3.4 NO_MODULE)
replayssm_require(nlohmann_json nlohmann-json3-dev 3.10 CONFIG)
replayssm_require(CLI11 libcli11-dev 2.1 CONFIG)
# RapidCheck (no version file in the Debian package, so no version request) drives both the property tests
# and the command-sequence generator of `replayssm fuzz`.
replayssm_require(rapidcheck librapidcheck-dev CONFIG)
replayssm_require(OpenSSL libssl-dev 3 COMPONENTS Crypto)  # SHA-256 of the fixture manifest
if(REPLAYSSM_BUILD_TESTS)
  replayssm_require(GTest "libgtest-dev libgmock-dev" CONFIG)
endif()

if(replayssm_missing)
  list(JOIN replayssm_missing "\n  " replayssm_missing_text)
  message(FATAL_ERROR "replayssm: missing build dependencies:\n  ${replayssm_missing_text}\n"
                      "Install them with `bash scripts/install-deps.sh` (Debian 12 or newer), or with apt-get.")
endif()
