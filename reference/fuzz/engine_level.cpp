#include "engine_level.hpp"

#include <algorithm>

namespace replayssm::fuzz {

using el::Event;
using el::Status;

std::int32_t EngineLevelModel::resident() const {
  std::int32_t n = 0;
  for (const auto& [id, r] : reqs) n += r.status == Status::Running ? 1 : 0;
  return n;
}

std::vector<std::int32_t> EngineLevelModel::with(Status s, bool prompt_committed) const {
  std::vector<std::int32_t> v;
  for (const auto& [id, r] : reqs)
    if (r.status == s && (!prompt_committed || r.to_prefill == 0)) v.push_back(id);
  return v;
}

void EngineLevelModel::apply(const Event& e) {
  switch (e.kind) {
    case Event::Kind::Admit:
      reqs[e.req] = EngineModelRequest{Status::Running, 0, e.prompt, 0, e.max_new};
      break;
    case Event::Kind::Fork:
      reqs[e.req] = reqs.at(e.from);
      reqs[e.req].snapshot = 0;  // the blocks stay the donor's
      break;
    case Event::Kind::PrefixHit: {
      EngineModelRequest q = reqs.at(e.from);  // the prefix: everything `from` committed
      q.to_prefill = e.prompt;
      q.generated = 0;
      q.max_new = e.max_new;
      q.snapshot = 0;
      reqs[e.req] = q;
      break;
    }
    case Event::Kind::SnapshotHit:  // the prefix: `from`'s tokens up to its snapshot's boundary
      reqs[e.req] = EngineModelRequest{Status::Running, reqs.at(e.from).snapshot, e.prompt, 0, e.max_new, 0};
      break;
    case Event::Kind::Migrate: break;
    case Event::Kind::Finish: reqs.at(e.req).status = Status::Finished; break;
    case Event::Kind::Preempt: reqs.at(e.req).status = Status::Preempted; break;
    case Event::Kind::Resume: {
      auto& q = reqs.at(e.req);
      q.to_prefill += q.committed;
      q.committed = 0;
      q.snapshot = 0;
      q.status = Status::Running;
      break;
    }
    case Event::Kind::Step:
      for (const auto& en : e.entries) {
        auto& q = reqs.at(en.req);
        // A block boundary crossed by a committed call: the snapshot moves to the last one crossed.
        auto crossed = [&](std::int32_t before) {
          if (block > 0 && q.committed / block != before / block) q.snapshot = q.committed - q.committed % block;
        };
        const std::int32_t before = q.committed;
        if (q.to_prefill > 0) {
          const std::int32_t chunk = std::min(en.T, q.to_prefill);
          q.to_prefill -= chunk;
          q.committed += chunk;
          crossed(before);
          continue;
        }
        // The run is cut at the stop token if there is one; the budget cuts it too; either ends the request.
        const std::int32_t budget = q.max_new - q.generated;
        const std::int32_t cut = en.eog_at > 0 ? en.eog_at : en.accepted;
        const std::int32_t took = std::min(cut, budget);
        q.committed += took;
        q.generated += took;
        crossed(before);
        if (en.eog_at > 0 || cut >= budget) q.status = Status::Finished;
      }
      break;
  }
  if (e.kind == Event::Kind::Admit || e.kind == Event::Kind::Fork || e.kind == Event::Kind::PrefixHit ||
      e.kind == Event::Kind::SnapshotHit)
    next_id = std::max(next_id, e.req + 1);
}

std::string table_disagreement(const EngineLevelModel& want, const std::map<std::int32_t, el::RequestStatus>& table,
                               const std::string& whose) {
  const std::string pre = "bookkeeping (independent model) vs the " + whose + ": request ";
  for (const auto& [id, m] : want.reqs) {
    const auto it = table.find(id);
    if (it == table.end()) return pre + std::to_string(id) + " is missing";
    const auto& r = it->second;
    auto diff = [&](const char* what, std::int64_t got, std::int64_t exp) {
      return pre + std::to_string(id) + ": " + what + " " + std::to_string(got) + " in the " + whose + ", " +
             std::to_string(exp) + " in the model";
    };
    if (r.status != m.status)
      return pre + std::to_string(id) + " is " + el::to_string(r.status) + " in the " + whose + ", " +
             el::to_string(m.status) + " in the model";
    if (r.committed != m.committed) return diff("committed tokens", r.committed, m.committed);
    if (r.to_prefill != m.to_prefill) return diff("tokens to prefill", r.to_prefill, m.to_prefill);
    if (r.generated != m.generated) return diff("generated tokens", r.generated, m.generated);
  }
  if (table.size() != want.reqs.size())
    return "bookkeeping (independent model): the " + whose + " has " + std::to_string(table.size()) +
           " requests, the model " + std::to_string(want.reqs.size());
  return {};
}

namespace {

struct EngineLevelSut {
  el::EngineJudge judge;
  std::string failure;
};
using Base = rc::state::Command<EngineLevelModel, EngineLevelSut>;

template <class T>
rc::Gen<T> uniform(T lo, T hi) {  // uniform in [lo, hi) at every size (size bounds only the length)
  return rc::gen::resize(100, rc::gen::inRange<T>(lo, hi));
}
std::int32_t pick(const std::vector<std::int32_t>& v) {
  RC_PRE(!v.empty());
  return v[static_cast<std::size_t>(*uniform<std::size_t>(0, v.size()))];
}
bool has(const std::vector<std::int32_t>& v, std::int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
std::uint64_t any_seed() { return *rc::gen::resize(100, rc::gen::arbitrary<std::uint64_t>()); }
// Budgets: often no longer than one verify window (2..max_T tokens: the cap falls inside an accepted run, often
// one that also holds a stop token before it), else up to 16.
std::int32_t budget(std::int32_t max_T) {
  return *rc::gen::oneOf(uniform<int>(2, std::max(3, max_T + 1)), uniform<int>(1, 17));
}

std::string run_checks(el::EngineJudge& judge, const EngineLevelModel& before, const Event& e) {
  std::string err = judge.apply(e);
  if (!err.empty()) return err;
  EngineLevelModel after = before;
  after.apply(e);
  err = table_disagreement(after, judge.truth().table(), "truth");
  for (std::size_t i = 0; i < judge.engines() && err.empty(); ++i) {
    err = table_disagreement(after, judge.sut(i).requests(), "engine");
    if (!err.empty() && judge.engines() > 1) err = "[" + judge.label(i) + "] " + err;
  }
  return err;
}

el::EngineJudge make_judge(const el::EngineLevelSetup& setup, const std::string& engine, el::EngineFault fault,
                           const std::vector<el::EngineOptions>& variants) {
  return el::EngineJudge(setup, judge_candidates(setup, engine, fault, variants));
}

struct EventCommand : Base {
  Event e;
  void run(const EngineLevelModel& before, EngineLevelSut& sut) const override {
    const std::string err = run_checks(sut.judge, before, e);
    if (!err.empty()) {
      sut.failure = err;
      RC_FAIL(err);
    }
  }
  void apply(EngineLevelModel& m) const override { m.apply(e); }
  void show(std::ostream& os) const override { os << e.str(); }
};

struct Admit : EventCommand {
  explicit Admit(const EngineLevelModel& m) {
    RC_PRE(m.resident() < m.max_live);
    e.kind = Event::Kind::Admit;
    e.req = m.next_id;
    e.prompt = *uniform<int>(1, 13);
    e.max_new = budget(m.max_T);
    e.seed = any_seed();
  }
  void checkPreconditions(const EngineLevelModel& m) const override {
    RC_PRE(!m.reqs.count(e.req) && m.resident() < m.max_live);
  }
};

struct Step : EventCommand {
  explicit Step(const EngineLevelModel& m) {
    e.kind = Event::Kind::Step;
    // A random subset in random (sampler) order, independent of admission order and of the engine's rows.
    std::vector<std::pair<std::uint32_t, std::int32_t>> keyed;
    for (auto id : m.with(Status::Running))
      if (*uniform<int>(0, 4) != 0) keyed.emplace_back(*rc::gen::resize(100, rc::gen::arbitrary<std::uint32_t>()), id);
    std::sort(keyed.begin(), keyed.end());
    for (const auto& [k, id] : keyed) {
      el::StepEntry en;
      en.req = id;
      en.T = *uniform<int>(1, m.max_T + 1);
      en.accepted = *rc::gen::oneOf(rc::gen::just(0), rc::gen::just(en.T), uniform<int>(0, en.T + 1));
      if (en.accepted > 0 && *uniform<int>(0, 3) == 0) en.eog_at = *uniform<int>(1, en.accepted + 1);
      en.seed = any_seed();
      e.entries.push_back(en);
    }
    RC_PRE(!e.entries.empty());
  }
  void checkPreconditions(const EngineLevelModel& m) const override {
    RC_PRE(!e.entries.empty());
    for (const auto& en : e.entries) {
      const auto it = m.reqs.find(en.req);
      RC_PRE(it != m.reqs.end() && it->second.status == Status::Running);
    }
  }
};

struct Release : EventCommand {
  Release(const EngineLevelModel& m, Event::Kind k) {
    e.kind = k;
    e.req = pick(m.with(Status::Running));
  }
  void checkPreconditions(const EngineLevelModel& m) const override { RC_PRE(has(m.with(Status::Running), e.req)); }
};
struct Finish : Release {
  explicit Finish(const EngineLevelModel& m) : Release(m, Event::Kind::Finish) {}
};
struct Preempt : Release {
  explicit Preempt(const EngineLevelModel& m) : Release(m, Event::Kind::Preempt) {}
};

struct Resume : EventCommand {
  explicit Resume(const EngineLevelModel& m) {
    RC_PRE(m.resident() < m.max_live);
    e.kind = Event::Kind::Resume;
    e.req = pick(m.with(Status::Preempted));
  }
  void checkPreconditions(const EngineLevelModel& m) const override {
    RC_PRE(has(m.with(Status::Preempted), e.req) && m.resident() < m.max_live);
  }
};

// Fork and prefix-cache hit: a new request from a running one whose prompt is committed.
struct Derive : EventCommand {
  Derive(const EngineLevelModel& m, Event::Kind k) {
    RC_PRE(m.resident() < m.max_live);
    e.kind = k;
    e.req = m.next_id;
    e.from = pick(m.with(Status::Running, true));
    if (k == Event::Kind::PrefixHit) {
      e.prompt = *uniform<int>(1, 7);
      e.max_new = budget(m.max_T);
      e.seed = any_seed();
    }
  }
  void checkPreconditions(const EngineLevelModel& m) const override {
    RC_PRE(!m.reqs.count(e.req) && has(m.with(Status::Running, true), e.from) && m.resident() < m.max_live);
  }
};
// A prefix-cache hit on a running request's block snapshot.
struct SnapshotHit : EventCommand {
  explicit SnapshotHit(const EngineLevelModel& m) {
    RC_PRE(m.block > 0 && m.resident() < m.max_live);
    e.kind = Event::Kind::SnapshotHit;
    e.req = m.next_id;
    e.from = pick(with_snapshot(m));
    e.prompt = *uniform<int>(1, 7);
    e.max_new = budget(m.max_T);
    e.seed = any_seed();
  }
  static std::vector<std::int32_t> with_snapshot(const EngineLevelModel& m) {
    std::vector<std::int32_t> v;
    for (const auto& [id, r] : m.reqs)
      if (r.status == Status::Running && r.snapshot > 0) v.push_back(id);
    return v;
  }
  void checkPreconditions(const EngineLevelModel& m) const override {
    RC_PRE(m.block > 0 && !m.reqs.count(e.req) && has(with_snapshot(m), e.from) && m.resident() < m.max_live);
  }
};

// Defragmentation: a running request moved to other slots (engines that migrate; nothing observable).
struct Migrate : Release {
  explicit Migrate(const EngineLevelModel& m) : Release(m, Event::Kind::Migrate) {}
};

struct Fork : Derive {
  explicit Fork(const EngineLevelModel& m) : Derive(m, Event::Kind::Fork) {}
};
struct PrefixHit : Derive {
  explicit PrefixHit(const EngineLevelModel& m) : Derive(m, Event::Kind::PrefixHit) {}
};

rc::Gen<rc::state::Commands<Base>> event_gen(const EngineLevelModel& m0) {
  return rc::state::gen::commands(
      m0, rc::state::gen::execOneOfWithArgs<Admit, Admit, Step, Step, Step, Step, Step, Step, Finish, Preempt, Preempt, Resume,
                                            Fork, PrefixHit, SnapshotHit, SnapshotHit, Migrate, Migrate>());
}

EngineLevelModel model_for(std::int32_t max_live, std::int32_t max_T, std::int32_t block) {
  EngineLevelModel m;
  m.max_live = max_live;
  m.max_T = max_T;
  m.block = block;
  return m;
}

}  // namespace

std::vector<el::EngineOptions> option_variants(std::int32_t max_live, std::optional<el::CommitMode> commit,
                                               std::optional<el::Buffering> buffers) {
  std::vector<el::EngineOptions> v;
  for (auto c : {el::CommitMode::SameIteration, el::CommitMode::NextStep})
    for (auto b : {el::Buffering::InPlace, el::Buffering::Double})
      if ((!commit || *commit == c) && (!buffers || *buffers == b)) v.push_back(el::EngineOptions{max_live, c, b});
  return v;
}

rc::Gen<el::EngineOptions> engine_options(std::int32_t max_live, bool snapshots) {
  return rc::gen::exec([max_live, snapshots] {
    el::EngineOptions o;
    o.max_live = max_live;
    o.commit = *rc::gen::element(el::CommitMode::SameIteration, el::CommitMode::NextStep);
    o.buffers = *rc::gen::element(el::Buffering::InPlace, el::Buffering::Double);
    if (snapshots) o.block = *rc::gen::element(0, 2, 3, 4, 5);
    return o;
  });
}

std::vector<el::EngineJudge::Candidate> judge_candidates(const el::EngineLevelSetup& setup, const std::string& engine,
                                                         el::EngineFault fault,
                                                         const std::vector<el::EngineOptions>& variants) {
  std::vector<el::EngineJudge::Candidate> c;
  const auto all = variants.empty() ? std::vector<el::EngineOptions>{setup.options} : variants;
  for (const auto& o : all) c.push_back(el::EngineJudge::Candidate{o, el::make_request_engine(engine, fault)});
  // The spec-ring design joins the reference engine's runs wherever its slots fit (in place): bit-exact with
  // an F32 state, at its tolerance with a BF16 one (its checkpoint is rounded at flushes, the truth at every
  // commit).
  if (engine == "reference")
    for (const auto& o : all)
      if (o.buffers == el::Buffering::InPlace)  // a fault of the reference engine leaves the ring engine correct
        c.push_back(el::EngineJudge::Candidate{
            o, el::make_request_engine("ring", el::ring_engine_has_fault(fault) ? fault : el::EngineFault::None)});
  return c;
}

std::vector<Event> generate_events(std::int32_t max_live, std::int32_t max_T, std::uint64_t seed, int size,
                                   std::int32_t block) {
  const auto cmds = event_gen(model_for(max_live, max_T, block))(rc::Random(seed), size).value();
  std::vector<Event> out;
  for (const auto& c : cmds) out.push_back(dynamic_cast<const EventCommand&>(*c).e);
  return out;
}

void check_engine_level(const el::EngineLevelSetup& setup, const std::string& engine, el::EngineFault fault,
                        std::vector<Event>* last_failure, std::string* last_reason,
                        const std::vector<el::EngineOptions>& variants) {
  const EngineLevelModel m0 = model_for(setup.options.max_live, setup.base.max_T, setup.options.block);
  EngineLevelSut sut{make_judge(setup, engine, fault, variants), {}};
  try {
    const auto cmds = *event_gen(m0);
    rc::state::runAll(cmds, m0, sut);
    bool fork = false, hit = false, resume = false, stop = false, snap = false;
    for (const auto& e : sut.judge.executed()) {
      snap = snap || e.kind == Event::Kind::SnapshotHit;
      fork = fork || e.kind == Event::Kind::Fork;
      hit = hit || e.kind == Event::Kind::PrefixHit;
      resume = resume || e.kind == Event::Kind::Resume;
      for (const auto& en : e.entries) stop = stop || en.eog_at > 0;
    }
    RC_CLASSIFY(fork, "fork");
    RC_CLASSIFY(hit, "prefix hit");
    RC_CLASSIFY(resume, "resume");
    RC_CLASSIFY(stop, "stop token");
    RC_CLASSIFY(snap, "snapshot hit");
  } catch (...) {
    if (!sut.failure.empty()) {
      if (last_failure) *last_failure = sut.judge.executed();
      if (last_reason) *last_reason = sut.failure;
    }
    throw;
  }
}

std::string replay_events(const el::EngineLevelSetup& setup, const std::string& engine, el::EngineFault fault,
                          const std::vector<Event>& events, const std::vector<el::EngineOptions>& variants) {
  el::EngineJudge judge = make_judge(setup, engine, fault, variants);
  EngineLevelModel model = model_for(setup.options.max_live, setup.base.max_T, setup.options.block);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string err = run_checks(judge, model, events[i]);
    if (!err.empty()) return "event " + std::to_string(i) + " (" + events[i].str() + "): " + err;
    model.apply(events[i]);
  }
  return {};
}

}  // namespace replayssm::fuzz
