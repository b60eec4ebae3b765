// The judge's check 6 (judge.hpp): the conv component of every request against its per-request truth
// (conv_component.hpp), computed here from the oracle engine's request histories and the step's packed tokens
// with the conv reference (conv.hpp), never from a target's code path.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "replayssm/lifecycle/judge.hpp"

namespace replayssm::ref {

namespace {
bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
// Where the worst element of a [T, C] output or a [C, W-1] window lies.
std::string at_token(const CompareReport& r, std::int64_t C) {
  return " (worst at window token " + std::to_string(r.worst_index / static_cast<std::size_t>(C)) + ", channel " +
         std::to_string(r.worst_index % static_cast<std::size_t>(C)) + ")";
}
std::string at_column(const CompareReport& r, int M) {
  return " (worst at channel " + std::to_string(r.worst_index / static_cast<std::size_t>(M)) + ", column " +
         std::to_string(r.worst_index % static_cast<std::size_t>(M)) + " of " + std::to_string(M) + ", 0 the oldest)";
}
// The truth of a committed window from a request's history: only its last W - 1 tokens reach the window.
std::vector<float> truth_window(const EngineSetup& s, const SequenceInputs& h) {
  const int n = std::min(h.T, s.conv->cfg.state_cols());
  return conv_window_of_history(s.conv->cfg, conv_raw_inputs(s.cfg, h, h.T - n, n), n);
}
}  // namespace

Judge::Windows Judge::conv_truth_windows() const {
  const auto& s = oracle_.setup();
  Windows w;
  for (const auto& [id, r] : oracle_.requests())
    for (std::int32_t l = 0; l < s.cfg.num_layers; ++l) {
      w[id].push_back(truth_window(s, r.history[static_cast<std::size_t>(l)]));
    }
  return w;
}

std::string Judge::check_conv(const Cmd& c, const Windows& windows_before, const Outputs& conv_before_o,
                              const Outputs& conv_before_s) const {
  std::string why;
  if (c.kind == Cmd::Kind::Step && !(why = check_conv_outputs(windows_before)).empty()) return why;
  if (!(why = check_conv_windows()).empty()) return why;
  return check_conv_untouched(c, conv_before_o, conv_before_s);
}

std::string Judge::check_conv_outputs(const Windows& windows_before) const {
  const auto& s = oracle_.setup();
  const auto& cc = s.conv->cfg;
  const std::int64_t C = cc.channels();
  const bool exact = sut_.target().bit_exact() && !tier_;
  for (int side = 0; side < 2; ++side) {
    const Engine& e = side == 0 ? oracle_ : sut_;
    const char* who = side == 0 ? "oracle" : "implementation";
    const auto& y = e.last_conv_outputs();
    if (static_cast<std::int32_t>(y.size()) != s.cfg.num_layers)
      return std::string(who) + " returned conv outputs for " + std::to_string(y.size()) + " layers, expected " +
             std::to_string(s.cfg.num_layers);
    for (std::int32_t l = 0; l < s.cfg.num_layers; ++l) {
      const auto& in = oracle_.last_inputs()[static_cast<std::size_t>(l)];
      const auto& yl = y[static_cast<std::size_t>(l)];
      if (static_cast<std::int64_t>(yl.size()) != in.T * C)
        return std::string(who) + " layer " + std::to_string(l) + ": " + std::to_string(yl.size()) +
               " conv output values, expected total_tokens * C = " + std::to_string(in.T * C);
      for (const auto& pr : oracle_.last_rows()) {
        const auto b = yl.begin() + static_cast<std::ptrdiff_t>(pr.offset * C);
        const std::vector<float> got(b, b + static_cast<std::ptrdiff_t>(pr.T * C));
        std::ostringstream why;
        if (pr.req < 0) {  // PAD and graph tail rows: zeros on the oracle and on a target that claims them
          if ((side == 0 || sut_.target().pad_outputs_zero()) &&
              !bitwise_equal(got, std::vector<float>(got.size(), 0.0f))) {
            why << who << " layer " << l << ": PAD row conv outputs at token offset " << pr.offset << " are not zero ("
                << compare(std::vector<float>(got.size(), 0.0f), got, Tolerance::exact()).str() << ")";
            return why.str();
          }
          continue;
        }
        const auto& before = windows_before.at(pr.req)[static_cast<std::size_t>(l)];
        const auto x = conv_raw_inputs(s.cfg, in, pr.offset, pr.T);
        const auto& p = s.conv->params[static_cast<std::size_t>(l)];
        // Bit-exact sides against the kernel-faithful binary32 path (the reference targets' own arithmetic); any
        // other against the binary64 truth within the bound derived for an fp32 implementation (conv.hpp).
        const bool bitwise = side == 0 || exact;
        const auto truth = conv_update(cc, p, before, x, pr.T,
                                       bitwise ? ConvPrecision::KernelFaithful : ConvPrecision::Truth, false).y;
        Tolerance tol = Tolerance::exact();
        if (!bitwise) {
          const auto bound = conv_output_bound(cc, conv_term_magnitude(cc, p, before, x, pr.T));
          tol = Tolerance::allclose(bound.atol, bound.rtol);
        }
        const auto rep = compare(truth, got, tol);
        if (!rep.ok) {
          if (side == 1) {
            failed_ = rep;
            failed_tol_ = tol;
          }
          why << who << " layer " << l << ", request " << pr.req << ": conv outputs differ from the truth: " << rep.str()
              << at_token(rep, C);
          return why.str();
        }
      }
    }
  }
  return {};
}

std::string Judge::check_conv_windows() const {
  const auto& s = oracle_.setup();
  const auto& cc = s.conv->cfg;
  for (const auto& [id, r] : oracle_.requests()) {
    if (r.slot == kPadSlot || r.pending_fresh) continue;  // not resident, or allocated and not prefilled yet
    for (std::int32_t l = 0; l < s.cfg.num_layers; ++l) {
      const auto& h = r.history[static_cast<std::size_t>(l)];
      const auto truth = truth_window(s, h);
      for (int side = 0; side < 2; ++side) {
        const Engine& e = side == 0 ? oracle_ : sut_;
        const auto rep = compare(truth, e.target().conv_committed_state(l, r.slot), Tolerance::exact());
        if (!rep.ok) {
          if (side == 1) {
            failed_ = rep;
            failed_tol_ = Tolerance::exact();
          }
          std::ostringstream why;
          why << (side ? "implementation" : "oracle") << ": request " << id << " (slot " << r.slot << ") layer " << l
              << ": committed conv window differs from its truth (the last " << cc.state_cols()
              << " raw input columns of its " << h.T << " committed tokens, zeros before the first): " << rep.str()
              << at_column(rep, cc.state_cols());
          return why.str();
        }
      }
    }
  }
  return {};
}

std::string Judge::check_conv_untouched(const Cmd& c, const Outputs& conv_before_o, const Outputs& conv_before_s) const {
  const auto& s = oracle_.setup();
  const std::int64_t elems = s.conv->cfg.state_elems(), stride = elems + 4;
  for (int side = 0; side < 2; ++side) {
    const Engine& e = side == 0 ? oracle_ : sut_;
    const char* who = side == 0 ? "oracle" : "implementation";
    const auto& before = side == 0 ? conv_before_o : conv_before_s;
    const std::set<std::int32_t> allowed(e.last_written().begin(), e.last_written().end());
    const std::set<std::int32_t> kept(e.last_kept().begin(), e.last_kept().end());  // every design: n = 0 writes nothing
    const std::set<std::int32_t> read_only(e.last_read_only().begin(), e.last_read_only().end());
    for (std::int32_t l = 0; l < s.cfg.num_layers; ++l) {
      const auto now = e.target().conv_pool(l);
      if (static_cast<std::int64_t>(now.size()) != s.num_slots * stride)
        return std::string(who) + ": conv pool of layer " + std::to_string(l) + " has " + std::to_string(now.size()) +
               " values, expected num_slots * (C*(W-1) + 4) = " + std::to_string(s.num_slots * stride);
      for (std::int32_t slot = 0; slot < s.num_slots; ++slot) {
        const float* a = before[static_cast<std::size_t>(l)].data() + slot * stride;
        const float* b = now.data() + slot * stride;
        if (!same_bits(a + elems, b + elems, static_cast<std::size_t>(stride - elems)))
          return std::string(who) + ": gap after conv window " + std::to_string(slot) + " (layer " + std::to_string(l) +
                 ") was written";
        if ((!allowed.count(slot) || kept.count(slot) || read_only.count(slot)) &&
            !same_bits(a, b, static_cast<std::size_t>(elems)))
          return std::string(who) + ": conv window of slot " + std::to_string(slot) + " (layer " + std::to_string(l) +
                 ") changed although the command " +
                 (read_only.count(slot) ? "only read it (out-of-place commit)"
                  : kept.count(slot)    ? "committed n = 0 for it"
                                        : "must not touch it") +
                 " [" + c.str() + "]";
      }
    }
  }
  return {};
}

}  // namespace replayssm::ref
