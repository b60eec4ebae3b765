// replayssm/manifest.hpp — the fixture manifest: one entry (name, op, config, bytes, sha256) per committed
// fixture file, so a missing, extra or modified fixture is noticed.
//
// File format (fixtures/MANIFEST.json):
//   {"schema": "replayssm.fixture-manifest", "version": 1,
//    "fixtures": [{"name": "golden/tiny-gdn/x.safetensors", "op": "recurrent", "config": {...},
//                  "bytes": 12345, "sha256": "<64 hex digits>"}, ...]}
// `name` is the path relative to the manifest's directory with '/' separators; entries are sorted by name,
// one per line. Every *.safetensors file under the directory (recursively) has exactly one entry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace replayssm {

inline constexpr const char* kManifestSchema = "replayssm.fixture-manifest";

struct ManifestEntry {
  std::string name;
  std::string op;
  nlohmann::json config;
  std::uint64_t bytes = 0;
  std::string sha256;
};

// Scans root for *.safetensors files and describes each (the fixture is loaded and validated: an invalid
// fixture throws Error naming its path).
std::vector<ManifestEntry> scan_manifest(const std::string& root);
// The manifest text for the entries (ends with a newline).
std::string manifest_text(const std::vector<ManifestEntry>& entries);
// Parses a manifest text; throws Error("manifest...") on a malformed document.
std::vector<ManifestEntry> parse_manifest(const std::string& text);

struct ManifestDiff {
  std::vector<std::string> missing;   // listed in the manifest, no such file
  std::vector<std::string> extra;     // a file the manifest does not list
  std::vector<std::string> modified;  // bytes, sha256, op or config differ
  bool ok() const { return missing.empty() && extra.empty() && modified.empty(); }
  std::string str() const;            // one line per problem, or "manifest matches"
};

// Compares the manifest file at manifest_path with the fixtures under root.
ManifestDiff check_manifest(const std::string& root, const std::string& manifest_path);
// Writes the manifest of root to manifest_path (atomically). Returns the entries written.
std::vector<ManifestEntry> write_manifest(const std::string& root, const std::string& manifest_path);

}  // namespace replayssm
