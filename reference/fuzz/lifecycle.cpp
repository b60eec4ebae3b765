#include "lifecycle.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include "replayssm/rng.hpp"

namespace replayssm::fuzz {

using ref::Cmd;
using ref::RowSpec;
using Status = ModelRequest::Status;

std::vector<std::int32_t> LifecycleModel::free_slots() const {
  std::vector<std::int32_t> f;
  for (std::int32_t s = 0; s < num_slots; ++s) {
    bool used = s == reserved_slot;
    for (const auto& [id, r] : reqs) used = used || (r.status != Status::Finished && r.slot == s);
    if (!used) f.push_back(s);
  }
  return f;
}

std::vector<std::int32_t> LifecycleModel::with_status(Status s) const {
  std::vector<std::int32_t> v;
  for (const auto& [id, r] : reqs)
    if (r.status == s) v.push_back(id);
  return v;
}

void LifecycleModel::apply(const Cmd& c) {
  switch (c.kind) {
    case Cmd::Kind::Admit:
      reqs[c.req] = ModelRequest{Status::Running, c.slot, 0, c.prompt, true};
      next_id = std::max(next_id, c.req + 1);
      return;
    case Cmd::Kind::Step:
      for (const auto& r : c.rows) {
        auto& q = reqs.at(r.req);
        if (q.pending > 0) {  // a prefill chunk: the whole chunk is committed
          const auto n = std::min(std::max(r.T, 1), q.pending);
          q.pending -= n;
          q.committed += n;
          q.fresh = false;
        } else {  // a verify window: the accepted run, cut at the stop token, which ends the request
          const std::int32_t n = r.stop_at > 0 ? std::min(r.accepted, r.stop_at) : r.accepted;
          q.committed += n;
          if (r.to_slot >= 0 && n > 0) q.slot = r.to_slot;  // an out-of-place commit that writes moves it
          if (r.stop_at > 0) {
            q.status = Status::Finished;
            q.slot = -1;
          }
        }
      }
      return;
    case Cmd::Kind::Finish:
    case Cmd::Kind::Preempt:  // the slot is free; what the request computed stays on record
      reqs.at(c.req).status = c.kind == Cmd::Kind::Finish ? Status::Finished : Status::Preempted;
      reqs.at(c.req).slot = -1;
      return;
    case Cmd::Kind::Continue:
    case Cmd::Kind::Resume: {  // every token it had, plus c.prompt new ones (Continue), prefilled from zero
      auto& q = reqs.at(c.req);
      q.pending = q.committed + q.pending + (c.kind == Cmd::Kind::Continue ? c.prompt : 0);
      q.committed = 0;
      q.status = Status::Running;
      q.slot = c.slot;
      q.fresh = true;
      return;
    }
    case Cmd::Kind::Copy: {
      ModelRequest q = reqs.at(c.req);
      q.slot = c.slot;
      reqs[c.req2] = q;
      next_id = std::max(next_id, c.req2 + 1);
      return;
    }
    case Cmd::Kind::Capture:  // a captured bucket changes no request; later steps may replay it
      captured.insert({c.graph, c.capture_T});
      return;
    case Cmd::Kind::SelfCheck:  // nor does a self check (its forks are free again after it)
      return;
  }
}

std::string bookkeeping_disagreement(const LifecycleModel& want, const ref::Engine& engine) {
  const auto& got = engine.requests();
  auto name = [](Status s) { return s == Status::Running ? "running" : s == Status::Finished ? "finished" : "preempted"; };
  for (const auto& [id, m] : want.reqs) {
    const auto it = got.find(id);
    const std::string who = "bookkeeping (independent model): request " + std::to_string(id);
    if (it == got.end()) return who + " is missing from the engine";
    const auto& r = it->second;
    const Status status = r.finished ? Status::Finished : r.slot == kPadSlot ? Status::Preempted : Status::Running;
    if (status != m.status) return who + " is " + name(status) + " in the engine, " + name(m.status) + " in the model";
    if (m.status == Status::Running && r.slot != m.slot)
      return who + ": slot " + std::to_string(r.slot) + " in the engine, " + std::to_string(m.slot) + " in the model";
    if (r.history[0].T != m.committed)
      return who + ": " + std::to_string(r.history[0].T) + " committed tokens in the engine, " +
             std::to_string(m.committed) + " in the model";
    if (r.pending[0].T != m.pending)
      return who + ": " + std::to_string(r.pending[0].T) + " tokens to prefill in the engine, " +
             std::to_string(m.pending) + " in the model";
  }
  if (got.size() != want.reqs.size())
    return "bookkeeping (independent model): the engine has " + std::to_string(got.size()) + " requests, the model " +
           std::to_string(want.reqs.size());
  return {};
}

namespace {

using Base = rc::state::Command<LifecycleModel, LifecycleSut>;

// Uniform draws in [lo, hi) at every RapidCheck size: the campaign's size only bounds the sequence length
// (--max-commands), never the window lengths, accepted counts or slot choices.
template <class T>
rc::Gen<T> uniform(T lo, T hi) {
  return rc::gen::resize(100, rc::gen::inRange<T>(lo, hi));
}

std::int32_t pick(const std::vector<std::int32_t>& v) {
  RC_PRE(!v.empty());
  return v[static_cast<std::size_t>(*uniform<std::size_t>(0, v.size()))];
}
// One of kVerifyWidths that is <= max_T (1 when none is).
rc::Gen<int> verify_width(std::int32_t max_T) {
  std::vector<int> fit{1};
  for (int w : kVerifyWidths)
    if (w < max_T) fit.push_back(w);
  fit.push_back(max_T);  // the widest window the case allows is always among the weighted ones
  return rc::gen::resize(100, rc::gen::elementOf(fit));
}

bool contains(const std::vector<std::int32_t>& v, std::int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Every command carries a plain Cmd (serialisable, replayable); running it means handing it to the judge and
// then checking the oracle's request table against the model's.
struct LifecycleCommand : Base {
  Cmd c;
  void run(const LifecycleModel& before, LifecycleSut& sut) const override {
    std::string err = sut.judge.apply(c);
    if (err.empty() && sut.bookkeeping) {
      LifecycleModel after = before;
      apply(after);
      err = bookkeeping_disagreement(after, sut.judge.oracle());
      sut.bookkeeping_failed = !err.empty();
    }
    if (!err.empty()) {
      sut.failure = err;
      RC_FAIL(err);
    }
  }
  void apply(LifecycleModel& m) const override { m.apply(c); }
  void show(std::ostream& os) const override { os << c.str(); }
};

struct Admit : LifecycleCommand {
  explicit Admit(const LifecycleModel& m) {
    c.kind = Cmd::Kind::Admit;
    c.req = m.next_id;
    c.slot = pick(m.free_slots());
    c.prompt = *uniform<int>(1, 13);
    c.seed = *rc::gen::resize(100, rc::gen::arbitrary<std::uint64_t>());
  }
  void checkPreconditions(const LifecycleModel& m) const override {
    RC_PRE(!m.reqs.count(c.req) && contains(m.free_slots(), c.slot));
  }
};

struct Step : LifecycleCommand {
  explicit Step(const LifecycleModel& m) {
    c.kind = Cmd::Kind::Step;
    auto running = m.with_status(Status::Running);
    // A narrowed step mix (StepMix): one width W for every row, drawn as a row's own width is (a prefilling
    // request joins only with a chunk of exactly W tokens), and a step of prefill chunks or of verify rows.
    // The default mix makes none of these draws, so its sequences are the ones it always made.
    int width = 0, prefill_step = -1;  // prefill_step: -1 both kinds, 0 verify rows only, 1 prefill chunks only
    std::vector<std::int32_t> prefilling;
    bool verifying = false;
    for (auto id : running) {
      if (m.reqs.at(id).pending > 0) prefilling.push_back(id);
      else verifying = true;
    }
    if (m.step_mix.one_width) width = *rc::gen::oneOf(uniform<int>(1, m.max_T + 1), verify_width(m.max_T));
    // A coin only when both kinds are running (no step is left empty for it), weighted 2:1 toward verify steps,
    // which hold the widths and accepted counts a verdict asks for.
    if (m.step_mix.prefill_apart)
      prefill_step = !prefilling.empty() && verifying ? (*uniform<int>(0, 3) == 0 ? 1 : 0) : prefilling.empty() ? 0 : 1;
    // One width and requests prefilling: a prefill step (and half the mixed ones) is no wider than what one
    // drawn prefilling request has left, so that it takes its chunk and prompts do not wait for a narrow step.
    if (width > 0 && prefill_step != 0 && !prefilling.empty() && (prefill_step == 1 || *uniform<int>(0, 2) == 0))
      width = std::min(width, m.reqs.at(pick(prefilling)).pending);
    // Random subset in random order (row order is independent of slot order and of request age).
    std::vector<std::pair<std::uint32_t, std::int32_t>> keyed;
    for (auto id : running) {
      const std::int32_t pending = m.reqs.at(id).pending;
      if (prefill_step >= 0 && (pending > 0) != (prefill_step == 1)) continue;
      if (width > 0 && pending > 0 && pending < width) continue;
      if (*uniform<int>(0, 4) != 0) keyed.emplace_back(*rc::gen::resize(100, rc::gen::arbitrary<std::uint32_t>()), id);
    }
    std::sort(keyed.begin(), keyed.end());
    for (const auto& [k, id] : keyed) {
      RowSpec r;
      r.req = id;
      // Windows: any width up to max_T, or one of the verify widths engines ship (1 + num_draft: 2, 4, 5, 8,
      // 12) that fits, so that wide windows stay frequent when max_T is large; every row draws its own, so one
      // batch mixes widths.
      r.T = width > 0 ? width : *rc::gen::oneOf(uniform<int>(1, m.max_T + 1), verify_width(m.max_T));
      // Accepted lengths: the edges 0 and T are where engines break, so they get extra weight.
      r.accepted = *rc::gen::oneOf(rc::gen::just(0), rc::gen::just(r.T), uniform<int>(0, r.T + 1));
      if (r.accepted > 0 && *uniform<int>(0, 8) == 0) r.stop_at = *uniform<int>(1, r.accepted + 1);
      r.seed = *rc::gen::resize(100, rc::gen::arbitrary<std::uint64_t>());
      // Out-of-place commits (double buffers): a quarter of the verify rows write a free slot nobody else in
      // the step writes; the read slot must stay bitwise unchanged.
      if (m.out_of_place && m.reqs.at(id).pending == 0 && *uniform<int>(0, 4) == 3) {
        std::vector<std::int32_t> dst;
        for (auto s : m.free_slots()) {
          bool taken = false;
          for (const auto& o : c.rows) taken = taken || o.to_slot == s;
          if (!taken) dst.push_back(s);
        }
        if (!dst.empty()) r.to_slot = pick(dst);
      }
      c.rows.push_back(r);
    }
    // Under prefill_apart a prefill step runs eager and unpadded.
    const bool unpadded = m.step_mix.prefill_apart && prefills(m, c);
    const int pads = unpadded ? 0 : *uniform<int>(0, 3);
    for (int i = 0; i < pads; ++i) c.pad_at.push_back(*uniform<int>(0, static_cast<int>(c.rows.size()) + 1));
    RC_PRE(!c.rows.empty() || !c.pad_at.empty());  // an all-padding batch is a case; an empty one is not
    if (m.graph && !unpadded && *uniform<int>(0, 2) != 0) {  // shrinks toward an eager step
      // A captured batch: one of the captured sizes (powers of two, and the capacity) that holds the live
      // rows; its tail is mostly what earlier captured steps left in the index buffer.
      const auto live = static_cast<std::int32_t>(c.rows.size() + c.pad_at.size());
      std::vector<std::int32_t> sizes;
      for (std::int32_t z = 1; z < m.max_rows; z *= 2)
        if (z >= live) sizes.push_back(z);
      sizes.push_back(m.max_rows);
      c.graph = pick(sizes);
      c.stale_tail = *uniform<int>(0, 4) != 0;
    }
  }
  void checkPreconditions(const LifecycleModel& m) const override {
    RC_PRE(!c.rows.empty() || !c.pad_at.empty());
    for (const auto& r : c.rows) {
      const auto it = m.reqs.find(r.req);
      RC_PRE(it != m.reqs.end() && it->second.status == Status::Running);
      RC_PRE(r.to_slot < 0 || (it->second.pending == 0 && contains(m.free_slots(), r.to_slot)));
    }
    RC_PRE(within_mix(m, c));  // a shrunk sequence may leave other chunks pending
  }
  // Whether a prefilling request is in the step.
  static bool prefills(const LifecycleModel& m, const Cmd& c) {
    for (const auto& r : c.rows)
      if (m.reqs.at(r.req).pending > 0) return true;
    return false;
  }
  // The step mixes no more than m.step_mix allows (the rule ref::Engine::step_width enforces).
  static bool within_mix(const LifecycleModel& m, const Cmd& c) {
    std::int32_t width = 0;
    bool prefill = false, verify = false;
    for (const auto& r : c.rows) {
      const std::int32_t pending = m.reqs.at(r.req).pending;
      const std::int32_t T = pending > 0 ? std::min(std::max(r.T, 1), pending) : r.T;
      if (m.step_mix.one_width && width > 0 && T != width) return false;
      width = T;
      (pending > 0 ? prefill : verify) = true;
    }
    if (m.step_mix.prefill_apart && prefill && (verify || !c.pad_at.empty() || c.graph > 0)) return false;
    return true;
  }
};

// A running request leaving its slot (finished: Finish; preempted: Preempt); what it computed stays on record
// for a later Restart.
struct Release : LifecycleCommand {
  Release(const LifecycleModel& m, Cmd::Kind kind) {
    c.kind = kind;
    c.req = pick(m.with_status(Status::Running));
  }
  void checkPreconditions(const LifecycleModel& m) const override {
    RC_PRE(m.reqs.count(c.req) && m.reqs.at(c.req).status == Status::Running);
  }
};

struct Finish : Release {
  explicit Finish(const LifecycleModel& m) : Release(m, Cmd::Kind::Finish) {}
};

// Restarting a request that holds no slot (finished: Continue; preempted: Resume) into a free slot: every
// token it had, committed or pending, plus c.prompt new ones (Continue only; 0 for Resume) is pending again and
// is prefilled from a fresh state.
struct Restart : LifecycleCommand {
  Status from;
  Restart(const LifecycleModel& m, Cmd::Kind kind, Status from_status) : from(from_status) {
    c.kind = kind;
    c.req = pick(m.with_status(from));
    c.slot = pick(m.free_slots());
  }
  void checkPreconditions(const LifecycleModel& m) const override {
    RC_PRE(m.reqs.count(c.req) && m.reqs.at(c.req).status == from && contains(m.free_slots(), c.slot));
  }
};

// A finished request's next turn: c.prompt new prompt tokens after its history.
struct Continue : Restart {
  explicit Continue(const LifecycleModel& m) : Restart(m, Cmd::Kind::Continue, Status::Finished) {
    c.prompt = *uniform<int>(1, 7);
    c.seed = *rc::gen::resize(100, rc::gen::arbitrary<std::uint64_t>());
  }
};

struct Copy : LifecycleCommand {
  explicit Copy(const LifecycleModel& m) {
    RC_PRE(m.allow_copy);
    c.kind = Cmd::Kind::Copy;
    std::vector<std::int32_t> src;
    for (auto id : m.with_status(Status::Running))
      if (m.reqs.at(id).pending == 0) src.push_back(id);
    c.req = pick(src);
    c.req2 = m.next_id;
    c.slot = pick(m.free_slots());
  }
  void checkPreconditions(const LifecycleModel& m) const override {
    RC_PRE(m.reqs.count(c.req) && m.reqs.at(c.req).status == Status::Running && m.reqs.at(c.req).pending == 0 &&
           !m.reqs.count(c.req2) && contains(m.free_slots(), c.slot));
  }
};

struct Preempt : Release {
  explicit Preempt(const LifecycleModel& m) : Release(m, Cmd::Kind::Preempt) {}
};

// A preempted request back in a slot (no new tokens: c.prompt stays 0).
struct Resume : Restart {
  explicit Resume(const LifecycleModel& m) : Restart(m, Cmd::Kind::Resume, Status::Preempted) {}
};

// A new CUDA-graph bucket captured while requests are live (Target::capture): valid in every model state and
// changes no request.
struct Capture : LifecycleCommand {
  explicit Capture(const Cmd& cmd) { c = cmd; }
};

// Where a capture goes: before command `at` of the generated sequence (at == size: after the last one), with a
// captured size (a power of two, or the capacity) and a window in [1, max_T]. Shown in a counterexample as
// "capture rows=R T=W before command I".
struct CapturePoint {
  std::size_t at = 0;
  std::int32_t rows = 1, T = 1;
};
void showValue(const CapturePoint& p, std::ostream& os) {
  os << "capture rows=" << p.rows << " T=" << p.T << " before command " << p.at;
}

// Captures for a target that takes them: one to three, at drawn positions of a generated sequence of n commands.
// They are one draw made after the sequence's own (so every sequence is the one the generator makes without
// captures, and the other commands' catch rates stay as measured); most positions lie after the first admit
// and step, while requests are live.
rc::Gen<std::vector<CapturePoint>> capture_points(std::size_t n, const LifecycleModel& m) {
  return rc::gen::exec([n, m] {
    std::vector<std::int32_t> sizes;
    for (std::int32_t z = 1; z < m.max_rows; z *= 2) sizes.push_back(z);
    sizes.push_back(m.max_rows);
    std::vector<CapturePoint> v(static_cast<std::size_t>(*uniform<int>(1, 4)));
    for (auto& p : v) p = CapturePoint{*uniform<std::size_t>(0, n + 1), pick(sizes), *uniform<int>(1, m.max_T + 1)};
    return v;
  });
}

rc::state::Commands<Base> with_captures(const rc::state::Commands<Base>& cmds, std::vector<CapturePoint> points) {
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.at < b.at; });
  rc::state::Commands<Base> out;
  std::size_t next = 0;
  for (std::size_t i = 0; i <= cmds.size(); ++i) {
    for (; next < points.size() && points[next].at <= i; ++next) {
      Cmd c;
      c.kind = Cmd::Kind::Capture;
      c.graph = points[next].rows;
      c.capture_T = points[next].T;
      out.push_back(std::make_shared<const Capture>(c));
    }
    if (i < cmds.size()) out.push_back(cmds[i]);
  }
  return out;
}

// A step that replays a captured bucket (Cmd::replay_T, protocol 1.9): a Step whose rows were drawn once the
// model's state was known (with_graph_replays). Valid while its bucket is captured and its requests run, done
// prefilling.
struct Replay : LifecycleCommand {
  explicit Replay(const Cmd& cmd) { c = cmd; }
  void checkPreconditions(const LifecycleModel& m) const override {
    RC_PRE(m.captured.count({c.graph, c.replay_T}) > 0);
    RC_PRE(static_cast<std::int32_t>(c.rows.size() + c.pad_at.size()) <= c.graph);
    for (const auto& r : c.rows)
      RC_PRE(m.reqs.count(r.req) && m.reqs.at(r.req).status == Status::Running && m.reqs.at(r.req).pending == 0);
  }
};

// The replay of bucket (rows C, window W) that a point makes in the model's state m, from the draws of rng (none
// when no request is running done prefilling): 1 to C of those requests in random order, W-wide verify rows with
// accepted counts drawn as a step's (0 and W weighted), up to two PAD rows where they fit, a stale or PAD graph
// tail. No early stop: a replay ends no request, so it never invalidates a later command of the sequence (a self
// check or a step of that request), and it may go anywhere once the sequence's other commands are placed.
std::optional<Cmd> replay_at(std::int32_t C, std::int32_t W, const LifecycleModel& m, Rng& rng) {
  auto below = [&](std::uint64_t k) { return static_cast<std::int32_t>(rng.next_u64() % k); };
  std::vector<std::int32_t> ready;
  for (auto id : m.with_status(Status::Running))
    if (m.reqs.at(id).pending == 0) ready.push_back(id);
  if (ready.empty()) return std::nullopt;
  Cmd c;
  c.kind = Cmd::Kind::Step;
  c.graph = C;
  c.replay_T = W;
  c.stale_tail = below(4) != 0;
  const std::int32_t rows = 1 + below(static_cast<std::uint64_t>(std::min<std::int32_t>(C, static_cast<std::int32_t>(ready.size()))));
  for (std::int32_t i = 0; i < rows; ++i) {
    const auto k = static_cast<std::size_t>(below(ready.size()));
    RowSpec r;
    r.req = ready[k];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(k));
    r.T = W;
    const std::int32_t coin = below(3);
    r.accepted = coin == 0 ? 0 : coin == 1 ? W : below(static_cast<std::uint64_t>(W + 1));
    r.seed = rng.next_u64();
    c.rows.push_back(r);
  }
  const std::int32_t pads = std::min(below(3), C - rows);
  for (std::int32_t i = 0; i < pads; ++i) c.pad_at.push_back(below(static_cast<std::uint64_t>(rows + 1)));
  return c;
}

