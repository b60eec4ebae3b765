// The engine-level judge (judge.hpp).
#include "replayssm/engine_level/judge.hpp"

#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm::ref::engine_level {

namespace {
double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x)
    if (std::isfinite(e)) m = std::max(m, static_cast<double>(std::fabs(e)));
  return m;
}
std::string who(std::int32_t req) { return "request " + std::to_string(req); }
std::string status_str(const RequestStatus& s) {
  return to_string(s.status) + ", committed " + std::to_string(s.committed) + ", to prefill " +
         std::to_string(s.to_prefill) + ", generated " + std::to_string(s.generated);
}
}  // namespace

EngineJudge::EngineJudge(const EngineLevelSetup& setup, std::unique_ptr<RequestEngine> sut) : truth_(setup) {
  require(setup.options.block == 0 || sut->prefix_snapshots(), "options.block", "engine '", sut->name(),
          "' keeps no prefix snapshots (block = ", setup.options.block, ")");
  suts_.push_back(Candidate{setup.options, std::move(sut)});
  suts_.back().engine->setup(setup);
}

EngineJudge::EngineJudge(const EngineLevelSetup& setup, std::vector<Candidate> suts)
    : truth_(setup), suts_(std::move(suts)) {
  require(!suts_.empty(), "engines", "at least one engine to judge");
  for (auto& c : suts_) {
    EngineLevelSetup own = setup;
    own.options = c.options;
    own.options.max_live = setup.options.max_live;
    own.options.block = setup.options.block;
    require(own.options.block == 0 || c.engine->prefix_snapshots(), "options.block", "engine '", c.engine->name(),
            "' keeps no prefix snapshots (block = ", own.options.block, ")");
    c.options = own.options;
    c.engine->setup(own);
  }
}

std::string EngineJudge::label(std::size_t i) const {
  const auto& o = suts_.at(i).options;
  const std::string name = suts_.at(i).engine->name();
  return (name == "reference" ? std::string() : name + ":") + to_string(o.commit) + "/" + to_string(o.buffers);
}

CompareReport EngineJudge::compare_values(const RequestEngine& sut, const std::vector<float>& ref,
                                          const std::vector<float>& got, bool state) const {
  const Tolerance tol = sut.bit_exact() ? Tolerance::exact() : sut.tolerance(max_abs(ref), state);
  return compare(ref, got, tol);
}

void EngineJudge::run_on(RequestEngine& sut, const RequestTruth& truth, const Event& e,
                         const std::vector<std::vector<SequenceInputs>>& windows, Outputs& out) {
  switch (e.kind) {
    case Event::Kind::Admit: sut.admit(e.req, truth.prompt_inputs(e), e.max_new); break;
    case Event::Kind::PrefixHit: sut.prefix_hit(e.req, e.from, truth.prompt_inputs(e), e.max_new); break;
    case Event::Kind::SnapshotHit: sut.snapshot_hit(e.req, e.from, truth.prompt_inputs(e), e.max_new); break;
    case Event::Kind::Migrate:
      if (sut.migrates()) sut.migrate(e.req);  // invisible by definition: nothing to send to others
      break;
    case Event::Kind::Fork: sut.fork(e.req, e.from); break;
    case Event::Kind::Finish: sut.finish(e.req); break;
    case Event::Kind::Preempt: sut.preempt(e.req); break;
    case Event::Kind::Resume: sut.resume(e.req); break;
    case Event::Kind::Step: out = sut.step(e.entries, windows); break;
  }
}

