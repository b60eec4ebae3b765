#include "replayssm/version.hpp"

#ifndef REPLAYSSM_VERSION_STRING
#error "REPLAYSSM_VERSION_STRING must be defined by the build (core/CMakeLists.txt)"
#endif

namespace replayssm {

std::string project_version() { return REPLAYSSM_VERSION_STRING; }

}  // namespace replayssm
