// The target registry: the reference targets, plus whatever other builds register (the CUDA targets).
#include <map>

#include "pooled.hpp"
#include "replayssm/error.hpp"

namespace replayssm::ref {

namespace {
std::map<std::string, std::function<std::unique_ptr<Target>(Fault)>>& registry() {
  static std::map<std::string, std::function<std::unique_ptr<Target>(Fault)>> r{
      {"full_state", [](Fault f) { return make_full_state_target(f); }},
      {"replay", [](Fault f) { return make_replay_target(f); }},
      {"replay_tf32",
       [](Fault f) {
         require(f == Fault::None, "fault", "replay_tf32 is a precision emulation; faults go into 'replay'");
         return make_replay_tf32_target();
       }},
      {"ring", [](Fault f) { return make_spec_ring_target(f); }},
  };
  return r;
}
using PrefixFactory = std::function<std::unique_ptr<Target>(const std::string&, Fault)>;
std::map<std::string, PrefixFactory>& prefixes() {
  static std::map<std::string, PrefixFactory> p;
  return p;
}
}  // namespace

bool register_target_prefix(const std::string& prefix, PrefixFactory factory) {
  prefixes()[prefix] = std::move(factory);
  return true;
}

bool register_target(const std::string& kind, std::function<std::unique_ptr<Target>(Fault)> factory) {
  registry()[kind] = std::move(factory);
  return true;
}

std::vector<std::string> target_kinds() {
  std::vector<std::string> k;
  for (const auto& [name, f] : registry()) k.push_back(name);
  return k;
}

std::unique_ptr<Target> make_target(const std::string& kind, Fault fault) {
  for (const auto& [prefix, factory] : prefixes())
    if (kind.compare(0, prefix.size(), prefix) == 0) return factory(kind.substr(prefix.size()), fault);
  const auto it = registry().find(kind);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : target_kinds()) known += (known.empty() ? "" : ", ") + n;
    for (const auto& [prefix, factory] : prefixes()) known += ", " + prefix + "COMMAND";
    fail("target", "unknown target '", kind, "' (known: ", known, ")");
  }
  return it->second(fault);
}

}  // namespace replayssm::ref
