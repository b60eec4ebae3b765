// SafetensorsLimits: absolute caps on one tensor and on a whole file, checked before anything is allocated
// (a hostile file declares its own shapes), settable through the API.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/frame.hpp"
#include "replayssm/safetensors.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;

namespace {
using replayssm::testing::field_of;

SafetensorsFile one_tensor(std::int64_t n) {
  SafetensorsFile f;
  f.tensors["x"] = Tensor::zeros(DType::F32, {n});
  return f;
}

// Restores the process-wide default when a test ends.
struct DefaultLimits {
  SafetensorsLimits saved = default_safetensors_limits();
  ~DefaultLimits() { set_default_safetensors_limits(saved); }
};
}  // namespace

TEST(SafetensorsLimits, DefaultsAreFourGiBPerTensorAndSixteenPerFile) {
  const SafetensorsLimits d = default_safetensors_limits();
  EXPECT_EQ(d.max_tensor_bytes, 4ull << 30);
  EXPECT_EQ(d.max_file_bytes, 16ull << 30);
}

TEST(SafetensorsLimits, TensorCapNamesTheTensor) {
  const auto bytes = serialize_safetensors(one_tensor(100));  // 400 bytes of data
  EXPECT_NO_THROW(parse_safetensors(bytes, "m", SafetensorsLimits{400, 1 << 20}));
  EXPECT_EQ(field_of([&] { parse_safetensors(bytes, "m", SafetensorsLimits{399, 1 << 20}); }), "tensor 'x'.shape");
}

TEST(SafetensorsLimits, FileCapIsCheckedFirst) {
  const auto bytes = serialize_safetensors(one_tensor(100));
  EXPECT_EQ(field_of([&] { parse_safetensors(bytes, "m", SafetensorsLimits{1 << 20, bytes.size() - 1}); }), "file");
  EXPECT_NO_THROW(parse_safetensors(bytes, "m", SafetensorsLimits{1 << 20, bytes.size()}));
}

TEST(SafetensorsLimits, ProcessDefaultReachesEveryReader) {
  DefaultLimits restore;
  Frame fr;
  fr.tensors["x"] = Tensor::zeros(DType::F32, {100});
  const auto wire = encode_frame(fr);
  const std::vector<std::uint8_t> body(wire.begin() + 8, wire.end());
  set_default_safetensors_limits(SafetensorsLimits{399, 1 << 20});
  EXPECT_EQ(field_of([&] { parse_safetensors(serialize_safetensors(one_tensor(100))); }), "tensor 'x'.shape");
  EXPECT_EQ(field_of([&] { decode_frame(body, "answer"); }), "tensor 'x'.shape");
  set_default_safetensors_limits(SafetensorsLimits{1 << 20, 1 << 20});
  EXPECT_NO_THROW(decode_frame(body, "answer"));
  EXPECT_EQ(field_of([] { set_default_safetensors_limits(SafetensorsLimits{0, 1}); }), "limits.max_tensor_bytes");
  EXPECT_EQ(field_of([] { set_default_safetensors_limits(SafetensorsLimits{1, 0}); }), "limits.max_file_bytes");
}

TEST(SafetensorsLimits, HugeFileIsRefusedBeforeItIsRead) {
  // A sparse 20 GiB file: read_safetensors must refuse it from its size, without allocating 20 GiB.
  const auto path = std::filesystem::temp_directory_path() / ("replayssm-huge-" + std::to_string(::getpid()));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(20ull << 30)), 0);
  ::close(fd);
  EXPECT_EQ(field_of([&] { read_safetensors(path.string()); }), "file");
  EXPECT_EQ(field_of([&] { load_fixture(path.string()); }), "file");
  EXPECT_EQ(field_of([&] { read_safetensors(path.string(), SafetensorsLimits{1 << 20, 1 << 20}); }), "file");
  std::filesystem::remove(path);
}
