// replayssm/error.hpp — the one exception type of the project.
//
// Every check on user-visible input (shapes, slots, accepted lengths, dtypes, fixture files) throws
// replayssm::Error with the name of the offending field, so a caller (a serving engine's CI, the CLI, a
// fuzz campaign) sees *which* input was wrong, not just that something was.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace replayssm {

class Error : public std::runtime_error {
 public:
  Error(std::string field, const std::string& message)
      : std::runtime_error(field.empty() ? message : field + ": " + message), field_(std::move(field)) {}
  // Name of the offending field ("accepted_len[3]", "header.data_offsets", ...); may be empty.
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... Rest>
void append_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append_all(os, rest...);
}
}  // namespace detail

// Throws Error(field, concatenation of parts).
template <class... Parts>
[[noreturn]] void fail(const std::string& field, const Parts&... parts) {
  std::ostringstream os;
  detail::append_all(os, parts...);
  throw Error(field, os.str());
}

// Throws Error(field, parts...) unless cond holds.
template <class... Parts>
void require(bool cond, const std::string& field, const Parts&... parts) {
  if (!cond) fail(field, parts...);
}

}  // namespace replayssm
