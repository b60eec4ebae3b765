#include "replayssm/manifest.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/sha256.hpp"

namespace replayssm {

namespace fs = std::filesystem;

std::vector<ManifestEntry> scan_manifest(const std::string& root) {
  require(fs::is_directory(root), "root", "'", root, "' is not a directory");
  std::vector<ManifestEntry> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".safetensors") continue;
    const Fixture f = load_fixture(e.path().string());
    ManifestEntry m;
    m.name = fs::relative(e.path(), root).generic_string();
    m.op = f.op;
    m.config = f.config;
    m.bytes = static_cast<std::uint64_t>(fs::file_size(e.path()));
    m.sha256 = sha256_file(e.path().string());
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::string manifest_text(const std::vector<ManifestEntry>& entries) {
  std::ostringstream os;
  os << "{\n  \"schema\": \"" << kManifestSchema << "\",\n  \"version\": 1,\n  \"fixtures\": [";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const nlohmann::json j{{"name", e.name}, {"op", e.op}, {"config", e.config}, {"bytes", e.bytes},
                           {"sha256", e.sha256}};
    os << (i ? ",\n    " : "\n    ") << j.dump();
  }
  os << (entries.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return os.str();
}

std::vector<ManifestEntry> parse_manifest(const std::string& text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("manifest", "not valid JSON: ", e.what());
  }
  require(doc.is_object() && doc.value("schema", "") == kManifestSchema, "manifest.schema", "must be '",
          kManifestSchema, "'");
  require(doc.contains("version") && doc.at("version") == 1, "manifest.version", "must be 1");
  require(doc.contains("fixtures") && doc.at("fixtures").is_array(), "manifest.fixtures", "must be an array");
  std::vector<ManifestEntry> out;
  for (std::size_t i = 0; i < doc.at("fixtures").size(); ++i) {
    const auto& j = doc.at("fixtures")[i];
    const std::string field = "manifest.fixtures[" + std::to_string(i) + "]";
    try {
      ManifestEntry e;
      e.name = j.at("name").get<std::string>();
      e.op = j.at("op").get<std::string>();
      e.config = j.at("config");
      e.bytes = j.at("bytes").get<std::uint64_t>();
      e.sha256 = j.at("sha256").get<std::string>();
      out.push_back(std::move(e));
    } catch (const nlohmann::json::exception& e) {
      fail(field, "needs name, op, config, bytes and sha256: ", e.what());
    }
  }
  return out;
}

std::string ManifestDiff::str() const {
  if (ok()) return "manifest matches";
  std::ostringstream os;
  for (const auto& n : missing) os << "missing  " << n << " (listed in the manifest, no such file)\n";
  for (const auto& n : extra) os << "extra    " << n << " (not listed in the manifest)\n";
  for (const auto& n : modified) os << "modified " << n << " (differs from its manifest entry)\n";
  std::string s = os.str();
  s.pop_back();
  return s;
}

ManifestDiff check_manifest(const std::string& root, const std::string& manifest_path) {
  std::ifstream in(manifest_path, std::ios::binary);
  require(static_cast<bool>(in), "manifest", "cannot open '", manifest_path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::map<std::string, ManifestEntry> listed;
  for (auto& e : parse_manifest(ss.str())) {
    require(listed.count(e.name) == 0, "manifest", "'", e.name, "' is listed twice");
    listed.emplace(e.name, std::move(e));
  }
  ManifestDiff d;
  std::map<std::string, fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      files.emplace(fs::relative(e.path(), root).generic_string(), e.path());
  for (const auto& [name, entry] : listed) {
    const auto it = files.find(name);
    if (it == files.end()) {
      d.missing.push_back(name);
      continue;
    }
    bool same = static_cast<std::uint64_t>(fs::file_size(it->second)) == entry.bytes &&
                sha256_file(it->second.string()) == entry.sha256;
    if (same) {  // the bytes are pinned; the op and config listed must also be the file's own
      try {
        const Fixture f = load_fixture(it->second.string());
        same = f.op == entry.op && f.config == entry.config;
      } catch (const Error&) {
        same = false;
      }
    }
    if (!same) d.modified.push_back(name);
  }
  for (const auto& [name, path] : files)
    if (listed.count(name) == 0) d.extra.push_back(name);
  return d;
}

std::vector<ManifestEntry> write_manifest(const std::string& root, const std::string& manifest_path) {
  const auto entries = scan_manifest(root);
  const std::string text = manifest_text(entries);
  const std::string tmp = manifest_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    require(static_cast<bool>(out), "manifest", "cannot write '", tmp, "'");
    out << text;
    require(static_cast<bool>(out), "manifest", "write error on '", tmp, "'");
  }
  fs::rename(tmp, manifest_path);
  return entries;
}

}  // namespace replayssm
