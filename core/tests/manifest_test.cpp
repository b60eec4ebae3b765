// SHA-256 against published test vectors, and the fixture manifest: it matches the committed fixtures, and a
// missing, extra or modified file (or a hand-edited entry) is reported.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/manifest.hpp"
#include "replayssm/sha256.hpp"

using namespace replayssm;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("replayssm-manifest-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p / "sub");
  return p;
}

void write_sample(const fs::path& path, float value) {
  Fixture f;
  f.op = "example.double";
  f.config = nlohmann::json{{"k", 1}};
  f.tensors["in.x"] = Tensor::from_f32(DType::F32, {2}, {value, 1.0f});
  f.tensors["out.y"] = Tensor::from_f32(DType::F32, {2}, {2 * value, 2.0f});
  f.tolerance["out.y"] = Tolerance::exact();
  save_fixture(path.string(), f);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Sha256, PublishedVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Message lengths around the padding boundary (55, 56, 63, 64 bytes) all hash without error and differ.
  std::set<std::string> seen;
  for (int n : {55, 56, 63, 64, 65}) seen.insert(sha256_hex(std::string(static_cast<std::size_t>(n), 'x')));
  EXPECT_EQ(seen.size(), 5u);
}

TEST(Manifest, DetectsMissingExtraAndModifiedFiles) {
  const auto dir = temp_dir("diff");
  write_sample(dir / "a.safetensors", 1.0f);
  write_sample(dir / "sub" / "b.safetensors", 2.0f);
  const auto man = dir / "MANIFEST.json";
  const auto entries = write_manifest(dir.string(), man.string());
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].name, "sub/b.safetensors");
  EXPECT_EQ(entries[0].op, "example.double");
  EXPECT_TRUE(check_manifest(dir.string(), man.string()).ok());
  EXPECT_EQ(parse_manifest(slurp(man)).size(), 2u);

  write_sample(dir / "a.safetensors", 3.0f);  // modified content, same size
  auto d = check_manifest(dir.string(), man.string());
  EXPECT_EQ(d.modified, std::vector<std::string>{"a.safetensors"});
  EXPECT_TRUE(d.missing.empty() && d.extra.empty());
  write_sample(dir / "a.safetensors", 1.0f);
  EXPECT_TRUE(check_manifest(dir.string(), man.string()).ok());

  fs::remove(dir / "sub" / "b.safetensors");
  write_sample(dir / "c.safetensors", 4.0f);
  d = check_manifest(dir.string(), man.string());
  EXPECT_EQ(d.missing, std::vector<std::string>{"sub/b.safetensors"});
  EXPECT_EQ(d.extra, std::vector<std::string>{"c.safetensors"});
  EXPECT_NE(d.str().find("missing  sub/b.safetensors"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Manifest, HandEditedEntryIsReported) {
  const auto dir = temp_dir("edit");
  write_sample(dir / "a.safetensors", 1.0f);
  const auto man = dir / "MANIFEST.json";
  write_manifest(dir.string(), man.string());
  std::string text = slurp(man);
  const auto pos = text.find("\"op\":\"example.double\"");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 21, "\"op\":\"example.triple\"");
  std::ofstream(man, std::ios::binary | std::ios::trunc) << text;
  EXPECT_EQ(check_manifest(dir.string(), man.string()).modified, std::vector<std::string>{"a.safetensors"});
  std::ofstream(man, std::ios::binary | std::ios::trunc) << "{\"schema\": \"other\"}";
  try {
    check_manifest(dir.string(), man.string());
    FAIL() << "a manifest with the wrong schema was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "manifest.schema");
  }
  fs::remove_all(dir);
}

TEST(Manifest, CommittedManifestMatchesCommittedFixtures) {
  const fs::path root = fs::path(REPLAYSSM_SOURCE_DIR) / "fixtures";
  const auto d = check_manifest(root.string(), (root / "MANIFEST.json").string());
  EXPECT_TRUE(d.ok()) << d.str()
                      << "\n(after changing fixtures on purpose: ./build/tools/replayssm fixtures manifest fixtures)";
}
