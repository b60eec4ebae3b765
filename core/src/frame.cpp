#include "replayssm/frame.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "replayssm/error.hpp"
#include "replayssm/safetensors.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm {

std::vector<std::uint8_t> encode_frame(const Frame& f) {
  require(f.msg.is_object(), "frame.msg", "must be a JSON object");
  SafetensorsFile file;
  file.tensors = f.tensors;
  file.metadata["msg"] = f.msg.dump();
  const auto body = serialize_safetensors(file);
  std::vector<std::uint8_t> out(8 + body.size());
  const std::uint64_t n = body.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, body.data(), body.size());
  return out;
}

Frame decode_frame(const std::vector<std::uint8_t>& body, const std::string& origin, const SafetensorsLimits& limits) {
  SafetensorsFile file = parse_safetensors(body, origin, limits);
  require(file.metadata.size() == 1 && file.metadata.count("msg"), origin + ".__metadata__",
          "must hold exactly one key, \"msg\"");
  Frame f;
  f.msg = parse_strict_json(file.metadata.at("msg"), origin + ".msg");
  require(f.msg.is_object(), origin + ".msg", "must be a JSON object");
  f.tensors = std::move(file.tensors);
  return f;
}

namespace {
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::uint64_t digest64(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t h = bytes;
  const std::size_t words = (bytes + 7) / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w = 0;
    const std::size_t take = std::min<std::size_t>(8, bytes - 8 * i);
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&w, p + 8 * i, take);
    } else {
      for (std::size_t b = 0; b < take; ++b) w |= static_cast<std::uint64_t>(p[8 * i + b]) << (8 * b);
    }
    h += mix(w ^ (static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull));
  }
  return mix(h);
}

}  // namespace replayssm
