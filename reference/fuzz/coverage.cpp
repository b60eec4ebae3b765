// The coverage matrix, the requirements of a claimed envelope and the verdict levels (coverage.hpp).
#include "coverage.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm::fuzz {

using nlohmann::json;

void Coverage::add_case(const ref::EngineSetup& s, const ref::JudgedWork& w) {
  ++cases;
  const long rows = w.real_rows();
  auto put = [&](const std::string& dim, const std::string& value) {
    auto& cell = matrix[dim][value];
    ++cell.cases;
    cell.rows += rows;
  };
  const auto& c = s.cfg;
  put("op", to_string(c.op));
  put("act_dtype", std::string(dtype_name(c.act_dtype)));
  put("state_dtype", std::string(dtype_name(c.state_dtype)));
  put("layout", to_string(c.layout));
  put("l2norm", to_string(c.l2norm));
  if (c.op == Op::KDA) put("kda_gate", to_string(c.kda_gate));
  put("round_beta_to_act", c.round_beta_to_act ? "true" : "false");
  put("pad_convention", to_string(s.pad_convention));
  put("gates", to_string(s.gates));
  put("conv", s.conv ? "on" : "off");
  put("max_T", std::to_string(s.max_T));
  for (const auto& [T, ns] : w.accepted) {  // a width: the cases that verified it, the rows are this case's
    auto& cell = matrix["width"][std::to_string(T)];
    ++cell.cases;
    cell.rows += rows;
  }
  work.verify_rows += w.verify_rows;
  work.prefill_rows += w.prefill_rows;
  work.pad_rows += w.pad_rows;
  work.stale_tail_rows += w.stale_tail_rows;
  work.pad_tail_rows += w.pad_tail_rows;
  work.out_of_place_rows += w.out_of_place_rows;
  work.early_stops += w.early_stops;
  work.live_captures += w.live_captures;
  work.mixed_width_steps += w.mixed_width_steps;
  work.prefill_verify_steps += w.prefill_verify_steps;
  for (const auto& [T, ns] : w.accepted) work.accepted[T].insert(ns.begin(), ns.end());
  for (const auto& [k, n] : w.commands) work.commands[k] += n;
  for (const auto& [k, n] : w.self_checks) work.self_checks[k] += n;
  work.self_check_rows += w.self_check_rows;
  work.graph_replays += w.graph_replays;
  work.replays_other_slots += w.replays_other_slots;
  work.replays_other_live_rows += w.replays_other_live_rows;
  work.replays_other_accepted += w.replays_other_accepted;
  if (w.self_closest_excess > work.self_closest_excess) {
    work.self_closest_excess = w.self_closest_excess;
    work.self_closest_at = w.self_closest_at;
  }
  if (w.closest_excess > work.closest_excess) {
    work.closest_excess = w.closest_excess;
    work.closest_at = w.closest_at;
  }
}

void Coverage::merge(const Coverage& o) {
  cases += o.cases;
  for (const auto& [dim, values] : o.matrix)
    for (const auto& [v, cell] : values) {
      auto& mine = matrix[dim][v];
      mine.cases += cell.cases;
      mine.rows += cell.rows;
    }
  work.verify_rows += o.work.verify_rows;
  work.prefill_rows += o.work.prefill_rows;
  work.pad_rows += o.work.pad_rows;
  work.stale_tail_rows += o.work.stale_tail_rows;
  work.pad_tail_rows += o.work.pad_tail_rows;
  work.out_of_place_rows += o.work.out_of_place_rows;
  work.early_stops += o.work.early_stops;
  work.live_captures += o.work.live_captures;
  work.mixed_width_steps += o.work.mixed_width_steps;
  work.prefill_verify_steps += o.work.prefill_verify_steps;
  for (const auto& [T, ns] : o.work.accepted) work.accepted[T].insert(ns.begin(), ns.end());
  for (const auto& [k, n] : o.work.commands) work.commands[k] += n;
  for (const auto& [k, n] : o.work.self_checks) work.self_checks[k] += n;
  work.self_check_rows += o.work.self_check_rows;
  work.graph_replays += o.work.graph_replays;
  work.replays_other_slots += o.work.replays_other_slots;
  work.replays_other_live_rows += o.work.replays_other_live_rows;
  work.replays_other_accepted += o.work.replays_other_accepted;
  if (o.work.self_closest_excess > work.self_closest_excess) {
    work.self_closest_excess = o.work.self_closest_excess;
    work.self_closest_at = o.work.self_closest_at;
  }
  if (o.work.closest_excess > work.closest_excess) {
    work.closest_excess = o.work.closest_excess;
    work.closest_at = o.work.closest_at;
  }
  full_depth.insert(o.full_depth.begin(), o.full_depth.end());
}

