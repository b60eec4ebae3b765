#include "engine_fuzz.hpp"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine_campaign.hpp"
#include "engine_exec.hpp"
#include "exec_target.hpp"
#include "junit.hpp"
#include "replayssm/error.hpp"
#include "report.hpp"
#include "coverage.hpp"

namespace replayssm::cli {

namespace el = ref::engine_level;

// `--level engine --target exec:'COMMAND'`: an engine in its own process (the engine protocol).
const bool kEngineExecRegistered = exec::register_engine_exec();

void add_engine_level_options(CLI::App* c, EngineLevelArgs& e) {
  c->add_option("--level", e.level,
                "kernel: judge a kernel-level target (Target protocol); engine: judge an engine-level implementation "
                "with request events (--target engine:reference or engine:ring)")
      ->capture_default_str();
  c->add_option("--max-live", e.max_live, "Engine level: most requests holding slots at once")->capture_default_str();
  c->add_option("--commit", e.commit, "Engine level: same_iteration, next_step or both (drawn per case)")
      ->capture_default_str();
  c->add_option("--buffers", e.buffers, "Engine level: in_place, double or both (drawn per case)")
      ->capture_default_str();
}

int run_engine_level(const FuzzArgs& a, const EngineLevelArgs& e, const std::string& json_out,
                     const std::string& junit_out) {
  const auto record = engine_campaign(a, e);
  const fuzz::Shard shard = shard_of(a);
  const bool failed = record.value("failed", false);
  const fuzz::Level level = fuzz::level_of(failed, record.value("cases_passed", 0) > 0, {});
  std::cout << "== verdict: " << fuzz::to_string(level) << "\n";
  const nlohmann::json report{{"command", "fuzz"},
                              {"level", "engine"},
                              {"shard", shard.to_json()},
                              {"campaigns", nlohmann::json::array({record})},
                              {"verdict", fuzz::to_string(level)}};
  if (!json_out.empty()) write_json_report(json_out, report);
  if (!junit_out.empty()) write_junit(junit_out, junit_suites(report));
  return fuzz::exit_status(level);
}

nlohmann::json engine_campaign(const FuzzArgs& a, const EngineLevelArgs& e) {
  fuzz::EngineFuzzOptions o;
  o.target = a.target;
  if (o.target.rfind("engine:", 0) == 0) o.target = o.target.substr(7);  // engine:reference, engine:exec:CMD
  o.cfg = preset(a.preset);
  require(a.layers >= 0, "layers", "must be >= 0");
  if (a.layers > 0) o.cfg.num_layers = std::min(a.layers, o.cfg.num_layers);
  require(a.cases >= 1, "cases", "must be >= 1, got ", a.cases);
  const fuzz::Shard shard = shard_of(a);  // --shard I/N or GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS (shard.hpp)
  o.seed = fuzz::shard_seed(a.seed, shard);
  o.cases = fuzz::shard_cases(a.cases, shard);
  o.max_commands = a.max_commands;
  o.max_live = e.max_live;
  o.max_T = a.max_T;
  if (e.commit != "both") o.commit = el::parse_commit_mode(e.commit, "commit");
  if (e.buffers != "both") o.buffers = el::parse_buffering(e.buffers, "buffers");
  o.fault = el::parse_engine_fault(a.fault);
  o.dump_dir = a.dump_dir;
  o.control = a.control;
  set_exec_timeouts(a);  // an engine process that hangs (or never starts) is given up after these budgets
  if (shard.sharded())
    std::printf("shard %s: %d of %d cases from seed %llu (campaign seed %llu)\n", shard.str().c_str(), o.cases, a.cases,
                static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(a.seed));
  const auto r = fuzz::run_engine_fuzz(o, progress_stream());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "replayssm fuzz --level engine --target %s --preset %s --layers %d --cases %d --max-commands %d "
                "--max-live %d --max-T %d --commit %s --buffers %s --fault %s --seed %llu",
                shell_quote(r.target).c_str(), shell_quote(a.preset).c_str(), a.layers, a.cases, a.max_commands,
                e.max_live, a.max_T, shell_quote(e.commit).c_str(), shell_quote(e.buffers).c_str(),
                shell_quote(a.fault).c_str(), static_cast<unsigned long long>(a.seed));
  const std::string campaign = buf;
  const std::string rerun = campaign + (shard.sharded() ? " --shard " + shard.str() : "");
  if (r.failed)
    std::printf("%-18s FAIL after %d passing cases  %.2f s\n", r.target.c_str(), r.cases_passed, r.seconds);
  else
    std::printf("%-18s ok    %d cases passed  %.2f s  %.3f cases/s\n", r.target.c_str(), r.cases_passed, r.seconds,
                r.cases_per_second);
  if (!r.not_covered.empty()) std::printf("  not covered: %s\n", r.not_covered.c_str());
  if (r.failed) {
    std::printf("  reason: %s\n", r.reason.c_str());
    if (!r.dump_path.empty()) std::printf("  replay the shrunk case: replayssm fuzz --replay %s\n", r.dump_path.c_str());
    std::printf("  rerun the campaign:     %s\n", rerun.c_str());
    std::printf("  shrunk counterexample (RapidCheck):\n%s\n", r.counterexample.c_str());
  }
  auto record = r.to_json();
  record["preset"] = a.preset;
  record["fault"] = a.fault;
  record["shard"] = shard.to_json();
  record["seed"] = o.seed;
  record["cases"] = o.cases;
  record["campaign_seed"] = a.seed;
  record["campaign_cases"] = a.cases;
  record["campaign"] = campaign;  // the same for every shard: report merge groups the shards by it
  record["rerun"] = rerun;
  record["level"] = "engine";
  return record;
}

}  // namespace replayssm::cli
