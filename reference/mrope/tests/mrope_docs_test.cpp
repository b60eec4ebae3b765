// The documented MRoPE examples: the library's answer for every docs/examples/mrope/NAME.json equals
// NAME.out.json byte for byte, and docs/mrope.md shows both files verbatim.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "replayssm/mrope/mrope_json.hpp"

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

TEST(MropeDocs, ExamplesAreCurrent) {
  const fs::path root(REPLAYSSM_SOURCE_DIR);
  const fs::path dir = root / "docs" / "examples" / "mrope";
  const std::string doc = read_text(root / "docs" / "mrope.md");
  ASSERT_FALSE(doc.empty());
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".out.json";
    if (entry.path().extension() != ".json" ||
        (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)) {
      continue;
    }
    const fs::path out_path = dir / (entry.path().stem().string() + suffix);
    ASSERT_TRUE(fs::exists(out_path)) << out_path;
    const std::string expected = read_text(out_path);
    const std::string model = nlohmann::json::parse(expected).at("model").get<std::string>();
    EXPECT_EQ(replayssm::mrope::positions_report_text(model, entry.path().string()), expected) << name;
    EXPECT_NE(doc.find(read_text(entry.path())), std::string::npos) << name << " is not shown in docs/mrope.md";
    EXPECT_NE(doc.find(expected), std::string::npos) << name << " output is not shown in docs/mrope.md";
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