json Coverage::to_json() const {
  json m = json::object();
  for (const auto& [dim, values] : matrix)
    for (const auto& [v, cell] : values) m[dim][v] = json{{"cases", cell.cases}, {"rows", cell.rows}};
  json acc = json::object();
  for (const auto& [T, ns] : work.accepted) acc[std::to_string(T)] = std::vector<int>(ns.begin(), ns.end());
  return json{{"cases", cases},
              {"matrix", m},
              {"rows", {{"verify", work.verify_rows}, {"prefill", work.prefill_rows}, {"pad", work.pad_rows},
                        {"graph_stale_tail", work.stale_tail_rows}, {"graph_pad_tail", work.pad_tail_rows},
                        {"out_of_place", work.out_of_place_rows}}},
              {"events", {{"early_stops", work.early_stops}, {"live_captures", work.live_captures}}},
              {"steps", {{"mixed_widths", work.mixed_width_steps}, {"prefill_beside_verify", work.prefill_verify_steps}}},
              {"accepted", acc},
              {"commands", work.commands},
              {"self_checks", {{"kinds", work.self_checks}, {"rows", work.self_check_rows},
                               {"closest_to_bound", {{"excess", work.self_closest_excess}, {"at", work.self_closest_at}}}}},
              {"graph_replays", {{"replays", work.graph_replays}, {"other_slots", work.replays_other_slots},
                                 {"other_live_rows", work.replays_other_live_rows},
                                 {"other_accepted", work.replays_other_accepted}}},
              {"closest_to_bound", {{"excess", work.closest_excess}, {"at", work.closest_at}}},
              {"full_depth", std::vector<std::string>(full_depth.begin(), full_depth.end())}};
}

Coverage Coverage::from_json(const json& j, const std::string& field) {
  Coverage c;
  try {
    c.cases = j.at("cases").get<long>();
    for (const auto& [dim, values] : j.at("matrix").items())
      for (const auto& [v, cell] : values.items())
        c.matrix[dim][v] = Cell{cell.at("cases").get<long>(), cell.at("rows").get<long>()};
    const auto& r = j.at("rows");
    c.work.verify_rows = r.at("verify").get<long>();
    c.work.prefill_rows = r.at("prefill").get<long>();
    c.work.pad_rows = r.at("pad").get<long>();
    c.work.stale_tail_rows = r.at("graph_stale_tail").get<long>();
    c.work.pad_tail_rows = r.at("graph_pad_tail").get<long>();
    c.work.out_of_place_rows = r.at("out_of_place").get<long>();
    c.work.early_stops = j.at("events").at("early_stops").get<long>();
    c.work.live_captures = j.at("events").at("live_captures").get<long>();
    for (const auto& [T, ns] : j.at("accepted").items())
      for (const auto& n : ns) c.work.accepted[std::stoi(T)].insert(n.get<int>());
    for (const auto& [k, n] : j.at("commands").items()) c.work.commands[k] = n.get<long>();
    for (const auto& o : j.at("full_depth")) c.full_depth.insert(o.get<std::string>());
    if (j.contains("steps")) {  // absent in reports written before protocol 1.7
      c.work.mixed_width_steps = j.at("steps").at("mixed_widths").get<long>();
      c.work.prefill_verify_steps = j.at("steps").at("prefill_beside_verify").get<long>();
    }
    if (j.contains("self_checks")) {  // absent in reports written before protocol 1.8
      for (const auto& [k, n] : j.at("self_checks").at("kinds").items()) c.work.self_checks[k] = n.get<long>();
      c.work.self_check_rows = j.at("self_checks").at("rows").get<long>();
      c.work.self_closest_excess = j.at("self_checks").at("closest_to_bound").at("excess").get<double>();
      c.work.self_closest_at = j.at("self_checks").at("closest_to_bound").at("at").get<std::string>();
    }
    if (j.contains("graph_replays")) {  // absent in reports written before protocol 1.9
      const auto& g = j.at("graph_replays");
      c.work.graph_replays = g.at("replays").get<long>();
      c.work.replays_other_slots = g.at("other_slots").get<long>();
      c.work.replays_other_live_rows = g.at("other_live_rows").get<long>();
      c.work.replays_other_accepted = g.at("other_accepted").get<long>();
    }
    if (j.contains("closest_to_bound")) {  // absent in reports written before it was recorded
      c.work.closest_excess = j.at("closest_to_bound").at("excess").get<double>();
      c.work.closest_at = j.at("closest_to_bound").at("at").get<std::string>();
    }
  } catch (const json::exception& e) {
    fail(field, "malformed coverage: ", e.what());
  }
  return c;
}

