#include "rc_campaign.hpp"

#include <filesystem>

#include "replayssm/frame.hpp"

namespace replayssm::fuzz {

std::string failure_dump_path(const std::string& dir, const std::string& prefix, const std::string& target,
                              std::uint64_t seed) {
  const std::string d = dir.empty() ? "." : dir;
  std::filesystem::create_directories(d);
  const std::string name =
      target.rfind("exec:", 0) == 0 ? "exec-" + std::to_string(digest64(target.data(), target.size())) : target;
  return (std::filesystem::path(d) / ("fuzz-failure-" + prefix + name + "-" + std::to_string(seed) + ".safetensors"))
      .string();
}

}  // namespace replayssm::fuzz