std::string EngineJudge::apply(const Event& e) {
  executed_.push_back(e);
  const auto& setup = truth_.setup();
  const std::size_t n = suts_.size();
  std::vector<SlotMap> map_before(n);
  std::vector<Pools> pools_before(n);
  auto tag = [&](std::size_t i) { return n > 1 ? "[" + label(i) + "] " : std::string(); };
  for (std::size_t i = 0; i < n; ++i) {
    try {
      map_before[i] = suts_[i].engine->slot_map();
      for (std::int32_t l = 0; l < setup.base.cfg.num_layers; ++l) pools_before[i].push_back(suts_[i].engine->pool(l));
    } catch (const Error& err) {
      return tag(i) + "engine failed before the event: " + err.what();
    }
  }
  // A step's windows depend on which requests still prefill: built before the truth moves on.
  const bool step = e.kind == Event::Kind::Step;
  std::vector<std::vector<SequenceInputs>> windows;
  if (step) windows = truth_.step_windows(e);
  const auto want = truth_.apply(e);  // Error: the event itself is invalid
  for (std::size_t i = 0; i < n; ++i) {
    RequestEngine& sut = *suts_[i].engine;
    Outputs got;
    try {
      run_on(sut, truth_, e, windows, got);
    } catch (const Error& err) {
      return tag(i) + "engine raised an error the truth did not: " + err.what();
    }
    try {
      std::string why;
      if (step) why = check_outputs(sut, e, want, got);
      if (why.empty()) why = check_table(sut);
      if (why.empty()) why = check_states(sut);
      if (why.empty() && setup.options.block > 0) why = check_snapshots(sut);
      if (why.empty()) why = check_slots(sut, map_before[i], pools_before[i]);
      if (!why.empty()) return tag(i) + why;
    } catch (const Error& err) {
      return tag(i) + "engine failed while its results were read: " + err.what();
    }
  }
  return {};
}

// 1. Outputs per entry and layer.
std::string EngineJudge::check_outputs(const RequestEngine& sut, const Event& e, const Outputs& want,
                                       const Outputs& got) const {
  if (got.size() != want.size())
    return "step: the engine answered " + std::to_string(got.size()) + " entries, expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i].size() != want[i].size())
      return "step entry " + std::to_string(i) + ": outputs for " + std::to_string(got[i].size()) + " layers, expected " +
             std::to_string(want[i].size());
    for (std::size_t l = 0; l < want[i].size(); ++l) {
      if (got[i][l].size() != want[i][l].size())
        return "step entry " + std::to_string(i) + " (" + who(e.entries[i].req) + ") layer " + std::to_string(l) + ": " +
               std::to_string(got[i][l].size()) + " output values, expected " + std::to_string(want[i][l].size());
      const auto rep = compare_values(sut, want[i][l], got[i][l], false);
      if (!rep.ok)
        return "step entry " + std::to_string(i) + " (" + who(e.entries[i].req) + ") layer " + std::to_string(l) +
               ": outputs differ: " + rep.str();
    }
  }
  return {};
}

// 2. Request tables.
std::string EngineJudge::check_table(const RequestEngine& sut) const {
  const auto want = truth_.table();
  const auto got = sut.requests();
  for (const auto& [id, w] : want) {
    const auto it = got.find(id);
    if (it == got.end()) return who(id) + " is missing from the engine's table";
    if (!(it->second == w))
      return who(id) + ": the engine has (" + status_str(it->second) + "), the truth (" + status_str(w) + ")";
  }
  if (got.size() != want.size())
    return "the engine's table has " + std::to_string(got.size()) + " requests, the truth " + std::to_string(want.size());
  return {};
}

// 3. Committed states of running requests, and the truth's self-check.
std::string EngineJudge::check_states(const RequestEngine& sut) const {
  for (const auto& [id, r] : truth_.requests()) {
    if (r.status.status != Status::Running || r.state.empty()) continue;
    for (std::int32_t l = 0; l < truth_.setup().base.cfg.num_layers; ++l) {
      const auto& want = r.state[static_cast<std::size_t>(l)];
      const auto self = compare(truth_.recompute(id, l), want, Tolerance::exact());
      if (!self.ok) return "truth self-check failed: " + who(id) + " layer " + std::to_string(l) + ": " + self.str();
      const auto rep = compare_values(sut, want, sut.committed_state(id, l), true);
      if (!rep.ok) return who(id) + " layer " + std::to_string(l) + ": committed state differs: " + rep.str();
    }
  }
  return {};
}