namespace {

long cases_of(const Coverage& c, const std::string& dim, const std::string& v) {
  const auto d = c.matrix.find(dim);
  if (d == c.matrix.end()) return 0;
  const auto it = d->second.find(v);
  return it == d->second.end() ? 0 : it->second.cases;
}

template <class T, class Name>
void need_values(std::vector<std::string>& out, const Coverage& c, const Requirements& r, const std::string& dim,
                 const std::vector<T>& values, Name name) {
  for (const auto& v : values) {
    const long n = cases_of(c, dim, name(v));
    if (n < r.min_cases_per_value)
      out.push_back(dim + " " + name(v) + ": " + std::to_string(n) + " case" + (n == 1 ? "" : "s") + " (at least " +
                    std::to_string(r.min_cases_per_value) + ")");
  }
}

}  // namespace

std::vector<std::string> unmet(const std::vector<Claim>& claims, const Coverage& c, const Requirements& r) {
  std::vector<std::string> out;
  int max_T = 0;
  bool copy = false, graph = false, oop = false, capture = false, conv = false, replay = false;
  bool mixes_widths = false, mixes_kinds = false;  // some claim lets one step mix them
  for (const auto& cl : claims) {
    const auto& e = cl.envelope;
    if (!e.covered()) continue;
    const std::string op = to_string(cl.op);
    if (cases_of(c, "op", op) < r.min_cases_per_value)
      out.push_back("op " + op + ": " + std::to_string(cases_of(c, "op", op)) + " cases (at least " +
                    std::to_string(r.min_cases_per_value) + ")");
    if (!c.full_depth.count(op))
      out.push_back("op " + op + ": no full-depth campaign (" + std::to_string(kFullDepthCases) + " cases of up to " +
                    std::to_string(kFullDepthCommands) + " commands at the smallest dimensions claimed)");
    need_values(out, c, r, "act_dtype", e.act_dtypes, [](DType d) { return std::string(dtype_name(d)); });
    need_values(out, c, r, "state_dtype", e.state_dtypes, [](DType d) { return std::string(dtype_name(d)); });
    need_values(out, c, r, "layout", e.layouts, [](StateLayout l) { return to_string(l); });
    need_values(out, c, r, "l2norm", e.l2norms, [](L2Norm l) { return to_string(l); });
    need_values(out, c, r, "kda_gate", e.kda_gates, [](KdaGate g) { return to_string(g); });
    need_values(out, c, r, "round_beta_to_act", e.round_beta, [](bool b) { return std::string(b ? "true" : "false"); });
    need_values(out, c, r, "pad_convention", e.pad_conventions, [](ref::PadConvention p) { return to_string(p); });
    max_T = std::max(max_T, e.max_T);
    copy = copy || e.copy;
    graph = graph || e.graph_padding;
    oop = oop || e.out_of_place;
    capture = capture || e.capture;
    replay = replay || e.graph_replay;
    conv = conv || e.conv;
    mixes_widths = mixes_widths || !e.step_mix.one_width;
    mixes_kinds = mixes_kinds || !e.step_mix.prefill_apart;
  }
  if (max_T == 0) return out;
  // Widths: every one up to 16 verified; up to exhaustive_accepted_up_to every accepted count, up to 16 the
  // counts 0, T and one between; wider windows in buckets (17-24, 25-32, 33-48, 49-64), each with 0, T and one
  // count between committed by some width of the bucket, and max_T itself verified.
  std::vector<std::string> widths_missing, counts_missing;
  auto seen = [&](int T) -> const std::set<int>* {
    const auto it = c.work.accepted.find(T);
    return it == c.work.accepted.end() ? nullptr : &it->second;
  };
  for (int T = 1; T <= std::min(max_T, 16); ++T) {
    const auto* ns = seen(T);
    if (!ns) {
      widths_missing.push_back(std::to_string(T));
      continue;
    }
    std::string missing;
    bool interior = T < 2;
    for (int n : *ns) interior = interior || (n > 0 && n < T);
    for (int n = 0; n <= T; ++n) {
      const bool wanted = T <= r.exhaustive_accepted_up_to || n == 0 || n == T;
      if (wanted && !ns->count(n)) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
    }
    if (!interior) missing += (missing.empty() ? "" : ", ") + std::string("one strictly between 0 and T");
    if (!missing.empty()) counts_missing.push_back("T = " + std::to_string(T) + ": accepted " + missing + " never committed");
  }
  const int buckets[][2] = {{17, 24}, {25, 32}, {33, 48}, {49, 64}};
  for (const auto& b : buckets) {
    if (b[0] > max_T) break;
    const int hi = std::min(b[1], max_T);
    bool any = false, zero = false, full = false, between = false;
    for (int T = b[0]; T <= hi; ++T)
      if (const auto* ns = seen(T)) {
        any = true;
        zero = zero || ns->count(0);
        full = full || ns->count(T);
        for (int n : *ns) between = between || (n > 0 && n < T);
      }
    const std::string range = std::to_string(b[0]) + ".." + std::to_string(hi);
    if (!any) widths_missing.push_back(range);
    else if (!zero || !full || !between)
      counts_missing.push_back("widths " + range + ": accepted " + std::string(!zero ? "0 " : "") +
                               (!full ? "T " : "") + (!between ? "between 0 and T " : "") + "never committed");
  }
  if (max_T > 16 && !seen(max_T)) widths_missing.push_back(std::to_string(max_T) + " (the claimed maximum)");
  if (!widths_missing.empty()) {
    std::string w;
    for (const auto& x : widths_missing) w += (w.empty() ? "" : ", ") + x;
    out.push_back("verify widths up to the claimed max_T = " + std::to_string(max_T) + ": no verify row of width " + w);
  }
  for (const auto& m : counts_missing) out.push_back("accepted counts, " + m);
  const long rows = c.work.real_rows();
  if (rows < r.min_real_rows)
    out.push_back("real rows that reached the implementation: " + std::to_string(rows) + " (at least " +
                  std::to_string(r.min_real_rows) + ")");
  auto command = [&](const char* k, bool needed) {
    const auto it = c.work.commands.find(k);
    if (needed && (it == c.work.commands.end() || it->second == 0)) out.push_back(std::string("command ") + k + ": never run");
  };
  for (const char* k : {"admit", "step", "finish", "continue", "preempt", "resume"}) command(k, true);
  command("copy", copy);
  if (c.work.prefill_rows == 0) out.push_back("prefill rows: none");
  if (c.work.pad_rows == 0) out.push_back("PAD rows: none");
  if (c.work.early_stops == 0) out.push_back("early stops: none");
  if (mixes_widths && max_T > 1 && c.work.mixed_width_steps == 0)
    out.push_back("step mix: no step mixed widths (the target's step_mix allows it)");
  if (mixes_kinds && c.work.prefill_verify_steps == 0)
    out.push_back("step mix: no step put prefill chunks beside verify rows (the target's step_mix allows it)");
  if (graph && c.work.stale_tail_rows == 0) out.push_back("graph padding: no stale graph tail row");
  if (graph && c.work.pad_tail_rows == 0) out.push_back("graph padding: no PAD graph tail row");
  if (oop && c.work.out_of_place_rows == 0) out.push_back("out-of-place commits: none");
  if (capture && c.work.live_captures == 0) out.push_back("capture while live: none");
  // Captured buckets replayed: each value a graph could keep from its first replay changed on a later one.
  if (replay && c.work.graph_replays == 0) out.push_back("captured graphs replayed: none");
  if (replay && c.work.graph_replays > 0) {
    if (c.work.replays_other_slots == 0) out.push_back("captured graphs replayed: never with other slots");
    if (c.work.replays_other_live_rows == 0) out.push_back("captured graphs replayed: never with another live row count");
    if (c.work.replays_other_accepted == 0) out.push_back("captured graphs replayed: never with other accepted counts");
  }
  // Self checks: every kind the campaign could draw is required. They fork by copying, chunks excepted (a slot
  // allocated for a new prompt, T >= 2); permute needs two requests running and two free slots.
  for (auto k : ref::all_self_check_kinds()) {
    const bool chunks = k == ref::SelfCheckKind::Chunks;
    if (chunks ? max_T < 2 : !copy) continue;
    const auto it = c.work.self_checks.find(ref::to_string(k));
    if (it == c.work.self_checks.end() || it->second == 0)
      out.push_back("self check " + ref::to_string(k) + ": never run" +
                    (k == ref::SelfCheckKind::Permute ? " (with self checks on, it needs two running requests and two free slots)"
                                                       : ""));
  }
  if (conv && cases_of(c, "conv", "on") < r.min_cases_per_value)
    out.push_back("conv: " + std::to_string(cases_of(c, "conv", "on")) + " cases with the conv component (at least " +
                  std::to_string(r.min_cases_per_value) + ")");
  return out;
}

