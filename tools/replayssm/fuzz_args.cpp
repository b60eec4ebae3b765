#include "fuzz_args.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <utility>

#include "exec_target.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cli {

void add_fuzz_options(CLI::App* c, FuzzArgs& a) {
  c->add_option("--preset", a.preset, "Model preset")->capture_default_str();
  c->add_option("--layers", a.layers, "Layers to simulate (0 = all of the preset)")->capture_default_str();
  c->add_option("--cases", a.cases, "Command sequences per target")->capture_default_str();
  c->add_option("--max-commands", a.max_commands, "Longest command sequence")->capture_default_str();
  c->add_option("--slots", a.slots, "State pool slots")->capture_default_str();
  c->add_option("--max-T", a.max_T,
                "Widest verify window (1 + drafts) a case may draw, the target's claimed max_T at most; half the cases "
                "draw exactly that width")
      ->capture_default_str();
  c->add_option("--seed", a.seed,
                "Campaign seed: same options and seed, same cases (RC_PARAMS's seed does not apply to campaigns; "
                "the CLI prints no RapidCheck configuration line)")
      ->capture_default_str();
  c->add_option("--recon", a.recon, "Ring reconstruction: serial, closed_form or suffix_sum")->capture_default_str();
  c->add_option("--ring-dtype", a.ring_dtype, "Ring record dtype: F32 or BF16")->capture_default_str();
  c->add_option("--gates", a.gates,
                "Input ranges of the cases: mix (a quarter realistic: large |g|, saturated and near-zero beta; a "
                "quarter checkpoint: realistic gates with q, k rows of norm 1e-3..10 and small v), benign, realistic "
                "or checkpoint")
      ->capture_default_str();
  c->add_option("--conv", a.conv,
                "Cases with the conv component (W = 4, SiLU, windows per slot judged after every command): off, mix "
                "(a quarter of the cases) or on")
      ->capture_default_str();
  c->add_option("--self-checks", a.self_checks,
                "Self checks in every case (the implementation against itself: one verify of T tokens against T "
                "single-token steps, a step repeated, a batch reversed, one prefill chunk against several; a target "
                "that does not copy slots gets the last only): on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  c->add_option("--dims", a.dims,
                "H,HV,K,V: run the preset's recurrence at these heads and dims instead of its own (conform's "
                "full-depth campaigns at the smallest dimensions a target claims)");
  c->add_option("--dump-dir", a.dump_dir, "Where a failing case is written")->capture_default_str();
  c->add_option("--shrink-steps", a.control.shrink_steps,
                "Shrink candidates a failing campaign runs at most (progress on stderr), then reports its smallest")
      ->capture_default_str();
  c->add_option("--shrink-seconds", a.control.shrink_seconds, "Seconds a failing campaign shrinks at most")
      ->capture_default_str();
  c->add_flag("--no-shrink", a.control.no_shrink, "Report the first failing case as found, unshrunk");
  c->add_option("--time-budget", a.control.time_budget,
                "Seconds after which a campaign starts no new case (0: none); the report says it was cut")
      ->capture_default_str();
  c->add_option("--time-limit", a.control.time_limit,
                "Seconds one case may run before the campaign is ended as a hang naming its seed (0: none)")
      ->capture_default_str();
  c->add_option("--min-cases-per-value", a.requirements.min_cases_per_value,
                "Verdict: cases every claimed value of every configuration dimension needs (else INCOMPLETE)")
      ->capture_default_str();
  c->add_option("--min-rows", a.requirements.min_real_rows,
                "Verdict: rows that must reach the implementation (verify and prefill) per verdict")
      ->capture_default_str();
  c->add_option("--exhaustive-accepted", a.requirements.exhaustive_accepted_up_to,
                "Verdict: widths up to this need every accepted count 0..T committed; wider ones 0, T and one between")
      ->capture_default_str();
  c->add_option("--target-timeout", a.target_timeout,
                "Seconds an exec: target may take for one command before it is killed and the case fails")
      ->capture_default_str();
  c->add_option("--target-startup-timeout", a.target_startup_timeout,
                "Seconds a new exec: target process may take to start and answer hello (apart from "
                "--target-timeout, so a short one does not fail a target that is slow to start)")
      ->capture_default_str();
  c->add_option("--l2norm", a.l2norm,
                "Fix the q/k l2norm form (rsqrt_mul, div_sqrt, ...) instead of drawing it per case from what the target "
                "claims");
  c->add_option("--act-dtype", a.act_dtype, "Fix the activation dtype (F32 or BF16) instead of drawing it per case");
  c->add_option("--state-dtype", a.state_dtype, "Fix the state dtype (F32 or BF16) instead of drawing it per case");
  c->add_option("--layout", a.layout, "Fix the state layout (vk or kv) instead of drawing it per case");
  c->add_option("--kda-gate", a.kda_gate,
                "Fix the KDA gate (softplus or lower_bound_sigmoid) instead of drawing it per case");
  c->add_option("--shard", a.shard,
                "I/N: run shard I (from 0) of N of every campaign: its share of --cases from its own seed derived "
                "from --seed (default: $GTEST_SHARD_INDEX/$GTEST_TOTAL_SHARDS when set); merge the shards' --json "
                "reports with `replayssm report merge`");
}