// Replays of the captured buckets (graph replay, protocol 1.9): after each capture of the sequence, two or three
// replays of its bucket, each due a drawn number of commands (0 to 7) after the previous one and made at the first
// command from there where a request is ready (replay_at). Drawn from `draw` after every other draw of the case
// (the sequence's, the captures' and the self checks'), so every case holds what it holds without them.
rc::state::Commands<Base> with_graph_replays(const rc::state::Commands<Base>& cmds, std::uint64_t draw, LifecycleModel m) {
  Rng rng(draw);
  struct Due {
    std::int32_t C, W, left;  // the bucket, and the replays still to make
    std::size_t at;           // not before this command
  };
  std::vector<Due> due;
  rc::state::Commands<Base> out;
  for (std::size_t i = 0; i <= cmds.size(); ++i) {
    for (auto& d : due)
      while (d.left > 0 && d.at <= i) {
        const auto c = replay_at(d.C, d.W, m, rng);
        if (!c) break;  // nobody ready: try again at the next command
        out.push_back(std::make_shared<const Replay>(*c));
        m.apply(*c);
        --d.left;
        d.at = i + static_cast<std::size_t>(rng.next_u64() % 8);
      }
    if (i == cmds.size()) break;
    out.push_back(cmds[i]);
    const auto& lc = dynamic_cast<const LifecycleCommand&>(*cmds[i]);
    lc.apply(m);
    if (lc.c.kind == Cmd::Kind::Capture)
      due.push_back(Due{lc.c.graph, lc.c.capture_T, 2 + static_cast<std::int32_t>(rng.next_u64() % 2),
                        i + 1 + static_cast<std::size_t>(rng.next_u64() % 8)});
  }
  return out;
}