// 6. Prefix snapshots: every running request's snapshot boundary and its state, against the truth's
// recomputation of the request's history cut at the boundary.
std::string EngineJudge::check_snapshots(const RequestEngine& sut) const {
  for (const auto& [id, r] : truth_.requests()) {
    if (r.status.status != Status::Running) continue;
    const std::int32_t got = sut.snapshot_tokens(id);
    if (got != r.snapshot)
      return who(id) + ": the engine's prefix snapshot is at " + std::to_string(got) + " tokens, the track step rule puts it at " +
             std::to_string(r.snapshot) + " (committed " + std::to_string(r.status.committed) + ", block " +
             std::to_string(truth_.setup().options.block) + "; 0 = none)";
    if (r.snapshot == 0) continue;
    for (std::int32_t l = 0; l < truth_.setup().base.cfg.num_layers; ++l) {
      const auto rep = compare_values(sut, truth_.recompute(id, l, r.snapshot), sut.snapshot_state(id, l), true);
      if (!rep.ok)
        return who(id) + " layer " + std::to_string(l) + ": the prefix snapshot at " + std::to_string(r.snapshot) +
               " tokens differs from the state at that boundary: " + rep.str();
    }
  }
  return {};
}

// 4 and 5. The slot map, shared slots, untouched slots and gaps.
std::string EngineJudge::check_slots(const RequestEngine& sut, const SlotMap& before, const Pools& pools_before) const {
  const auto& b = truth_.setup().base;
  const SlotMap after = sut.slot_map();
  std::map<std::int32_t, std::int32_t> owner;  // slot -> first request mapped to it
  for (const auto& [id, r] : truth_.requests()) {
    const bool running = r.status.status == Status::Running;
    const auto it = after.find(id);
    if (running != (it != after.end()))
      return who(id) + (running ? " runs but has no slot in the engine's slot map" : " holds slots but is not running");
  }
  if (after.size() != static_cast<std::size_t>(truth_.resident()))
    return "the engine's slot map names " + std::to_string(after.size()) + " requests, " +
           std::to_string(truth_.resident()) + " are running";
  for (const auto& [id, slots] : after) {
    if (slots.empty()) return who(id) + " is mapped to no slot";
    for (auto s : slots) {
      if (s < 0 || s >= b.num_slots)
        return who(id) + " is mapped to slot " + std::to_string(s) + ", outside [0, " + std::to_string(b.num_slots) + ")";
      const auto [o, fresh] = owner.emplace(s, id);
      if (fresh || o->second == id) continue;
      // Copy-on-write: sharing is fine while both states are equal.
      const auto& x = truth_.requests().at(o->second).state;
      const auto& y = truth_.requests().at(id).state;
      if (x != y || x.empty())
        return "requests " + std::to_string(o->second) + " and " + std::to_string(id) + " share slot " +
               std::to_string(s) + " but their committed states differ (copy-on-write missing)";
    }
  }
  std::set<std::int32_t> held;
  for (const auto& [id, slots] : before) held.insert(slots.begin(), slots.end());
  for (const auto& [id, slots] : after) held.insert(slots.begin(), slots.end());
  const std::int64_t elems = b.cfg.state_elems();
  const std::int64_t stride = b.pool_geometry().stride(b.cfg);
  for (std::int32_t l = 0; l < b.cfg.num_layers; ++l) {
    const auto now = sut.pool(l);
    const auto& was = pools_before[static_cast<std::size_t>(l)];
    if (now.size() != was.size() || now.size() != static_cast<std::size_t>(b.num_slots * stride))
      return "layer " + std::to_string(l) + ": the engine's pool has " + std::to_string(now.size()) + " values, expected " +
             std::to_string(b.num_slots * stride);
    for (std::int32_t s = 0; s < b.num_slots; ++s) {
      const float* x = was.data() + s * stride;
      const float* y = now.data() + s * stride;
      if (std::memcmp(x + elems, y + elems, static_cast<std::size_t>(stride - elems) * sizeof(float)) != 0)
        return "layer " + std::to_string(l) + ": the gap after slot " + std::to_string(s) + " was written";
      if (!held.count(s) && std::memcmp(x, y, static_cast<std::size_t>(elems) * sizeof(float)) != 0)
        return "layer " + std::to_string(l) + ": slot " + std::to_string(s) +
               " changed although no running request held it before or after the event";
    }
  }
  return {};
}

}  // namespace replayssm::ref::engine_level
