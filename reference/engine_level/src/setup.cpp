// Engine-level setup, options, the engine-level fault catalogue's table and the engine registry.
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/engine_level/request_engine.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::ref::engine_level {

std::string to_string(CommitMode m) { return m == CommitMode::SameIteration ? "same_iteration" : "next_step"; }
std::string to_string(Buffering b) { return b == Buffering::InPlace ? "in_place" : "double"; }
std::string to_string(Status s) {
  return s == Status::Running ? "running" : s == Status::Finished ? "finished" : "preempted";
}

CommitMode parse_commit_mode(const std::string& s, const std::string& field) {
  if (s == "same_iteration") return CommitMode::SameIteration;
  if (s == "next_step") return CommitMode::NextStep;
  fail(field, "unknown commit mode '", s, "' (same_iteration, next_step)");
}
Buffering parse_buffering(const std::string& s, const std::string& field) {
  if (s == "in_place") return Buffering::InPlace;
  if (s == "double") return Buffering::Double;
  fail(field, "unknown buffering '", s, "' (in_place, double)");
}

nlohmann::json EngineOptions::to_json() const {
  nlohmann::json j{{"max_live", max_live}, {"commit", to_string(commit)}, {"buffers", to_string(buffers)}};
  if (block > 0) j["block"] = block;
  return j;
}

EngineOptions EngineOptions::from_json(const nlohmann::json& j, const std::string& field) {
  require_only_keys(j, {"max_live", "commit", "buffers", "block"}, field);
  EngineOptions o;
  o.max_live = static_cast<std::int32_t>(json_int(require_key(j, "max_live", field), field + ".max_live", 1, 2047));
  o.commit = parse_commit_mode(json_string(require_key(j, "commit", field), field + ".commit"), field + ".commit");
  o.buffers = parse_buffering(json_string(require_key(j, "buffers", field), field + ".buffers"), field + ".buffers");
  if (j.contains("block")) o.block = static_cast<std::int32_t>(json_int(j.at("block"), field + ".block", 1, 4096));
  return o;
}

void EngineLevelSetup::validate() const {
  base.validate();
  require(options.max_live >= 1, "options.max_live", "must be >= 1, got ", options.max_live);
  require(options.block >= 0, "options.block", "must be >= 0, got ", options.block);
  const std::int32_t per = (options.buffers == Buffering::Double ? 2 : 1) + (options.block > 0 ? 1 : 0);
  require(static_cast<std::int64_t>(options.max_live) * per <= base.num_slots, "options.max_live", "is ",
          options.max_live, ": ", per, " slot(s) per request do not fit num_slots = ", base.num_slots);
}

EngineLevelSetup make_engine_level_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t max_live,
                                         std::int32_t max_T, EngineOptions options) {
  options.max_live = max_live;
  EngineLevelSetup s{make_setup(cfg, seed, (options.block > 0 ? 3 : 2) * max_live + 2, max_T), options};
  s.validate();
  return s;
}

namespace {
struct FaultInfo {
  EngineFault f;
  const char* name;
  const char* scope;
};
const std::vector<FaultInfo>& table() {
  static const std::vector<FaultInfo> t{
      {EngineFault::None, "none", ""},
      {EngineFault::AcceptedByRowPosition, "accepted_by_row_position", "H7, H8; any options"},
      {EngineFault::DeferredCommitAfterFree, "deferred_commit_after_free", "H12; commit next_step"},
      {EngineFault::TenantInheritsBufferIndex, "tenant_inherits_buffer_index", "H12; buffers double"},
      {EngineFault::PrefixHitSharesSlot, "prefix_hit_shares_slot", "H9, H10; any options"},
      {EngineFault::PendingCommitLostOnPreempt, "pending_commit_lost_on_preempt", "commit next_step"},
      {EngineFault::StopTokenIgnoredAtCap, "stop_token_ignored_at_cap", "H11; any options"},
      {EngineFault::SnapshotAtRunEnd, "snapshot_at_run_end", "H10; reference engine, block > 0"},
      {EngineFault::SnapshotCountsRejectedDrafts, "snapshot_counts_rejected_drafts", "H9; reference engine, block > 0"},
      {EngineFault::SnapshotWithoutFlush, "snapshot_without_flush", "H10; ring engine, block > 0"},
      {EngineFault::CowKeepsWritePos, "cow_keeps_write_pos", "H9, H10; ring engine, block > 0"},
      {EngineFault::MigrationDropsRingRecords, "migration_drops_ring_records", "H16; ring engine"},
  };
  return t;
}
}  // namespace

std::string to_string(EngineFault f) {
  for (const auto& i : table())
    if (i.f == f) return i.name;
  return "unknown";
}
EngineFault parse_engine_fault(const std::string& s) {
  std::string known;
  for (const auto& i : table()) {
    if (s == i.name) return i.f;
    known += (known.empty() ? "" : ", ") + std::string(i.name);
  }
  fail("fault", "unknown engine-level fault '", s, "' (known: ", known, ")");
}
std::vector<EngineFault> all_engine_faults() {
  std::vector<EngineFault> v;
  for (const auto& i : table())
    if (i.f != EngineFault::None) v.push_back(i.f);
  return v;
}
std::string engine_fault_scope(EngineFault f) {
  for (const auto& i : table())
    if (i.f == f) return i.scope;
  return {};
}

std::unique_ptr<RequestEngine> make_reference_request_engine(EngineFault fault);  // reference_engine.cpp
std::unique_ptr<RequestEngine> make_ring_request_engine(EngineFault fault);       // ring_engine.cpp

void RequestEngine::snapshot_hit(std::int32_t, std::int32_t, const std::vector<SequenceInputs>&, std::int32_t) {
  fail("snapshot", "engine '", name(), "' keeps no prefix snapshots");
}
std::int32_t RequestEngine::snapshot_tokens(std::int32_t) const {
  fail("snapshot", "engine '", name(), "' keeps no prefix snapshots");
}
std::vector<float> RequestEngine::snapshot_state(std::int32_t, std::int32_t) const {
  fail("snapshot", "engine '", name(), "' keeps no prefix snapshots");
}
void RequestEngine::migrate(std::int32_t) { fail("migrate", "engine '", name(), "' does not migrate requests"); }

namespace {
using Factory = std::function<std::unique_ptr<RequestEngine>(const std::string&)>;
std::map<std::string, Factory>& prefixes() {
  static std::map<std::string, Factory> m;
  return m;
}
}  // namespace

bool register_request_engine_prefix(const std::string& prefix, Factory factory) {
  prefixes()[prefix] = std::move(factory);
  return true;
}

std::unique_ptr<RequestEngine> make_request_engine(const std::string& name, EngineFault fault) {
  if (name == "reference") return make_reference_request_engine(fault);
  if (name == "ring") return make_ring_request_engine(fault);
  require(fault == EngineFault::None, "fault", "engine-level faults exist only in the reference and ring engines");
  for (const auto& [prefix, factory] : prefixes())
    if (name.rfind(prefix, 0) == 0) return factory(name.substr(prefix.size()));
  std::string known = "reference, ring";
  for (const auto& [prefix, factory] : prefixes()) known += ", " + prefix + "...";
  fail("target", "unknown engine-level implementation '", name, "' (known: ", known, ")");
}
std::vector<std::string> request_engine_kinds() {
  std::vector<std::string> v{"reference", "ring"};
  for (const auto& [prefix, factory] : prefixes()) v.push_back(prefix + "...");
  return v;
}

}  // namespace replayssm::ref::engine_level
