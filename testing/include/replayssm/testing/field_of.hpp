// Test helper: the field a call's replayssm::Error names ("<no error>" when it throws none), so a test
// asserts *which* input was refused, not only that something was.
#pragma once

#include <string>

#include "replayssm/error.hpp"

namespace replayssm::testing {

template <class F>
std::string field_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.field();
  }
  return "<no error>";
}

}  // namespace replayssm::testing