std::string to_string(Level l) {
  switch (l) {
    case Level::Conformant: return "CONFORMANT";
    case Level::NotConformant: return "NOT CONFORMANT";
    case Level::Incomplete: return "INCOMPLETE";
  }
  return "?";
}

int exit_status(Level l) { return l == Level::Conformant ? 0 : l == Level::NotConformant ? 1 : 3; }

Level level_of(bool failed, bool claimed_anything, const std::vector<std::string>& missing) {
  if (failed) return Level::NotConformant;
  if (!claimed_anything || !missing.empty()) return Level::Incomplete;
  return Level::Conformant;
}

std::string matrix_text(const Coverage& c) {
  std::ostringstream os;
  os << "coverage: " << c.cases << " cases; rows verify " << c.work.verify_rows << ", prefill " << c.work.prefill_rows
     << ", PAD " << c.work.pad_rows << " (graph tail stale " << c.work.stale_tail_rows << ", PAD "
     << c.work.pad_tail_rows << "), out of place " << c.work.out_of_place_rows << "; early stops " << c.work.early_stops
     << ", live captures " << c.work.live_captures << "; steps mixing widths " << c.work.mixed_width_steps
     << ", prefill beside verify " << c.work.prefill_verify_steps << "\n";
  os << "  commands:";
  for (const auto& [k, n] : c.work.commands) os << " " << k << " " << n;
  os << "\n  captured graphs replayed: " << c.work.graph_replays << " (other slots " << c.work.replays_other_slots
     << ", another live row count " << c.work.replays_other_live_rows << ", other accepted counts "
     << c.work.replays_other_accepted << " than the bucket's first replay)";
  os << "\n  self checks (the implementation against itself):";
  if (c.work.self_checks.empty()) os << " none";
  for (const auto& [k, n] : c.work.self_checks) os << " " << k << " " << n;
  if (!c.work.self_checks.empty()) os << " (" << c.work.self_check_rows << " rows forked)";
  os << "\n";
  for (const auto& [dim, values] : c.matrix) {
    os << "  " << dim << ":";
    for (const auto& [v, cell] : values) os << "  " << v << " " << cell.cases << "/" << cell.rows;
    os << "\n";
  }
  os << "  (value cases/rows; full depth: ";
  if (c.full_depth.empty()) os << "none";
  for (auto it = c.full_depth.begin(); it != c.full_depth.end(); ++it) os << (it == c.full_depth.begin() ? "" : " ") << *it;
  os << ")\n";
  if (c.work.closest_excess > 0)
    os << "  closest to the tier bound: " << c.work.closest_excess << "x the bound at the worst element, in "
       << c.work.closest_at << "\n";
  else if (c.cases > 0)
    os << "  closest to the tier bound: every comparison bit-exact\n";
  if (c.work.self_closest_excess > 0)
    os << "  closest to a self-check bound: " << c.work.self_closest_excess << "x the bound at the worst element, in "
       << c.work.self_closest_at << "\n";
  return os.str();
}

}  // namespace replayssm::fuzz
