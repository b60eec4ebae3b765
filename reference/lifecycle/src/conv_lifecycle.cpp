// The conv state through a request lifecycle (conv_lifecycle.hpp): the slot pool of both designs, its
// faults, and the seeded campaign that judges a pool against the full-state oracle and the request histories.
#include "replayssm/lifecycle/conv_lifecycle.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "replayssm/compare.hpp"
#include "replayssm/error.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

std::string to_string(ConvFault f) {
  switch (f) {
    case ConvFault::None: return "none";
    case ConvFault::RollbackToWindow: return "conv_rollback_to_window";
    case ConvFault::ColumnOffByOne: return "conv_column_off_by_one";
    case ConvFault::PadRowWritesSlot0: return "conv_pad_row_writes_slot0";
    case ConvFault::StaleStateOnFreshPrefill: return "conv_stale_state_on_fresh_prefill";
  }
  return "?";
}

std::vector<ConvFault> all_conv_faults() {
  return {ConvFault::RollbackToWindow, ConvFault::ColumnOffByOne, ConvFault::PadRowWritesSlot0,
          ConvFault::StaleStateOnFreshPrefill};
}

ConvFault parse_conv_fault(const std::string& s) {
  if (s == "none") return ConvFault::None;
  std::string names = "none";
  for (auto f : all_conv_faults()) {
    if (to_string(f) == s) return f;
    names += ", " + to_string(f);
  }
  fail("fault", "'", s, "' is not a conv fault (", names, ")");
}

ConvStatePool::ConvStatePool(ConvConfig cfg, ConvParams params, std::int32_t num_slots, ConvDesign design,
                             ConvFault fault)
    : cfg_(std::move(cfg)), params_(std::move(params)), num_slots_(num_slots), design_(design), fault_(fault) {
  cfg_.validate();
  params_.validate(cfg_);
  require(num_slots >= 1 && num_slots <= 4096, "num_slots", "is ", num_slots, ", outside [1, 4096]");
  stride_ = cfg_.state_elems() + 4;  // a gap nothing may write
  pool_.assign(static_cast<std::size_t>(stride_ * num_slots), std::numeric_limits<float>::quiet_NaN());
}

std::vector<float> ConvStatePool::state(std::int32_t slot) const {
  require(slot >= 0 && slot < num_slots_, "slot", "is ", slot, ", outside [0, ", num_slots_, ")");
  const auto b = pool_.begin() + static_cast<std::ptrdiff_t>(slot * stride_);
  return std::vector<float>(b, b + static_cast<std::ptrdiff_t>(cfg_.state_elems()));
}

void ConvStatePool::write(std::int32_t slot, const std::vector<float>& s) {
  std::copy(s.begin(), s.end(), pool_.begin() + static_cast<std::ptrdiff_t>(slot * stride_));
}

std::vector<float> ConvStatePool::prefill(std::int32_t slot, const std::vector<float>& x, int T, bool fresh) {
  const bool zero = fresh && fault_ != ConvFault::StaleStateOnFreshPrefill;
  const auto from = zero ? std::vector<float>(static_cast<std::size_t>(cfg_.state_elems()), 0.0f) : state(slot);
  auto r = conv_update(cfg_, params_, from, x, T, ConvPrecision::KernelFaithful, false);
  write(slot, r.final_state);
  return r.y;
}