// A self check on forks of live requests (self_check.hpp): the request table does not change. Valid while its
// requests run, done prefilling, and its forks are free.
struct SelfCheck : LifecycleCommand {
  explicit SelfCheck(const Cmd& cmd) { c = cmd; }
  void checkPreconditions(const LifecycleModel& m) const override {
    const auto free = m.free_slots();
    for (const auto& r : c.rows)
      RC_PRE(m.reqs.count(r.req) && m.reqs.at(r.req).status == Status::Running && m.reqs.at(r.req).pending == 0);
    for (auto f : c.forks) RC_PRE(contains(free, f));
  }
};

// Where a self check goes: before command `at` (at == size: after the last one), or before the first command after
// it where one can be made, its kind, how many rows it would
// fork (as many as there are requests and free slots for), its width(s) and accepted counts drawn from `draw`
// once the model's state at that point is known. Shown as "self_check K before command I".
struct SelfCheckPoint {
  std::size_t at = 0;
  ref::SelfCheckKind kind = ref::SelfCheckKind::VerifyVsSteps;
  std::int32_t rows = 1;
  std::uint64_t draw = 0;
};
void showValue(const SelfCheckPoint& p, std::ostream& os) {
  os << "self_check " << ref::to_string(p.kind) << " rows=" << p.rows << " before command " << p.at;
}

