// replayssm/frame.hpp — one message of the target protocol (docs/target-protocol.md) and the content digest
// the protocol uses for bitwise checks.
//
// Wire form of a frame: N as an unsigned 64-bit little-endian length, then N bytes that are a safetensors
// container (safetensors.hpp) whose __metadata__ holds exactly one key, "msg": a JSON object as text (the
// command or the answer); the container's tensors are the frame's tensors. Any language with a safetensors
// library can speak it; tensors cross as raw little-endian bytes, never as decimal text.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/safetensors.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm {

struct Frame {
  nlohmann::json msg = nlohmann::json::object();
  std::map<std::string, Tensor> tensors;
};

// Largest frame body accepted from a peer (bytes), checked before anything is allocated.
inline constexpr std::uint64_t kDefaultMaxFrameBytes = 8ull << 30;

// Length prefix + body. Throws Error("frame.msg") unless msg is an object, or the serializer's Error.
std::vector<std::uint8_t> encode_frame(const Frame& f);
// Decodes a body (the N bytes after the prefix). Errors name "<origin>" and the field: the container's own
// fields (safetensors.hpp, with `limits`), "<origin>.__metadata__" (keys other than "msg", or none),
// "<origin>.msg" (not JSON, not an object, a duplicate key, a NUL, nesting deeper than strict_json.hpp allows).
Frame decode_frame(const std::vector<std::uint8_t>& body, const std::string& origin = "frame",
                   const SafetensorsLimits& limits = default_safetensors_limits());

// 64-bit content digest of a byte string: with w_i the little-endian 64-bit words of the bytes (the last
// one zero-padded) and mix the SplitMix64 finalizer,
//   digest = mix(n + sum_i mix(w_i xor (i * 0x9E3779B97F4A7C15)))   (mod 2^64, n = byte count).
// Not cryptographic: it detects accidental change (a stray write), not an adversary. The Python kit
// computes the same function (replayssm_kit.protocol.digest64).
std::uint64_t digest64(const void* data, std::size_t bytes);

}  // namespace replayssm