void set_exec_timeouts(const FuzzArgs& a) {
  exec::set_timeout(a.target_timeout);
  exec::set_startup_timeout(a.target_startup_timeout);
}

fuzz::FuzzOptions options_for(const FuzzArgs& a, const std::string& target) {
  fuzz::FuzzOptions o;
  o.target = target;
  o.cfg = preset(a.preset);
  if (!a.dims.empty()) {
    int v[4] = {0, 0, 0, 0};
    char tail = 0;
    require(std::sscanf(a.dims.c_str(), "%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &tail) == 4, "dims",
            "must be H,HV,K,V (four integers), got '", a.dims, "'");
    o.cfg.H = v[0];
    o.cfg.HV = v[1];
    o.cfg.K = v[2];
    o.cfg.V = v[3];
    o.cfg.name = a.preset + "@" + a.dims;
  }
  require(a.layers >= 0, "layers", "must be >= 0");
  if (a.layers > 0) o.cfg.num_layers = std::min(a.layers, o.cfg.num_layers);
  // A fixed dimension is the base configuration's value and the only one drawn (envelope.hpp, narrow).
  if (!a.l2norm.empty()) o.narrowing.l2norm = o.cfg.l2norm = parse_l2norm(a.l2norm, "l2norm");
  if (!a.act_dtype.empty()) o.narrowing.act_dtype = o.cfg.act_dtype = parse_dtype(a.act_dtype, "act-dtype");
  if (!a.state_dtype.empty()) o.narrowing.state_dtype = o.cfg.state_dtype = parse_dtype(a.state_dtype, "state-dtype");
  if (!a.layout.empty()) o.narrowing.layout = o.cfg.layout = parse_layout(a.layout, "layout");
  if (!a.kda_gate.empty()) o.narrowing.kda_gate = o.cfg.kda_gate = parse_kda_gate(a.kda_gate, "kda-gate");
  o.cfg.validate();
  require(a.cases >= 1, "cases", "must be >= 1, got ", a.cases);
  const fuzz::Shard shard = shard_of(a);
  o.seed = fuzz::shard_seed(a.seed, shard);
  o.cases = fuzz::shard_cases(a.cases, shard);
  o.max_commands = a.max_commands;
  o.num_slots = a.slots;
  o.max_T = a.max_T;
  o.recon = ref::parse_reconstruction(a.recon, "recon");
  set_exec_timeouts(a);
  o.ring_record_dtype = parse_dtype(a.ring_dtype, "ring-dtype");
  o.fault = ref::parse_fault(a.fault);
  o.gates = fuzz::parse_gate_mix(a.gates, "gates");
  o.conv = fuzz::parse_conv_mix(a.conv, "conv");
  o.self_checks = a.self_checks == "on";
  o.dump_dir = a.dump_dir;
  o.control = a.control;
  return o;
}

std::vector<std::string> targets_for(const std::string& target, const std::string& fault) {
  if (target != "reference") return {target};
  if (fault == "none") return {"replay", "ring"};
  return ref::fault_targets(ref::parse_fault(fault));
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=+") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string overrides(const FuzzArgs& a) {
  std::string s;
  const std::pair<const char*, const std::string*> flags[] = {{"--l2norm", &a.l2norm}, {"--act-dtype", &a.act_dtype},
                                                              {"--state-dtype", &a.state_dtype}, {"--layout", &a.layout},
                                                              {"--kda-gate", &a.kda_gate}};
  for (const auto& [flag, value] : flags)
    if (!value->empty()) s += std::string(" ") + flag + " " + shell_quote(*value);
  return s;
}

std::ostream* progress_stream() { return ::isatty(2) ? &std::cerr : nullptr; }

fuzz::Shard shard_of(const FuzzArgs& a) { return fuzz::resolve_shard(a.shard); }

std::string campaign_command(const FuzzArgs& a, const std::string& target) {
  return "replayssm fuzz --target " + shell_quote(target) + " --preset " + shell_quote(a.preset) + " --layers " +
         std::to_string(a.layers) + " --cases " + std::to_string(a.cases) + " --max-commands " +
         std::to_string(a.max_commands) + " --slots " + std::to_string(a.slots) + " --max-T " + std::to_string(a.max_T) +
         " --recon " + shell_quote(a.recon) + " --ring-dtype " + shell_quote(a.ring_dtype) + " --gates " + shell_quote(a.gates) +
         " --conv " + shell_quote(a.conv) + (a.self_checks == "on" ? "" : " --self-checks off") +
         (a.dims.empty() ? "" : " --dims " + a.dims) + " --fault " +
         shell_quote(a.fault) + " --seed " + std::to_string(a.seed) + overrides(a) +
         (a.export_trace.empty() ? "" : " --export-trace " + shell_quote(a.export_trace));
}

std::string rerun_command(const FuzzArgs& a, const std::string& target) {
  const fuzz::Shard s = shard_of(a);
  return campaign_command(a, target) + (s.sharded() ? " --shard " + s.str() : "");
}

nlohmann::json campaign_record(const fuzz::FuzzReport& r, const FuzzArgs& a) {
  const fuzz::Shard s = shard_of(a);
  auto j = r.to_json();
  j["preset"] = a.preset;
  j["fault"] = a.fault;
  j["shard"] = s.to_json();
  j["seed"] = fuzz::shard_seed(a.seed, s);
  j["cases"] = fuzz::shard_cases(a.cases, s);
  j["campaign_seed"] = a.seed;
  j["campaign_cases"] = a.cases;
  j["campaign"] = campaign_command(a, r.target);
  j["rerun"] = rerun_command(a, r.target);
  return j;
}

void print_report(const fuzz::FuzzReport& r, const FuzzArgs& a) {
  if (!r.covered) {
    std::printf("%-8s NOT COVERED  %s\n", r.target.c_str(), r.not_covered.c_str());
    return;
  }
  if (r.failed)
    std::printf("%-8s FAIL after %d passing cases  %.2f s\n", r.target.c_str(), r.cases_passed, r.seconds);
  else
    std::printf("%-8s ok    %d cases passed  %.2f s  %.3f cases/s%s%s\n", r.target.c_str(), r.cases_passed, r.seconds,
                r.cases_per_second, r.not_covered.empty() ? "" : ("  (not covered: " + r.not_covered + ")").c_str(),
                r.ended_by.empty() ? "" : ("  (ended by the " + r.ended_by + ")").c_str());
  if (r.failed) {
    std::printf("  reason: %s\n", r.reason.c_str());
    if (!r.check.empty()) std::printf("  caught by check: %s (after %s)\n", r.check.c_str(), r.call.c_str());
    // An exec: target's command is given again on replay: a command is never taken from a file.
    const bool exec = r.target.rfind("exec:", 0) == 0;
    if (!r.dump_path.empty())
      std::printf("  replay the shrunk case: replayssm fuzz --replay %s%s\n", r.dump_path.c_str(),
                  exec ? (" --target " + shell_quote(r.target)).c_str() : "");
    std::printf("  rerun the campaign:     %s\n", rerun_command(a, r.target).c_str());
    std::printf("  shrinking: %d candidate(s)%s\n", r.shrink_steps,
                r.ended_by.empty() ? "" : (", ended by the " + r.ended_by).c_str());
    std::printf("  shrunk counterexample (RapidCheck):\n%s\n", r.counterexample.c_str());
    if (!r.sequence.empty()) {  // what the implementation was sent, inserted commands included
      std::printf("  the shrunk case as executed (the last command failed):\n");
      for (const auto& c : r.sequence) std::printf("    %s\n", c.c_str());
    }
  }
}

}  // namespace replayssm::cli