// Self checks: one to three per case (for a target that does not copy slots, chunks only), drawn after the sequence's own draws (and
// the captures'), so every sequence is the one the generator makes without them.
rc::Gen<std::vector<SelfCheckPoint>> self_check_points(std::size_t n, bool copies) {
  return rc::gen::exec([n, copies] {
    // Only chunks forks no request (its fork is a slot allocated for a new prompt): all a non-copying target gets.
    const auto kinds = copies ? ref::all_self_check_kinds() : std::vector<ref::SelfCheckKind>{ref::SelfCheckKind::Chunks};
    std::vector<SelfCheckPoint> v(static_cast<std::size_t>(*uniform<int>(1, 4)));
    for (auto& p : v)
      p = SelfCheckPoint{*uniform<std::size_t>(0, n + 1), kinds[*uniform<std::size_t>(0, kinds.size())], *uniform<int>(1, 4),
                         *rc::gen::resize(100, rc::gen::arbitrary<std::uint64_t>())};
    return v;
  });
}

// The self check a point makes in the model's state m (none when no request could be forked): rows of running
// requests done prefilling, a free slot each, widths in [1, max_T] (verify_vs_steps: at least 2 where max_T
// allows; one width under step_mix.one_width), accepted counts in [0, T] (verify_vs_steps: all T).
std::optional<Cmd> self_check_at(const SelfCheckPoint& p, const LifecycleModel& m) {
  std::vector<std::int32_t> ready;
  for (auto id : m.with_status(Status::Running))
    if (m.reqs.at(id).pending == 0) ready.push_back(id);
  auto free = m.free_slots();
  Rng rng(p.draw);
  auto below = [&](std::uint64_t k) { return static_cast<std::int32_t>(rng.next_u64() % k); };
  const std::int32_t rows = std::min({p.rows, static_cast<std::int32_t>(ready.size()), static_cast<std::int32_t>(free.size())});
  const bool permute = p.kind == ref::SelfCheckKind::Permute;
  if (rows < (permute ? 2 : 1)) return std::nullopt;
  Cmd c;
  c.kind = Cmd::Kind::SelfCheck;
  c.self_check = p.kind;
  const bool chunks = p.kind == ref::SelfCheckKind::Chunks;
  if (chunks && m.max_T < 2) return std::nullopt;  // a window of one token has no chunks
  const std::int32_t lo = (p.kind == ref::SelfCheckKind::VerifyVsSteps && m.max_T >= 2) || chunks ? 2 : 1;
  const std::int32_t one = lo + below(static_cast<std::uint64_t>(m.max_T - lo + 1));
  // chunks under one width: one chunk length for every row, a divisor of the one T below it.
  std::vector<std::int32_t> divisors;
  for (std::int32_t d = 1; d < one; ++d)
    if (one % d == 0) divisors.push_back(d);
  const std::int32_t chunk = divisors.empty() ? 0 : divisors[static_cast<std::size_t>(below(divisors.size()))];
  for (std::int32_t i = 0; i < rows; ++i) {
    const auto k = static_cast<std::size_t>(below(ready.size()));
    RowSpec r;
    r.req = ready[k];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(k));
    r.T = m.step_mix.one_width ? one : lo + below(static_cast<std::uint64_t>(m.max_T - lo + 1));
    if (chunks) r.accepted = m.step_mix.one_width ? chunk : 1 + below(static_cast<std::uint64_t>(r.T - 1));
    else if (p.kind == ref::SelfCheckKind::VerifyVsSteps) r.accepted = r.T;
    else r.accepted = below(static_cast<std::uint64_t>(r.T + 1));
    r.seed = rng.next_u64();
    c.rows.push_back(r);
  }
  for (std::int32_t i = 0; i < rows; ++i) {
    const auto k = static_cast<std::size_t>(below(free.size()));
    c.forks.push_back(free[k]);
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return c;
}

