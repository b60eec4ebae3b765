// Target-protocol frames: round trip, refusal of malformed bodies naming the field, and the digest's fixed
// test vectors (the Python kit checks the same vectors: tools/python/tests/test_protocol.py).
#include <gtest/gtest.h>

#include <cstring>

#include "replayssm/error.hpp"
#include "replayssm/testing/field_of.hpp"
#include "replayssm/frame.hpp"
#include "replayssm/safetensors.hpp"

using namespace replayssm;
using replayssm::testing::field_of;

namespace {
std::vector<std::uint8_t> body_of(const std::vector<std::uint8_t>& framed) {
  return std::vector<std::uint8_t>(framed.begin() + 8, framed.end());
}
}  // namespace

TEST(Frame, RoundTripKeepsMessageAndTensorsBitForBit) {
  Frame f;
  f.msg = {{"op", "step"}, {"rows", {{{"slot", 3}, {"T", 2}}}}, {"total_tokens", 2}};
  f.tensors["q.0"] = Tensor::from_f32(DType::BF16, {2, 1, 4}, {1, -2, 3.5f, 0, 0.25f, 8, -0.125f, 1e-3f});
  f.tensors["o.0"] = Tensor::from_f32(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const auto framed = encode_frame(f);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(framed[static_cast<std::size_t>(i)]) << (8 * i);
  ASSERT_EQ(n + 8, framed.size());
  const Frame g = decode_frame(body_of(framed));
  EXPECT_EQ(g.msg, f.msg);
  ASSERT_EQ(g.tensors.size(), 2u);
  EXPECT_EQ(g.tensors.at("q.0").data, f.tensors.at("q.0").data);
  EXPECT_EQ(g.tensors.at("o.0").shape, (Shape{2, 3}));
}

TEST(Frame, MalformedBodiesNameTheField) {
  SafetensorsFile no_msg;
  no_msg.metadata["other"] = "{}";
  EXPECT_EQ(field_of([&] { decode_frame(serialize_safetensors(no_msg), "answer"); }), "answer.__metadata__");
  SafetensorsFile not_json;
  not_json.metadata["msg"] = "{op";
  EXPECT_EQ(field_of([&] { decode_frame(serialize_safetensors(not_json), "answer"); }), "answer.msg");
  SafetensorsFile not_object;
  not_object.metadata["msg"] = "[1, 2]";
  EXPECT_EQ(field_of([&] { decode_frame(serialize_safetensors(not_object), "answer"); }), "answer.msg");
  std::vector<std::uint8_t> junk{1, 2, 3};
  EXPECT_EQ(field_of([&] { decode_frame(junk, "answer"); }), "header.length");
  Frame bad;
  bad.msg = nlohmann::json::array();
  EXPECT_EQ(field_of([&] { encode_frame(bad); }), "frame.msg");
}

// Found lax while fuzzing (docs/fuzzing.md): nlohmann kept the last of two duplicate keys and stopped reading
// at a NUL, so {"ok": false, "ok": true} read as a success and "{..}\0junk" as "{..}".
TEST(Frame, MessageWithDuplicateKeyOrNulIsRefused) {
  SafetensorsFile dup;
  dup.metadata["msg"] = R"({"ok": false, "ok": true})";
  EXPECT_EQ(field_of([&] { decode_frame(serialize_safetensors(dup), "answer"); }), "answer.msg");
  SafetensorsFile nul;
  nul.metadata["msg"] = std::string("{\"ok\": true}\0{", 14);
  EXPECT_EQ(field_of([&] { decode_frame(serialize_safetensors(nul), "answer"); }), "answer.msg");
}

TEST(Frame, Digest64FixedVectors) {
  std::vector<std::uint8_t> b(37);
  for (int i = 0; i < 37; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i * 7 + 3);
  EXPECT_EQ(digest64(b.data(), 0), 0x0000000000000000ull);
  EXPECT_EQ(digest64(b.data(), 1), 0xb29a3bd06eedafe8ull);
  EXPECT_EQ(digest64(b.data(), 8), 0xe4948afc7ee3b87cull);
  EXPECT_EQ(digest64(b.data(), 37), 0x75bc6a1e0be150a3ull);
  const float f[3] = {1.0f, -2.5f, 0.0f};
  EXPECT_EQ(digest64(f, sizeof f), 0x456ec1a313799c14ull);
  // Any single changed bit changes the digest (every bit of a 37-byte string).
  const auto d = digest64(b.data(), 37);
  for (std::size_t i = 0; i < 37 * 8; ++i) {
    auto c = b;
    c[i / 8] ^= static_cast<std::uint8_t>(1u << (i % 8));
    EXPECT_NE(digest64(c.data(), 37), d) << "bit " << i;
  }
}
