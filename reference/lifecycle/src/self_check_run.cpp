// The engine's side of a self check (engine.hpp, Engine::self_check; self_check.hpp): the forks and the two
// paths' steps and commits, through the same Target calls as any step. The judge compares the paths.
#include <algorithm>
#include <set>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/engine.hpp"

namespace replayssm::ref {

void Engine::self_check(const Cmd& c) {
  const auto& cfg = setup_.cfg;
  const std::size_t m = c.rows.size();
  require(m >= 1, "cmd.rows", "a self check needs at least one row");
  require(c.forks.size() == m, "cmd.forks", "holds ", c.forks.size(), " slots, a self check of ", m,
          " row(s) needs ", m, " (one per row)");
  require(target_->implements_copy() || c.self_check == SelfCheckKind::Chunks, "cmd.kind", "target ", target_->name(),
          " does not implement copy_slot, and a self check forks its requests by copying");
  require(c.self_check != SelfCheckKind::Permute || m >= 2, "cmd.rows", "a permuted batch needs two rows or more");
  std::set<std::int32_t> reqs, forks;
  for (const auto& rs : c.rows) {
    const Request& r = request(rs.req);
    require(r.slot != kPadSlot && !r.finished, "cmd.rows", "request ", rs.req, " is not running");
    require(r.pending[0].T == 0, "cmd.rows", "request ", rs.req, " is still prefilling");
    require(reqs.insert(rs.req).second, "cmd.rows", "request ", rs.req, " appears twice in one self check");
    require(rs.T >= 1 && rs.T <= setup_.max_T, "cmd.rows.T", "is ", rs.T, ", outside [1, max_T=", setup_.max_T, "]");
    require(rs.accepted >= 0 && rs.accepted <= rs.T, "cmd.rows.accepted", "is ", rs.accepted, ", outside [0, T=",
            rs.T, "]");
    require(c.self_check != SelfCheckKind::VerifyVsSteps || rs.accepted == rs.T, "cmd.rows.accepted", "is ",
            rs.accepted, ", and verify_vs_steps accepts every token (T = ", rs.T, ")");
    require(c.self_check != SelfCheckKind::Chunks || (rs.accepted >= 1 && rs.accepted < rs.T), "cmd.rows.accepted",
            "is ", rs.accepted, ", and chunks takes it as path B's chunk length, in [1, T - 1 = ", rs.T - 1, "]");
    require(c.self_check != SelfCheckKind::Chunks || !setup_.step_mix.one_width ||
                (rs.T % rs.accepted == 0 && rs.accepted == c.rows.front().accepted),
            "cmd.rows.accepted", "is ", rs.accepted, ": under the setup's step_mix (one width per step) every row's "
            "chunks are one length that divides T");
    require(!setup_.step_mix.one_width || rs.T == c.rows.front().T, "cmd.rows.T", "request ", rs.req, "'s row is ",
            rs.T, " tokens wide beside rows of ", c.rows.front().T, ", and the setup's step_mix takes one width per step");
  }
  for (auto f : c.forks) {
    check_free_slot(f);
    require(forks.insert(f).second, "cmd.forks", "slot ", f, " appears twice");
  }
  std::vector<SelfCheckRow> run(m);
  for (std::size_t i = 0; i < m; ++i) {
    SelfCheckRow& x = run[i];
    x.req = c.rows[i].req;
    x.slot = requests_.at(x.req).slot;
    x.fork = c.forks[i];
    x.T = c.rows[i].T;
    x.accepted = c.rows[i].accepted;
    x.committed = c.self_check == SelfCheckKind::VerifyVsSteps || c.self_check == SelfCheckKind::Chunks ? x.T : x.accepted;
    x.tokens = new_tokens(x.T, c.rows[i].seed);
    x.out_a.assign(static_cast<std::size_t>(cfg.num_layers), {});
    x.out_b = x.out_a;
  }
  const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
  // Every fork a fresh copy of its request's slot (allocated first, as a slot a request is copied into); for
  // chunks, a slot allocated to a new prompt (whatever it holds, the fresh prefill must not read it).
  auto fork = [&] {
    for (const auto& x : run) {
      target_->allocate(x.fork);
      if (c.self_check != SelfCheckKind::Chunks) target_->copy_slot(x.slot, x.fork);
    }
  };
  // The forks' committed states (and conv windows) after a path.
  auto states = [&](bool path_b) {
    for (auto& x : run)
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
        (path_b ? x.state_b : x.state_a).push_back(target_->committed_state(l, x.fork));
        if (setup_.conv) (path_b ? x.conv_b : x.conv_a).push_back(target_->conv_committed_state(l, x.fork));
      }
  };
  const bool prefill = c.self_check == SelfCheckKind::Chunks;
  // One step and its commit: the rows of `order` in their forks, each with tokens [j * w, (j + 1) * w) of its
  // window (w = its whole window for j = -1; path B's width: 1 for verify_vs_steps, the chunk length for
  // chunks), as verify rows committing what they verified (verify_vs_steps) or their accepted count, or as prefill
  // chunks of a fresh prompt (chunks: committed by the step, the first from a zero state, as an engine prefills a
  // prompt; a prefill after verify rows is no lifecycle's); records path A's or B's outputs.
  auto step = [&](const std::vector<std::size_t>& order, bool path_b, std::int32_t j) {
    std::vector<TargetRow> rows;
    std::vector<SequenceInputs> packed(static_cast<std::size_t>(cfg.num_layers));
    for (auto& p : packed) p.validate(cfg);
    std::vector<std::size_t> who;
    for (auto i : order) {
      const SelfCheckRow& x = run[i];
      const std::int32_t w = j < 0 ? x.T : prefill ? x.accepted : 1;
      const std::int32_t from = j < 0 ? 0 : j * w;
      if (from >= x.T) continue;
      const std::int32_t len = std::min(w, x.T - from);
      TargetRow t;
      t.kind = prefill ? RowKind::Prefill : RowKind::Verify;
      t.fresh = prefill && from == 0;  // a prompt's first chunk starts from zeros, the next ones from its state
      t.row = BatchRow{x.fork, x.fork, len, packed[0].T, prefill ? len : 0};
      for (std::size_t l = 0; l < packed.size(); ++l)
        packed[l] = SequenceInputs::concat(cfg, packed[l], x.tokens[l].slice(cfg, from, len));
      rows.push_back(t);
      who.push_back(i);
    }
    if (rows.empty()) return false;
    const auto out = target_->step(wire_rows(rows), packed);
    if (setup_.conv) target_->conv_step(wire_rows(rows), packed);
    for (std::size_t k = 0; k < rows.size(); ++k) {
      SelfCheckRow& x = run[who[k]];
      if (!prefill)
        rows[k].row.accepted = c.self_check == SelfCheckKind::VerifyVsSteps ? rows[k].row.T : x.accepted;
      for (std::size_t l = 0; l < out.size(); ++l) {
        auto& dst = path_b ? x.out_b[l] : x.out_a[l];
        const auto* src = out[l].data() + static_cast<std::size_t>(rows[k].row.token_offset) * per;
        dst.insert(dst.end(), src, src + static_cast<std::size_t>(rows[k].row.T) * per);
      }
    }
    target_->commit(wire_rows(rows));
    if (setup_.conv) target_->conv_commit(wire_rows(rows));
    return true;
  };
  std::vector<std::size_t> order(m);
  for (std::size_t i = 0; i < m; ++i) order[i] = i;
  fork();
  step(order, false, -1);  // path A: one step of every whole window
  states(false);
  fork();
  switch (c.self_check) {
    case SelfCheckKind::Repeat: step(order, true, -1); break;
    case SelfCheckKind::Permute: step(std::vector<std::size_t>(order.rbegin(), order.rend()), true, -1); break;
    case SelfCheckKind::VerifyVsSteps:
    case SelfCheckKind::Chunks:
      for (std::int32_t j = 0; step(order, true, j); ++j) {
      }
      break;
  }
  states(true);
  last_self_check_ = std::move(run);
  last_written_.assign(c.forks.begin(), c.forks.end());
  if (setup_.pad_convention == PadConvention::PadSlot) last_written_.push_back(setup_.pad_sentinel());
}

}  // namespace replayssm::ref