std::vector<float> ConvStatePool::verify(const std::vector<ConvRow>& rows, const std::vector<float>& x) {
  const std::int64_t C = cfg_.channels();
  std::int64_t total = 0;
  std::vector<bool> used(static_cast<std::size_t>(num_slots_), false);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string f = "rows[" + std::to_string(i) + "]";
    require(r.slot >= -1 && r.slot < num_slots_, f + ".slot", "is ", r.slot, ", outside [-1, ", num_slots_, ")");
    require(r.slot < 0 || !used[static_cast<std::size_t>(r.slot)], f + ".slot", "slot ", r.slot, " is used twice");
    require(r.T >= 1, f + ".T", "is ", r.T, ", at least 1");
    if (r.slot >= 0) used[static_cast<std::size_t>(r.slot)] = true;
    total += r.T;
  }
  require(static_cast<std::int64_t>(x.size()) == total * C, "x", "has ", x.size(), " values, expected ", total * C);
  std::vector<float> y(x.size(), 0.0f);
  pending_.clear();
  std::int64_t off = 0;
  for (const auto& r : rows) {
    const std::int32_t slot = r.slot < 0 && fault_ == ConvFault::PadRowWritesSlot0 ? 0 : r.slot;
    const std::vector<float> xr(x.begin() + off * C, x.begin() + (off + r.T) * C);
    if (slot >= 0) {
      Pending p{slot, r.T, state(slot), xr, {}};
      auto w = conv_update(cfg_, params_, p.checkpoint, xr, r.T, ConvPrecision::KernelFaithful,
                           design_ == ConvDesign::FullState);
      if (r.slot >= 0) std::copy(w.y.begin(), w.y.end(), y.begin() + off * C);  // PAD rows: zeros
      if (design_ == ConvDesign::FullState) {
        p.states = std::move(w.states);
        p.x.clear();
      }
      pending_.push_back(std::move(p));
    } else {
      pending_.push_back(Pending{-1, r.T, {}, {}, {}});
    }
    off += r.T;
  }
  return y;
}

void ConvStatePool::commit(const std::vector<ConvRow>& rows) {
  require(rows.size() == pending_.size(), "rows", "has ", rows.size(), " rows, the last verify had ", pending_.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& p = pending_[i];
    int n = rows[i].accepted;
    require(n >= 0 && n <= p.T, "rows[" + std::to_string(i) + "].accepted", "is ", n, ", outside [0, T=", p.T, "]");
    if (p.slot < 0) continue;
    if (fault_ == ConvFault::RollbackToWindow) n = p.T;
    if (fault_ == ConvFault::ColumnOffByOne && n > 0) n -= 1;
    if (n == 0) continue;  // nothing accepted: the slot keeps its bytes
    write(p.slot, design_ == ConvDesign::FullState ? conv_commit_full_state(p.checkpoint, p.states, n)
                                                   : conv_commit_replay(cfg_, p.checkpoint, p.x, p.T, n));
  }
  pending_.clear();
}

void ConvStatePool::copy_slot(std::int32_t src, std::int32_t dst) {
  require(dst >= 0 && dst < num_slots_ && dst != src, "dst", "is ", dst, ": a slot other than src in range");
  write(dst, state(src));
}

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::size_t* at) {
  if (a.size() != b.size()) {
    *at = std::min(a.size(), b.size());
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i)
    if (f32_bits(a[i]) != f32_bits(b[i])) {
      *at = i;
      return false;
    }
  return true;
}

struct Request {
  std::int32_t slot = -1;
  std::vector<float> history;  // committed raw inputs [tokens, C]
};

class Campaign {
 public:
  Campaign(const ConvCampaignOptions& o, std::uint64_t seed, ConvDesign design, ConvFault fault)
      : o_(o), rng_(seed), seed_(seed),
        params_(random_conv_params(o.cfg, derive_seed(seed, 1))),
        oracle_(o.cfg, params_, o.num_slots, ConvDesign::FullState),
        target_(o.cfg, params_, o.num_slots, design, fault) {}

  std::string run() {
    for (cmd_ = 0; cmd_ < o_.commands; ++cmd_) {
      const auto before = target_.pool(), before_oracle = oracle_.pool();
      std::vector<std::int32_t> writes;
      const std::int64_t pick = rng_.uniform_int(0, 9);
      if (pick <= 2 && free_slot() >= 0) what_ = admit(&writes);
      else if (pick == 3 && !reqs_.empty()) what_ = finish();
      else if (pick == 4 && !reqs_.empty() && free_slot() >= 0) what_ = copy(&writes);
      else what_ = step(&writes);
      if (!error_.empty()) return where() + ": " + error_;
      if (auto e = check_untouched(before, target_.pool(), writes, "target"); !e.empty()) return e;
      if (auto e = check_untouched(before_oracle, oracle_.pool(), writes, "oracle"); !e.empty()) return e;
      if (auto e = check_states(); !e.empty()) return e;
    }
    return {};
  }

 private:
  const ConvCampaignOptions& o_;
  Rng rng_;
  std::uint64_t seed_;
  ConvParams params_;
  ConvStatePool oracle_, target_;
  std::map<int, Request> reqs_;
  int next_id_ = 0, cmd_ = 0;
  std::string what_, error_;

