#include "engine_campaign.hpp"

#include <rapidcheck/detail/Configuration.h>

#include <chrono>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "engine_case.hpp"
#include "engine_level.hpp"
#include "rc_campaign.hpp"
#include "replayssm/error.hpp"
#include "replayssm/frame.hpp"

namespace replayssm::fuzz {

namespace el = ref::engine_level;

FuzzReport run_engine_fuzz(const EngineFuzzOptions& opt, std::ostream* progress) {
  opt.cfg.validate();
  require(opt.cases >= 1, "cases", "must be >= 1, got ", opt.cases);
  require(opt.max_commands >= 1 && opt.max_commands <= 10000, "max-commands", "must be in [1, 10000], got ",
          opt.max_commands);
  require(opt.max_live >= 1 && opt.max_live <= 2047, "max-live", "must be in [1, 2047], got ", opt.max_live);
  require(opt.max_T >= 1 && opt.max_T <= 64, "max-T", "must be in [1, 64], got ", opt.max_T);
  // Error("target") / Error("fault") before anything runs; an engine process says here what it claims.
  const auto probe = el::make_request_engine(opt.target, opt.fault);
  FuzzReport rep;
  rep.target = "engine:" + opt.target;
  // What an engine process does not claim it is never sent, and the report says so (the project's engines:
  // the reference engine's runs carry the migrating spec-ring engine in lock step).
  if (opt.target.rfind("exec:", 0) == 0) {
    std::vector<std::string> left_out;
    if (!probe->prefix_snapshots()) left_out.push_back("prefix snapshots and snapshot_hit (prefix_snapshots not claimed)");
    if (!probe->migrates()) left_out.push_back("migrate (migrates not claimed)");
    for (const auto& w : left_out) rep.not_covered += (rep.not_covered.empty() ? "" : "; ") + w;
  }
  std::vector<el::Event> last_seq;
  std::string last_reason;
  el::EngineLevelSetup last_setup;
  int case_no = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // The reference engine is judged under every commit mode and buffering at once (one engine each, in lock
  // step); an engine process once per case, under options drawn for the case (they are hints it may ignore).
  // Prefix snapshots (a block drawn per case) for every engine that keeps them: the project's, and an engine
  // process that claims prefix_snapshots (protocol 0.2). The spec-ring engine commits in place only.
  const bool one = opt.target.rfind("exec:", 0) == 0;
  const bool snapshots = probe->prefix_snapshots();
  const bool ring = opt.target == "ring";
  require(!ring || opt.buffers != el::Buffering::Double, "buffers", "the ring engine commits in place");
  const auto all = option_variants(opt.max_live, opt.commit, ring ? el::Buffering::InPlace : opt.buffers);
  std::vector<el::EngineOptions> last_variants;
  CampaignRun run(opt.control, rep.target, progress);
  auto prop = [&] {
    const std::uint64_t case_seed = *rc::gen::noShrink(rc::gen::arbitrary<std::uint64_t>());
    if (!run.begin_case(case_seed, opt.seed)) return;  // left out by a budget or a signal
    el::EngineOptions o = *engine_options(opt.max_live, snapshots);
    if (opt.commit) o.commit = *opt.commit;
    if (opt.buffers) o.buffers = *opt.buffers;
    if (ring) o.buffers = el::Buffering::InPlace;
    std::vector<el::EngineOptions> variants = one ? std::vector<el::EngineOptions>{o} : all;
    for (auto& v : variants) v.block = o.block;
    const auto setup = el::make_engine_level_setup(opt.cfg, case_seed, opt.max_live, opt.max_T, variants[0]);
    ++case_no;
    try {
      check_engine_level(setup, opt.target, opt.fault, &last_seq, &last_reason, variants);
    } catch (const rc::detail::CaseResult& r) {
      const bool discard = r.type == rc::detail::CaseResult::Type::Discard;
      if (!discard) {
        last_setup = setup;
        last_variants = variants;
      }
      run.end_case(!discard, last_seq.size(), discard);
      throw;
    } catch (...) {
      last_setup = setup;
      last_variants = variants;
      run.end_case(true, last_seq.size());
      throw;
    }
    run.end_case(false, 0);
    if (progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *progress << "\r[fuzz engine:" << opt.target << "] run " << case_no << " (" << s << " s)" << std::flush;
    }
  };
  const PropertyOutcome r =
      run_property(prop, "fuzz/" + rep.target, opt.seed, opt.cases, opt.max_commands, opt.control.no_shrink);
  if (progress) *progress << "\n";
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.cases_passed = run.cases_run() - (r.kind == PropertyOutcome::Kind::Failed ? 1 : 0);
  rep.ended_by = run.ended_by();
  rep.shrink_steps = run.shrink_steps();
  if (r.kind == PropertyOutcome::Kind::Failed) {
    rep.failed = true;
    rep.reason = last_reason.empty() ? r.description : last_reason;
    rep.counterexample = r.counterexample;
    rep.reproduce = "--seed " + std::to_string(opt.seed);
    rep.dump_path = failure_dump_path(opt.dump_dir, "engine-", opt.target, opt.seed);
    write_safetensors_atomic(rep.dump_path,
                             engine_case_file(EngineCase{last_setup, last_variants, opt.target, opt.fault, last_seq, rep.reason}));
  } else if (r.kind == PropertyOutcome::Kind::CouldNotRun) {
    rep.failed = true;
    rep.reason = "fuzz campaign could not run: " + r.description;
  }
  rep.cases_per_second = rep.seconds > 0 ? (rep.cases_passed + (rep.failed ? 1 : 0)) / rep.seconds : 0;
  return rep;
}

std::string replay_engine_dump(const std::string& path, const std::string& target, std::string* notes) {
  const EngineCase c = read_engine_case(path);
  require(c.target.rfind("exec:", 0) != 0 || !target.empty(), "target", "this case was judged against ", c.target,
          "; a command is never taken from a file: give it again with --target exec:'...'");
  std::string use = c.target;
  if (!target.empty() && target != c.target) {
    use = target;
    if (notes) *notes = "recorded engine '" + c.target + "', replaying against '" + target + "'";
  }
  return replay_events(c.setup, use, c.fault, c.events, use.rfind("exec:", 0) == 0 ? std::vector<el::EngineOptions>{c.setup.options}
                                                                                    : c.variants);
}

}  // namespace replayssm::fuzz
