// Small helpers shared by the MRoPE unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope.hpp"

// Expects `stmt` to throw replayssm::Error whose field() equals `field_name`.
#define EXPECT_ERROR_FIELD(stmt, field_name)                                              \
  do {                                                                                    \
    try {                                                                                 \
      stmt;                                                                               \
      ADD_FAILURE() << "expected replayssm::Error(" << (field_name) << ") from " #stmt;   \
    } catch (const replayssm::Error& e) {                                                 \
      EXPECT_EQ(e.field(), std::string(field_name)) << e.what();                          \
    }                                                                                     \
  } while (0)

namespace mrope_test {

using replayssm::mrope::Pos3;

// Builds rows from three per-axis lists written out by hand.
inline std::vector<Pos3> rows(const std::vector<std::int64_t>& t, const std::vector<std::int64_t>& h,
                              const std::vector<std::int64_t>& w) {
  std::vector<Pos3> out;
  for (std::size_t i = 0; i < t.size(); ++i) out.push_back({t[i], h[i], w[i]});
  return out;
}

inline std::vector<Pos3> diag(std::int64_t from, std::int64_t count) {
  std::vector<Pos3> out;
  for (std::int64_t i = 0; i < count; ++i) out.push_back({from + i, from + i, from + i});
  return out;
}

inline std::vector<Pos3> concat(std::vector<Pos3> a, const std::vector<Pos3>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace mrope_test
