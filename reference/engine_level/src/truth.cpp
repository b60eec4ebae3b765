// Per-request truth of the engine level (truth.hpp).
#include "replayssm/engine_level/truth.hpp"

#include <algorithm>
#include <set>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/recurrence/mtp.hpp"

namespace replayssm::ref::engine_level {

namespace {
std::vector<SequenceInputs> tokens(const ModelConfig& cfg, std::int32_t n, std::uint64_t seed) {
  std::vector<SequenceInputs> v;
  for (std::int32_t l = 0; l < cfg.num_layers; ++l) v.push_back(token_inputs(cfg, l, n, seed));
  return v;
}
std::vector<SequenceInputs> none(const ModelConfig& cfg) { return tokens(cfg, 0, 0); }
}  // namespace

RequestTruth::RequestTruth(const EngineLevelSetup& setup) : s_(setup) { s_.validate(); }

std::vector<SequenceInputs> RequestTruth::prompt_inputs(const Event& e) const {
  return tokens(s_.base.cfg, e.prompt, e.seed);
}

std::vector<std::vector<SequenceInputs>> RequestTruth::step_windows(const Event& e) const {
  std::vector<std::vector<SequenceInputs>> w;
  for (const auto& en : e.entries) {
    const auto it = reqs_.find(en.req);
    const bool prefill = it != reqs_.end() && it->second.status.to_prefill > 0;
    w.push_back(prefill ? none(s_.base.cfg) : tokens(s_.base.cfg, en.T, en.seed));
  }
  return w;
}

std::int32_t RequestTruth::resident() const {
  std::int32_t n = 0;
  for (const auto& [id, r] : reqs_) n += r.status.status == Status::Running;
  return n;
}

std::map<std::int32_t, RequestStatus> RequestTruth::table() const {
  std::map<std::int32_t, RequestStatus> m;
  for (const auto& [id, r] : reqs_) m[id] = r.status;
  return m;
}

void RequestTruth::validate(const Event& e) const {
  auto running = [&](std::int32_t id, const char* f) -> const Request& {
    const auto it = reqs_.find(id);
    require(it != reqs_.end(), f, "unknown request ", id);
    require(it->second.status.status == Status::Running, f, "request ", id, " is not running");
    return it->second;
  };
  auto room = [&] {
    require(resident() < s_.options.max_live, "event.kind", "a request too many: ", resident(),
            " already hold slots (max_live = ", s_.options.max_live, ")");
  };
  switch (e.kind) {
    case Event::Kind::Admit:
    case Event::Kind::Fork:
    case Event::Kind::PrefixHit:
    case Event::Kind::SnapshotHit:
      require(!reqs_.count(e.req), "event.req", "request ", e.req, " already exists");
      room();
      if (e.kind != Event::Kind::Fork) {
        require(e.prompt >= 1, "event.prompt", "must be >= 1");
        require(e.max_new >= 1, "event.max_new", "must be >= 1");
      }
      if (e.kind == Event::Kind::SnapshotHit) {
        require(s_.options.block > 0, "event.kind", "snapshot_hit without prefix snapshots (options.block = 0)");
        require(running(e.from, "event.from").snapshot > 0, "event.from", "request ", e.from, " has no snapshot");
      } else if (e.kind != Event::Kind::Admit) {
        require(running(e.from, "event.from").status.to_prefill == 0, "event.from", "request ", e.from,
                " still prefills");
      }
      return;
    case Event::Kind::Migrate:
    case Event::Kind::Finish:
    case Event::Kind::Preempt: running(e.req, "event.req"); return;
    case Event::Kind::Resume: {
      const auto it = reqs_.find(e.req);
      require(it != reqs_.end() && it->second.status.status == Status::Preempted, "event.req", "request ", e.req,
              " is not preempted");
      room();
      return;
    }
    case Event::Kind::Step: {
      std::set<std::int32_t> seen;
      require(!e.entries.empty(), "event.entries", "a step needs at least one entry");
      for (std::size_t i = 0; i < e.entries.size(); ++i) {
        const auto& en = e.entries[i];
        const std::string f = "event.entries[" + std::to_string(i) + "]";
        running(en.req, (f + ".req").c_str());
        require(seen.insert(en.req).second, f + ".req", "request ", en.req, " appears twice");
        require(en.T >= 1 && en.T <= s_.base.max_T, f + ".T", "is ", en.T, ", outside [1, max_T = ", s_.base.max_T, "]");
        require(en.accepted >= 0 && en.accepted <= en.T, f + ".accepted", "is ", en.accepted, ", outside [0, T]");
        require(en.eog_at >= 0 && en.eog_at <= en.accepted, f + ".eog_at", "is ", en.eog_at, ", outside [0, accepted]");
      }
      return;
    }
  }
}

std::vector<std::vector<std::vector<float>>> RequestTruth::apply(const Event& e) {
  validate(e);
  const auto& cfg = s_.base.cfg;
  const std::int32_t L = cfg.num_layers;
  switch (e.kind) {
    case Event::Kind::Admit: {
      Request r;
      r.max_new = e.max_new;
      r.history = none(cfg);
      r.pending = prompt_inputs(e);
      r.status = RequestStatus{Status::Running, 0, e.prompt, 0};
      reqs_[e.req] = std::move(r);
      return {};
    }
    case Event::Kind::Fork:
    case Event::Kind::PrefixHit: {
      Request r = reqs_.at(e.from);
      r.snapshot = 0;  // the cache's blocks stay the donor's: a fork or hit starts without a snapshot
      if (e.kind == Event::Kind::PrefixHit) {
        r.pending = prompt_inputs(e);
        r.max_new = e.max_new;
        r.status.to_prefill = e.prompt;
        r.status.generated = 0;
      }
      reqs_[e.req] = std::move(r);
      return {};
    }
    case Event::Kind::SnapshotHit: {  // the donor's first X tokens, X its snapshot boundary, then the prompt
      const Request& d = reqs_.at(e.from);
      const std::int32_t X = d.snapshot;
      Request r;
      r.max_new = e.max_new;
      for (std::int32_t l = 0; l < L; ++l) {
        r.history.push_back(d.history[static_cast<std::size_t>(l)].slice(cfg, 0, X));
        r.state.push_back(recompute(e.from, l, X));
      }
      for (std::int32_t t = 0; const std::int32_t n : d.segments) {  // the donor's committed calls, the last one cut at X
        if (t >= X) break;
        r.segments.push_back(std::min(n, X - t));
        t += n;
      }
      r.pending = prompt_inputs(e);
      r.status = RequestStatus{Status::Running, X, e.prompt, 0};
      reqs_[e.req] = std::move(r);
      return {};
    }
    case Event::Kind::Migrate: return {};
    case Event::Kind::Finish:
    case Event::Kind::Preempt: {
      Request& r = reqs_.at(e.req);
      r.status.status = e.kind == Event::Kind::Finish ? Status::Finished : Status::Preempted;
      r.state.clear();
      return {};
    }
    case Event::Kind::Resume: {  // every token again, from a zero state
      Request& r = reqs_.at(e.req);
      for (std::int32_t l = 0; l < L; ++l)
        r.pending[l] = SequenceInputs::concat(cfg, r.history[l], r.pending[l]);
      r.history = none(cfg);
      r.segments.clear();
      r.state.clear();
      r.snapshot = 0;
      r.status = RequestStatus{Status::Running, 0, r.pending[0].T, r.status.generated};
      return {};
    }
    case Event::Kind::Step: break;
  }
  const auto windows = step_windows(e);
  std::vector<std::vector<std::vector<float>>> out(e.entries.size());
  for (std::size_t i = 0; i < e.entries.size(); ++i) {
    const StepEntry& en = e.entries[i];
    Request& r = reqs_.at(en.req);
    const bool prefill = r.status.to_prefill > 0;
    std::int32_t n = 0;
    bool ends = false;
    std::vector<SequenceInputs> in;
    if (prefill) {
      n = std::min(en.T, r.status.to_prefill);
      for (auto& p : r.pending) {
        in.push_back(p.slice(cfg, 0, n));
        p = p.slice(cfg, n, p.T - n);
      }
      r.status.to_prefill -= n;
    } else {
      in = windows[i];
      // Stop token and max_new cap: whichever comes first in the accepted run ends the request there.
      n = en.accepted;
      if (en.eog_at > 0) n = std::min(n, en.eog_at), ends = true;
      const std::int32_t left = r.max_new - r.status.generated;
      if (n >= left) n = left, ends = true;
      r.status.generated += n;
    }
    if (r.state.empty()) r.state.assign(static_cast<std::size_t>(L), std::vector<float>(cfg.state_elems(), 0.0f));
    for (std::int32_t l = 0; l < L; ++l) {
      const auto v = full_state_verify(cfg, s_.base.params[static_cast<std::size_t>(l)], in[static_cast<std::size_t>(l)],
                                       r.state[static_cast<std::size_t>(l)], StateRounding::AtCommit);
      out[i].push_back(v.o);
      if (n > 0) r.state[static_cast<std::size_t>(l)] = v.states[static_cast<std::size_t>(n - 1)];
      r.history[static_cast<std::size_t>(l)] =
          SequenceInputs::concat(cfg, r.history[static_cast<std::size_t>(l)], in[static_cast<std::size_t>(l)].slice(cfg, 0, n));
    }
    if (n > 0) r.segments.push_back(n);
    const std::int32_t B = s_.options.block, c0 = r.status.committed;
    r.status.committed += n;
    if (B > 0 && r.status.committed / B > c0 / B) r.snapshot = r.status.committed / B * B;  // track step
    if (ends) {
      r.status.status = Status::Finished;
      r.state.clear();
    }
  }
  return out;
}

std::vector<float> RequestTruth::recompute(std::int32_t req, std::int32_t layer, std::int32_t upto) const {
  const auto& cfg = s_.base.cfg;
  const Request& r = reqs_.at(req);
  const auto& h = r.history[static_cast<std::size_t>(layer)];
  const std::int32_t end = upto < 0 ? h.T : upto;
  require(end <= h.T, "upto", "is ", end, ", the history holds ", h.T, " tokens");
  std::vector<float> S(static_cast<std::size_t>(cfg.state_elems()), 0.0f), o;
  std::int32_t t0 = 0;
  for (auto n : r.segments) {
    if (t0 >= end) break;
    n = std::min(n, end - t0);
    run_recurrent<float>(cfg, s_.base.params[static_cast<std::size_t>(layer)], h.slice(cfg, t0, n), S, o);
    round_to_state_dtype(cfg, S);
    t0 += n;
  }
  require(t0 == end, "history", "segments cover ", t0, " of ", end, " tokens");
  return S;
}

}  // namespace replayssm::ref::engine_level