  std::string where() const {
    std::ostringstream os;
    os << "case seed " << seed_ << ", command " << cmd_ << " (" << what_ << ")";
    return os.str();
  }
  std::int32_t free_slot() {
    std::vector<std::int32_t> free;
    for (std::int32_t s = 0; s < o_.num_slots; ++s)
      if (std::none_of(reqs_.begin(), reqs_.end(), [&](const auto& r) { return r.second.slot == s; })) free.push_back(s);
    return free.empty() ? -1 : free[static_cast<std::size_t>(rng_.uniform_int(0, static_cast<std::int64_t>(free.size()) - 1))];
  }
  void compare_outputs(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
    std::size_t at = 0;
    if (error_.empty() && !same_bits(want, got, &at))
      error_ = std::string(what) + " differ at flat index " + std::to_string(at) + " (token " +
               std::to_string(at / static_cast<std::size_t>(o_.cfg.channels())) + ", channel " +
               std::to_string(at % static_cast<std::size_t>(o_.cfg.channels())) + "): oracle " +
               std::to_string(want[at]) + ", target " + std::to_string(got[at]);
  }
  std::string admit(std::vector<std::int32_t>* writes) {
    const std::int32_t slot = free_slot();
    const int id = next_id_++;
    const int P = static_cast<int>(rng_.uniform_int(1, 9));
    const auto x = random_conv_inputs(o_.cfg, P, rng_.next_u64());
    for (int t0 = 0; t0 < P;) {  // chunks of up to max_T tokens, the first one fresh
      const int n = std::min(P - t0, static_cast<int>(rng_.uniform_int(1, o_.max_T)));
      const std::vector<float> xc(x.begin() + t0 * o_.cfg.channels(), x.begin() + (t0 + n) * o_.cfg.channels());
      compare_outputs(oracle_.prefill(slot, xc, n, t0 == 0), target_.prefill(slot, xc, n, t0 == 0), "prefill outputs");
      t0 += n;
    }
    reqs_[id] = Request{slot, x};
    writes->push_back(slot);
    return "admit request " + std::to_string(id) + " into slot " + std::to_string(slot) + " with a prompt of " +
           std::to_string(P) + " tokens";
  }
  std::string finish() {
    auto it = reqs_.begin();
    std::advance(it, rng_.uniform_int(0, static_cast<std::int64_t>(reqs_.size()) - 1));
    const std::string w = "finish request " + std::to_string(it->first) + " (slot " + std::to_string(it->second.slot) + ")";
    reqs_.erase(it);
    return w;
  }
  std::string copy(std::vector<std::int32_t>* writes) {
    auto it = reqs_.begin();
    std::advance(it, rng_.uniform_int(0, static_cast<std::int64_t>(reqs_.size()) - 1));
    const std::int32_t dst = free_slot();
    oracle_.copy_slot(it->second.slot, dst);
    target_.copy_slot(it->second.slot, dst);
    const int id = next_id_++;
    reqs_[id] = Request{dst, it->second.history};
    writes->push_back(dst);
    return "copy slot " + std::to_string(it->second.slot) + " to slot " + std::to_string(dst);
  }
  std::string step(std::vector<std::int32_t>* writes) {
    std::vector<ConvRow> rows;
    std::vector<int> ids;
    for (const auto& [id, r] : reqs_)
      if (rng_.uniform_int(0, 3) != 0) {
        rows.push_back(ConvRow{r.slot, static_cast<std::int32_t>(rng_.uniform_int(1, o_.max_T)), 0});
        ids.push_back(id);
      }
    const int pads = static_cast<int>(rng_.uniform_int(0, 2));
    for (int i = 0; i < pads; ++i) {
      const auto at = static_cast<std::size_t>(rng_.uniform_int(0, static_cast<std::int64_t>(rows.size())));
      rows.insert(rows.begin() + static_cast<std::ptrdiff_t>(at),
                  ConvRow{-1, static_cast<std::int32_t>(rng_.uniform_int(1, o_.max_T)), 0});
      ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(at), -1);
    }
    if (rows.empty()) return "empty step";
    std::int64_t total = 0;
    for (const auto& r : rows) total += r.T;
    const auto x = random_conv_inputs(o_.cfg, static_cast<int>(total), rng_.next_u64());
    const auto want = oracle_.verify(rows, x);
    compare_outputs(want, target_.verify(rows, x), "verify outputs");
    std::int64_t off = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto& r = rows[i];
      const std::int64_t e = rng_.uniform_int(0, 4);  // the edges 0 and T are favoured
      r.accepted = e == 0 ? 0 : e == 1 ? r.T : static_cast<std::int32_t>(rng_.uniform_int(0, r.T));
      if (r.slot < 0) {
        r.accepted = r.T;  // a PAD row as a padded graph batch sends it: a full window that must commit nothing
        for (std::int64_t k = off * o_.cfg.channels(); k < (off + r.T) * o_.cfg.channels(); ++k)
          if (error_.empty() && f32_bits(want[static_cast<std::size_t>(k)]) != 0u)
            error_ = "the oracle's PAD row output is not +0";
      } else {
        auto& h = reqs_.at(ids[i]).history;
        h.insert(h.end(), x.begin() + off * o_.cfg.channels(), x.begin() + (off + r.accepted) * o_.cfg.channels());
        writes->push_back(r.slot);
      }
      off += r.T;
    }
    oracle_.commit(rows);
    target_.commit(rows);
    return "step of " + std::to_string(rows.size()) + " rows (" + std::to_string(pads) + " PAD)";
  }
  std::string check_untouched(const std::vector<float>& before, const std::vector<float>& after,
                              const std::vector<std::int32_t>& writes, const char* side) const {
    const std::int64_t S = o_.cfg.state_elems(), stride = target_.stride();
    for (std::int32_t s = 0; s < o_.num_slots; ++s) {
      const bool writable = std::find(writes.begin(), writes.end(), s) != writes.end();
      for (std::int64_t i = writable ? S : 0; i < stride; ++i) {
        const auto k = static_cast<std::size_t>(s * stride + i);
        if (f32_bits(before[k]) != f32_bits(after[k]))
          return where() + ": " + side + " wrote slot " + std::to_string(s) + (i >= S ? " gap" : "") +
                 " element " + std::to_string(i) + " outside the command's write set";
      }
    }
    return {};
  }
  std::string check_states() const {
    const std::int64_t M = o_.cfg.state_cols(), C = o_.cfg.channels();
    for (const auto& [id, r] : reqs_) {
      // The history's last W-1 raw inputs (zeros before the first token), rounded to the state dtype.
      const std::int64_t tokens = static_cast<std::int64_t>(r.history.size()) / C;
      std::vector<float> expect(static_cast<std::size_t>(C * M), 0.0f);
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t i = 0; i < M; ++i) {
          const std::int64_t t = tokens - M + i;
          if (t >= 0) expect[static_cast<std::size_t>(c * M + i)] = round_to(o_.cfg.state_dtype, r.history[static_cast<std::size_t>(t * C + c)]);
        }
      std::size_t at = 0;
      const auto want = oracle_.state(r.slot), got = target_.state(r.slot);
      if (!same_bits(expect, want, &at))
        return where() + ": the oracle's conv state of request " + std::to_string(id) + " (slot " +
               std::to_string(r.slot) + ") is not its history's last W-1 inputs at element " + std::to_string(at);
      if (!same_bits(want, got, &at))
        return where() + ": conv state of request " + std::to_string(id) + " slot " + std::to_string(r.slot) +
               " differs at element " + std::to_string(at) + " (channel " + std::to_string(at / M) + ", column " +
               std::to_string(at % M) + "): oracle " + std::to_string(want[at]) + ", target " + std::to_string(got[at]);
    }
    return {};
  }
};

}  // namespace

ConvCampaignResult run_conv_campaign(const ConvCampaignOptions& o, ConvDesign design, ConvFault fault) {
  o.cfg.validate();
  require(o.max_T >= 1 && o.max_T <= 64, "max_T", "is ", o.max_T, ", outside [1, 64]");
  ConvCampaignResult res;
  for (int c = 0; c < o.cases; ++c) {
    Campaign run(o, derive_seed(o.seed, static_cast<std::uint64_t>(c)), design, fault);
    ++res.cases_run;
    const auto e = run.run();
    if (!e.empty()) {
      res.ok = false;
      res.failure = e;
      return res;
    }
  }
  return res;
}

}  // namespace replayssm::ref