rc::state::Commands<Base> with_self_checks(const rc::state::Commands<Base>& cmds, std::vector<SelfCheckPoint> points,
                                           LifecycleModel m) {
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.at < b.at; });
  rc::state::Commands<Base> out;
  std::vector<SelfCheckPoint> due;  // points reached whose self check could not be made yet: at the next command
  std::size_t next = 0;
  for (std::size_t i = 0; i <= cmds.size(); ++i) {
    for (; next < points.size() && points[next].at <= i; ++next) due.push_back(points[next]);
    std::vector<SelfCheckPoint> waiting;
    for (const auto& p : due) {
      if (const auto c = self_check_at(p, m)) out.push_back(std::make_shared<const SelfCheck>(*c));
      else waiting.push_back(p);
    }
    due = std::move(waiting);
    if (i < cmds.size()) {
      out.push_back(cmds[i]);
      dynamic_cast<const LifecycleCommand&>(*cmds[i]).apply(m);
    }
  }
  return out;
}

// The stateful generator of every campaign: the abstract model's valid commands with these weights. A narrowed
// step mix puts fewer rows in a step (one width, one kind), so its steps weigh twice as much: its cases then
// verify about as many rows as the default mix's.
rc::Gen<rc::state::Commands<Base>> command_gen(const LifecycleModel& m0) {
  if (!m0.step_mix.any())
    return rc::state::gen::commands(
        m0, rc::state::gen::execOneOfWithArgs<Admit, Admit, Step, Step, Step, Step, Step, Step, Step, Step, Step,
                                              Step, Step, Step, Finish, Continue, Copy, Preempt, Resume>());
  return rc::state::gen::commands(m0, rc::state::gen::execOneOfWithArgs<Admit, Admit, Step, Step, Step, Step, Step,
                                                                          Step, Finish, Continue, Copy, Preempt, Resume>());
}

}  // namespace

