// Shared by the libFuzzer harnesses (one file per parser in this folder, docs/fuzzing.md).
//
// The contract every harness checks: a parser of hostile input either returns a value or throws
// replayssm::Error (which names the field). Any other exception escapes LLVMFuzzerTestOneInput and libFuzzer
// reports it as a crash; so do sanitizer reports, leaks, hangs (-timeout) and huge allocations
// (-malloc_limit_mb / -rss_limit_mb). Round trips that must hold are checked with REPLAYSSM_FUZZ_CHECK.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "replayssm/safetensors.hpp"

#define REPLAYSSM_FUZZ_CHECK(cond)                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Every harness reads with tighter caps than the defaults (4 GiB per tensor, 16 GiB per file) through the
// public API (set_default_safetensors_limits), so that an input that declares a large output is refused by
// the cap instead of exhausting the fuzzer's 2 GiB memory limit; the caps' own code paths are exercised too.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  replayssm::set_default_safetensors_limits(replayssm::SafetensorsLimits{16u << 20, 64u << 20});
  return 0;
}

namespace replayssm::fuzzing {

inline std::vector<std::uint8_t> bytes_of(const std::uint8_t* data, std::size_t size) {
  return std::vector<std::uint8_t>(data, data + size);
}
inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace replayssm::fuzzing
