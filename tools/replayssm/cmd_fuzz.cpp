#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "campaign.hpp"
#include "commands.hpp"
#include "replayssm/error.hpp"
#include "replayssm/reference/golden.hpp"

namespace replayssm::cli {

std::vector<std::string> collect_fixtures(const std::vector<std::string>& args);
int check_and_print(const std::vector<std::string>& files, nlohmann::json* report, bool quiet);

namespace {
struct FuzzArgs {
  std::string target = "reference";
  std::string preset = "qwen3.5";
  int layers = 2;
  int cases = 100;  // the property suite's budget: every catalogue fault is caught at it
  int max_commands = 100;
  int slots = 6;
  int max_T = 4;
  std::uint64_t seed = 1;
  std::string recon = "serial";
  std::string ring_dtype = "F32";
  std::string fault = "none";
  std::string dump_dir = ".";
};

void add_fuzz_options(CLI::App* c, FuzzArgs& a) {
  c->add_option("--preset", a.preset, "Model preset")->capture_default_str();
  c->add_option("--layers", a.layers, "Layers to simulate (0 = all of the preset)")->capture_default_str();
  c->add_option("--cases", a.cases, "Command sequences per target")->capture_default_str();
  c->add_option("--max-commands", a.max_commands, "Longest command sequence")->capture_default_str();
  c->add_option("--slots", a.slots, "State pool slots")->capture_default_str();
  c->add_option("--max-T", a.max_T, "Largest verify window (1 + drafts)")->capture_default_str();
  c->add_option("--seed", a.seed,
                "Campaign seed: same options and seed, same cases (RapidCheck's own 'Using configuration: seed=' "
                "line is its global default and does not apply to campaigns)")
      ->capture_default_str();
  c->add_option("--recon", a.recon, "Ring reconstruction: serial or closed_form")->capture_default_str();
  c->add_option("--ring-dtype", a.ring_dtype, "Ring record dtype: F32 or BF16")->capture_default_str();
  c->add_option("--dump-dir", a.dump_dir, "Where a failing case is written")->capture_default_str();
}

fuzz::FuzzOptions options_for(const FuzzArgs& a, const std::string& target) {
  fuzz::FuzzOptions o;
  o.target = target;
  o.cfg = preset(a.preset);
  require(a.layers >= 0, "layers", "must be >= 0");
  if (a.layers > 0) o.cfg.num_layers = std::min(a.layers, o.cfg.num_layers);
  o.seed = a.seed;
  o.cases = a.cases;
  o.max_commands = a.max_commands;
  o.num_slots = a.slots;
  o.max_T = a.max_T;
  require(a.recon == "serial" || a.recon == "closed_form", "recon", "must be serial or closed_form");
  o.recon = a.recon == "serial" ? ref::Reconstruction::Serial : ref::Reconstruction::ClosedForm;
  o.ring_record_dtype = parse_dtype(a.ring_dtype, "ring-dtype");
  o.fault = ref::parse_fault(a.fault);
  o.dump_dir = a.dump_dir;
  return o;
}

// "reference" means both reference designs; with an injected fault, only those in which the fault exists.
std::vector<std::string> targets_for(const std::string& t, const std::string& fault = "none") {
  if (t != "reference") return {t};
  if (fault == "none") return {"replay", "ring"};
  return ref::fault_targets(ref::parse_fault(fault));
}

// Progress lines only on an interactive terminal (carriage returns make one endless line in CI logs).
std::ostream* progress_stream() { return ::isatty(2) ? &std::cerr : nullptr; }

void print_report(const fuzz::FuzzReport& r, const FuzzArgs& a) {
  if (r.failed)
    std::printf("%-8s FAIL after %d passing cases  %.2f s\n", r.target.c_str(), r.cases_passed, r.seconds);
  else
    std::printf("%-8s ok    %d cases passed  %.2f s  %.3f cases/s\n", r.target.c_str(), r.cases_passed, r.seconds,
                r.cases_per_second);
  if (r.failed) {
    std::printf("  reason: %s\n", r.reason.c_str());
    if (!r.dump_path.empty()) std::printf("  replay the shrunk case: replayssm fuzz --replay %s\n", r.dump_path.c_str());
    std::printf("  rerun the campaign:     replayssm fuzz --target %s --preset %s --layers %d --cases %d --max-commands %d "
                "--slots %d --max-T %d --recon %s --ring-dtype %s --fault %s --seed %llu\n",
                r.target.c_str(), a.preset.c_str(), a.layers, a.cases, a.max_commands, a.slots, a.max_T, a.recon.c_str(),
                a.ring_dtype.c_str(), a.fault.c_str(), static_cast<unsigned long long>(a.seed));
    std::printf("  shrunk counterexample (RapidCheck):\n%s\n", r.counterexample.c_str());
  }
}
}  // namespace

void register_fuzz(CLI::App& app) {
  auto* c = app.add_subcommand("fuzz", "Fuzz a ReplaySSM target against the full-state oracle (lifecycle model)");
  auto a = std::make_shared<FuzzArgs>();
  auto replay = std::make_shared<std::string>();
  auto json_out = std::make_shared<std::string>();
  c->add_option("--target", a->target,
                "reference (= replay and ring), replay, ring, or another registered target (cuda)")
      ->capture_default_str();
  add_fuzz_options(c, *a);
  c->add_option("--fault", a->fault, "Inject a catalogue fault into the target (to see the suite catch it)")
      ->capture_default_str();
  c->add_option("--replay", *replay, "Re-run a dumped failing case instead of fuzzing");
  c->add_option("--json", *json_out, "Write a machine-readable report to this file");
  c->callback([a, replay, json_out] {
    if (!replay->empty()) {
      std::cout << "replaying " << *replay << " (target, fault, setup and commands as stored in the file)\n";
      const auto why = fuzz::replay_dump(*replay);
      std::cout << (why.empty() ? "case passes now" : "case fails: " + why) << "\n";
      if (!why.empty()) exit_code = 1;
      return;
    }
    auto reports = nlohmann::json::array();
    for (const auto& t : targets_for(a->target, a->fault)) {
      const auto r = fuzz::run_fuzz(options_for(*a, t), progress_stream());
      print_report(r, *a);
      reports.push_back(r.to_json());
      if (r.failed) exit_code = 1;
    }
    if (!json_out->empty()) std::ofstream(*json_out) << nlohmann::json{{"campaigns", reports}}.dump(2) << "\n";
  });
}

void register_conform(CLI::App& app) {
  auto* c = app.add_subcommand(
      "conform", "Main job: golden fixture check plus fuzz campaigns of every reference target, with a summary");
  auto a = std::make_shared<FuzzArgs>();
  // At the preset's real dimensions a case costs ~0.1-1 s, so the preset campaign is shorter than
  // `fuzz`'s default; the bookkeeping is then fuzzed at full depth (100 cases of up to 100 commands, the
  // budget at which the teeth test proves every catalogue fault is caught) on the small preset of the same
  // recurrence (tiny-gdn / tiny-kda).
  a->cases = 30;
  a->max_commands = 50;
  auto fixtures = std::make_shared<std::vector<std::string>>();
  auto json_out = std::make_shared<std::string>();
  auto seed = std::make_shared<std::uint64_t>(20261129);
  auto no_deep = std::make_shared<bool>(false);
  add_fuzz_options(c, *a);
  c->add_flag("--no-deep", *no_deep, "Skip the full-depth bookkeeping campaigns on the small preset");
  c->add_option("--target", a->target, "Targets to fuzz (reference = replay and ring)")->capture_default_str();
  c->add_option("--fixtures", *fixtures,
                "Fixture files/directories to check (default: generate the preset's golden set into a temporary "
                "directory and check it)");
  c->add_option("--fixture-seed", *seed, "Seed of the generated golden set")->capture_default_str();
  c->add_option("--json", *json_out, "Write the machine-readable report to this file");
  c->callback([a, fixtures, json_out, seed, no_deep] {
    nlohmann::json report{{"preset", a->preset}};
    std::vector<std::string> files;
    std::filesystem::path tmp;
    if (fixtures->empty()) {
      tmp = std::filesystem::temp_directory_path() /
            ("replayssm-conform-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
      files = ref::write_golden_set(preset(a->preset), *seed, tmp.string());
      std::cout << "== golden set: " << files.size() << " fixtures for " << a->preset << " generated in " << tmp
                << "\n";
    } else {
      files = collect_fixtures(*fixtures);
    }
    std::cout << "== fixture check\n";
    nlohmann::json fx;
    const int fx_fail = check_and_print(files, &fx, true);
    std::cout << (files.size() - fx_fail) << " passed, " << fx_fail << " failed\n";
    report["fixtures"] = {{"passed", files.size() - fx_fail}, {"failed", fx_fail}, {"results", fx}};
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
    std::cout << "== fuzz campaigns (" << a->cases << " cases each, " << a->layers << " layer(s) of " << a->preset
              << ")\n";
    auto camps = nlohmann::json::array();
    int fz_fail = 0;
    for (const auto& t : targets_for(a->target, a->fault)) {
      const auto r = fuzz::run_fuzz(options_for(*a, t), progress_stream());
      print_report(r, *a);
      camps.push_back(r.to_json());
      fz_fail += r.failed ? 1 : 0;
    }
    if (!*no_deep) {
      FuzzArgs deep = *a;
      deep.preset = preset(a->preset).op == Op::GDN ? "tiny-gdn" : "tiny-kda";
      deep.cases = 100;
      deep.max_commands = 100;
      std::cout << "== full-depth bookkeeping campaigns (" << deep.cases << " cases of up to " << deep.max_commands
                << " commands, " << deep.preset << ")\n";
      for (const auto& t : targets_for(a->target, a->fault)) {
        if (t != "replay" && t != "ring") continue;  // the small presets are reference-only dimensions
        const auto r = fuzz::run_fuzz(options_for(deep, t), progress_stream());
        print_report(r, deep);
        auto j = r.to_json();
        j["preset"] = deep.preset;
        camps.push_back(j);
        fz_fail += r.failed ? 1 : 0;
      }
    }
    report["fuzz"] = camps;
    const bool ok = fx_fail == 0 && fz_fail == 0;
    report["ok"] = ok;
    std::cout << "== summary: fixtures " << (fx_fail ? "FAIL" : "ok") << ", fuzz " << (fz_fail ? "FAIL" : "ok")
              << " -> " << (ok ? "CONFORMANT" : "NOT CONFORMANT") << "\n";
    if (!json_out->empty()) std::ofstream(*json_out) << report.dump(2) << "\n";
    if (!ok) exit_code = 1;
  });
}

}  // namespace replayssm::cli