std::vector<ref::Cmd> generate_commands(std::int32_t num_slots, std::int32_t max_T, bool allow_copy,
                                        std::uint64_t seed, int size, bool out_of_place, std::int32_t reserved_slot,
                                        std::int32_t graph_rows, ref::StepMix step_mix) {
  LifecycleModel m0;
  m0.step_mix = step_mix;
  m0.out_of_place = out_of_place;
  m0.reserved_slot = reserved_slot;
  m0.graph = graph_rows > 0;
  m0.max_rows = graph_rows;
  m0.num_slots = num_slots;
  m0.max_T = max_T;
  m0.allow_copy = allow_copy;
  const auto cmds = command_gen(m0)(rc::Random(seed), size).value();
  std::vector<ref::Cmd> out;
  for (const auto& c : cmds) out.push_back(dynamic_cast<const LifecycleCommand&>(*c).c);
  return out;
}

void check_lifecycle(const ref::EngineSetup& setup, const std::string& target, ref::Fault fault,
                     std::vector<ref::Cmd>* last_failure, std::string* last_reason, const LifecycleJudging& judging) {
  ref::EngineSetup s = setup;
  bool graph = false, out_of_place = false, captures = false, replays = false;
  {
    const auto probe = ref::make_target(target, fault);
    std::vector<ref::PadConvention> conv = probe->pad_conventions();
    // The others reserve a slot. Trace fixtures (1.1) record every convention and captured steps.
    if (s.num_slots < 2) conv = {ref::PadConvention::MinusOne};
    RC_ASSERT(!conv.empty());
    s.pad_convention = conv[*uniform<std::size_t>(0, conv.size())];
    graph = probe->graph_padding();
    out_of_place = probe->out_of_place_commit();  // traces record out-of-place commits too
    if (!probe->conv_state()) s.conv.reset();      // the conv component: only on a target that keeps conv windows
    captures = probe->captures();
    replays = captures && graph && probe->graph_replay();
    s.step_mix = probe->step_mix();
  }
  LifecycleModel m0;
  m0.num_slots = s.num_slots;
  m0.max_T = s.max_T;
  m0.reserved_slot = s.reserved_slot();
  m0.graph = graph;
  m0.max_rows = s.max_rows();
  m0.out_of_place = out_of_place;
  m0.step_mix = s.step_mix;
  if (judging.failed_setup) *judging.failed_setup = s;
  if (judging.ran_setup) *judging.ran_setup = s;
  LifecycleSut sut{ref::Judge(s, target, fault, judging.tier, judging.disabled), {}};
  sut.bookkeeping = !judging.disabled.count(ref::Check::Bookkeeping);
  m0.allow_copy = sut.judge.sut().target().implements_copy();
  try {
    auto cmds = *command_gen(m0);
    // Only a target that claims captures is sent them: the others' cases are drawn exactly as before.
    if (captures && sut.judge.oracle().target().captures()) cmds = with_captures(cmds, *capture_points(cmds.size(), m0));
    // Self checks fork by copying (chunks excepted): a target that does not copy slots is sent chunks only.
    if (judging.self_checks) cmds = with_self_checks(cmds, *self_check_points(cmds.size(), m0.allow_copy), m0);
    // Only a target that claims graph replay (with capture and graph padding) is sent replays of its captures,
    // drawn last (the other draws stay as they were without them).
    if (replays && sut.judge.oracle().target().graph_replay())
      cmds = with_graph_replays(cmds, *rc::gen::resize(100, rc::gen::arbitrary<std::uint64_t>()), m0);
    try {
      rc::state::runAll(cmds, m0, sut);
    } catch (...) {
      if (judging.work) *judging.work = sut.judge.work();
      throw;
    }
    if (judging.work) *judging.work = sut.judge.work();
    // Coverage tags (printed by RapidCheck with the success message): sequence length and which
    // lifecycle events the case exercised.
    const auto& ex = sut.judge.executed();
    bool cont = false, copy = false, resume = false, stop = false, stale = false, moved = false, live_capture = false;
    bool mixed_decode = false;  // a batch with T = 1 and T > 1 rows (H6)
    bool replayed = false;      // a captured bucket replayed
    int verify_rows = 0;
    bool wide = false, mixed = false;
    std::set<std::int32_t> live;
    for (const auto& c : ex) {
      bool one = false, more = false;
      for (const auto& r : c.rows) {
        wide = wide || r.T > 8;
        mixed = mixed || r.T != c.rows.front().T;
        (r.T == 1 ? one : more) = true;
        if (r.stop_at > 0) live.erase(r.req);  // an early stop ends the request
      }
      mixed_decode = mixed_decode || (one && more);
      if (c.kind == Cmd::Kind::Admit || c.kind == Cmd::Kind::Continue || c.kind == Cmd::Kind::Resume) live.insert(c.req);
      if (c.kind == Cmd::Kind::Copy) live.insert(c.req2);
      if (c.kind == Cmd::Kind::Finish || c.kind == Cmd::Kind::Preempt) live.erase(c.req);
      live_capture = live_capture || (c.kind == Cmd::Kind::Capture && !live.empty());
      stale = stale || (c.graph > 0 && c.stale_tail);
      replayed = replayed || c.replay_T > 0;
      cont = cont || c.kind == Cmd::Kind::Continue;
      copy = copy || c.kind == Cmd::Kind::Copy;
      resume = resume || c.kind == Cmd::Kind::Resume;
      for (const auto& r : c.rows) {
        stop = stop || r.stop_at > 0;
        moved = moved || r.to_slot >= 0;
        ++verify_rows;
      }
    }
    RC_TAG(ex.size() < 10 ? "cmds<10" : ex.size() < 40 ? "cmds 10-39" : "cmds>=40");
    RC_CLASSIFY(cont, "continuation");
    RC_CLASSIFY(copy, "copy");
    RC_CLASSIFY(resume, "resume");
    RC_CLASSIFY(stop, "early stop");
    RC_CLASSIFY(verify_rows >= 20, "rows>=20");
    RC_CLASSIFY(stale, "graph stale tail");
    RC_CLASSIFY(moved, "out-of-place commit");
    RC_CLASSIFY(wide, "window > 8");
    RC_CLASSIFY(mixed, "mixed widths in a batch");
    RC_CLASSIFY(mixed_decode, "T = 1 and T > 1 rows in a batch");
    RC_CLASSIFY(live_capture, "capture while live");
    RC_CLASSIFY(replayed, "captured graph replayed");
    RC_TAG("pad " + ref::to_string(s.pad_convention));
    RC_TAG("gates " + ref::to_string(s.gates));
    RC_CLASSIFY(s.conv.has_value(), "conv");
  } catch (...) {
    if (!sut.failure.empty()) {
      if (last_failure) *last_failure = sut.judge.executed();
      if (last_reason) *last_reason = sut.failure;
      if (judging.failed_comparison) *judging.failed_comparison = sut.judge.failed_comparison();
      if (judging.failed_tolerance) *judging.failed_tolerance = sut.judge.failed_tolerance();
      if (judging.failed_check)
        *judging.failed_check = sut.bookkeeping_failed ? std::optional<ref::Check>(ref::Check::Bookkeeping)
                                                       : sut.judge.failed_check();
      if (judging.failed_call)
        *judging.failed_call = sut.bookkeeping_failed ? std::string("bookkeeping") : sut.judge.failed_call();
    }
    throw;
  }
}

std::string replay_sequence(const ref::EngineSetup& setup, const std::string& target, ref::Fault fault,
                            const std::vector<ref::Cmd>& cmds, const std::set<ref::Check>& disabled,
                            std::size_t* failed_at, std::string* failed_call) {
  ref::Judge judge(setup, target, fault, std::nullopt, disabled);
  LifecycleModel model;
  model.num_slots = setup.num_slots;
  model.max_T = setup.max_T;
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    std::string err = judge.apply(cmds[i]);
    std::string call = judge.failed_call();
    if (err.empty() && !disabled.count(ref::Check::Bookkeeping)) {
      model.apply(cmds[i]);
      err = bookkeeping_disagreement(model, judge.oracle());
      call = "bookkeeping";
    }
    if (!err.empty()) {
      if (failed_at) *failed_at = i;
      if (failed_call) *failed_call = call;
      return "command " + std::to_string(i) + " (" + cmds[i].str() + "): " + err;
    }
  }
  return {};
}

}  // namespace replayssm::fuzz
