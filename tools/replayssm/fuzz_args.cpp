#include "fuzz_args.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "replayssm/error.hpp"

namespace replayssm::cli {

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

std::vector<std::string> targets_for(const std::string& target, const std::string& fault) {
  if (target != "reference") return {target};
  if (fault == "none") return {"replay", "ring"};
  return ref::fault_targets(ref::parse_fault(fault));
}

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

}  // namespace replayssm::cli
