// libFuzzer harness: target protocol frames (core/src/frame.cpp decode_frame). A decoded frame encodes and
// decodes to the same message and tensors.
#include <cstring>

#include "harness.hpp"
#include "replayssm/error.hpp"
#include "replayssm/frame.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Frame f;
  try {
    f = decode_frame(fuzzing::bytes_of(data, size), "frame");
  } catch (const Error&) {
    return 0;
  }
  const auto wire = encode_frame(f);
  REPLAYSSM_FUZZ_CHECK(wire.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(wire[static_cast<std::size_t>(i)]) << (8 * i);
  REPLAYSSM_FUZZ_CHECK(n == wire.size() - 8);
  const Frame g = decode_frame(std::vector<std::uint8_t>(wire.begin() + 8, wire.end()), "round trip");
  REPLAYSSM_FUZZ_CHECK(g.msg == f.msg && g.tensors.size() == f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    const auto it = g.tensors.find(name);
    REPLAYSSM_FUZZ_CHECK(it != g.tensors.end() && it->second.dtype == t.dtype && it->second.shape == t.shape &&
                         it->second.data == t.data);
  }
  return 0;
}
