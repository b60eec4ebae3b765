// Atomic writes and file reading: nothing half-written, no temporary file left behind.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>

#include "replayssm/error.hpp"
#include "replayssm/testing/field_of.hpp"
#include "replayssm/safetensors.hpp"

using namespace replayssm;
using replayssm::testing::field_of;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "replayssm-st-XXXXXX").string();
    const char* made = ::mkdtemp(tmpl.data());
    if (!made) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::set<std::string> listing() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.insert(e.path().filename().string());
    return out;
  }

 private:
  fs::path path_;
};

std::vector<std::uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

SafetensorsFile sample(float v) {
  SafetensorsFile f;
  f.tensors["x"] = Tensor::from_f32(DType::F32, {2, 2}, {v, v + 1, v + 2, v + 3});
  f.metadata["v"] = std::to_string(v);
  return f;
}


}  // namespace

TEST(SafetensorsAtomic, WritesReadsAndReplaces) {
  TempDir dir;
  const std::string path = (dir.path() / "a.safetensors").string();
  write_safetensors_atomic(path, sample(1));
  EXPECT_EQ(read_safetensors(path), sample(1));
  EXPECT_EQ(file_bytes(path), serialize_safetensors(sample(1)));
  write_safetensors_atomic(path, sample(5));
  EXPECT_EQ(read_safetensors(path), sample(5));
  EXPECT_EQ(dir.listing(), (std::set<std::string>{"a.safetensors"}));
}

TEST(SafetensorsAtomic, MissingDirectoryLeavesNothing) {
  TempDir dir;
  const fs::path missing = dir.path() / "no-such-dir";
  EXPECT_EQ(field_of([&] { write_safetensors_atomic((missing / "a.safetensors").string(), sample(1)); }), "path");
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_TRUE(dir.listing().empty());
}

TEST(SafetensorsAtomic, InvalidInputKeepsTheExistingFile) {
  TempDir dir;
  const std::string path = (dir.path() / "keep.safetensors").string();
  write_safetensors_atomic(path, sample(1));
  const auto before = file_bytes(path);
  SafetensorsFile bad = sample(2);
  bad.tensors["x"].data.pop_back();  // 15 bytes for a 16-byte tensor
  EXPECT_EQ(field_of([&] { write_safetensors_atomic(path, bad); }), "tensor 'x'.data");
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_EQ(dir.listing(), (std::set<std::string>{"keep.safetensors"}));
}

TEST(SafetensorsAtomic, FailedRenameRemovesTheTemporaryFile) {
  TempDir dir;
  // The target is a non-empty directory: the temporary file is written, the rename fails.
  const fs::path target = dir.path() / "taken";
  fs::create_directory(target);
  std::ofstream(target / "inside") << "x";
  EXPECT_EQ(field_of([&] { write_safetensors_atomic(target.string(), sample(1)); }), "path");
  EXPECT_EQ(dir.listing(), (std::set<std::string>{"taken"}));
  EXPECT_TRUE(fs::is_directory(target));
}

TEST(SafetensorsAtomic, ReadErrorsNameThePath) {
  TempDir dir;
  EXPECT_EQ(field_of([&] { read_safetensors((dir.path() / "absent.safetensors").string()); }), "path");
  EXPECT_EQ(field_of([&] { read_safetensors(dir.path().string()); }), "path");
  EXPECT_EQ(field_of([&] { write_safetensors_atomic((dir.path() / "").string(), sample(1)); }), "path");
  // A malformed file names the field, and the message names the file.
  const fs::path bad = dir.path() / "bad.safetensors";
  std::ofstream(bad, std::ios::binary) << "abc";
  try {
    read_safetensors(bad.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "header.length");
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
  }
}
