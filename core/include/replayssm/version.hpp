// replayssm/version.hpp — the project version, from the top-level CMake project() call.
#pragma once

#include <string>

namespace replayssm {

// "MAJOR.MINOR.PATCH", e.g. "0.1.0". Fixtures record it as generator_version.
std::string project_version();

}  // namespace replayssm
