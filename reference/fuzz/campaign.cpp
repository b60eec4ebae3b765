#include "campaign.hpp"

#include <rapidcheck/detail/Configuration.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "fuzz_case.hpp"
#include "rc_campaign.hpp"
#include "lifecycle.hpp"
#include "replayssm/error.hpp"
#include "replayssm/frame.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/safetensors.hpp"

namespace replayssm::fuzz {

nlohmann::json FuzzReport::to_json() const {
  return nlohmann::json{{"target", target},   {"op", op}, {"covered", covered}, {"not_covered", not_covered},
                        {"cases_passed", cases_passed}, {"failed", failed},
                        {"reason", reason},   {"check", check}, {"call", call},
                        {"counterexample", counterexample}, {"sequence", sequence},
                        {"reproduce", reproduce}, {"dump_path", dump_path}, {"seconds", seconds},
                        {"cases_per_second", cases_per_second}, {"ended_by", ended_by},
                        {"shrink_steps", shrink_steps}, {"envelope", envelope.to_json()},
                        {"coverage", coverage.to_json()}};
}

GateMix parse_gate_mix(const std::string& s, const std::string& field) {
  if (s == "mix") return GateMix::Mix;
  if (s == "benign") return GateMix::Benign;
  if (s == "realistic") return GateMix::Realistic;
  if (s == "checkpoint") return GateMix::Checkpoint;
  fail(field, "unknown gate mix '", s, "' (mix, benign, realistic, checkpoint)");
}

ref::GateRange case_gates(GateMix mix, std::uint64_t case_seed) {
  if (mix == GateMix::Mix) {  // a quarter realistic, a quarter checkpoint, half benign
    const auto pick = derive_seed(case_seed, 0x6a7e) % 4;
    return pick == 0 ? ref::GateRange::Realistic : pick == 1 ? ref::GateRange::Checkpoint : ref::GateRange::Benign;
  }
  if (mix == GateMix::Checkpoint) return ref::GateRange::Checkpoint;
  return mix == GateMix::Realistic ? ref::GateRange::Realistic : ref::GateRange::Benign;
}

ConvMix parse_conv_mix(const std::string& s, const std::string& field) {
  if (s == "off") return ConvMix::Off;
  if (s == "mix") return ConvMix::Mix;
  if (s == "on") return ConvMix::On;
  fail(field, "unknown conv mix '", s, "' (off, mix, on)");
}

bool case_conv(ConvMix mix, std::uint64_t case_seed) {
  if (mix == ConvMix::Mix) return derive_seed(case_seed, 0xc0a7) % 4 == 0;
  return mix == ConvMix::On;
}

namespace {
ref::EngineSetup setup_for(const FuzzOptions& opt, const Envelope& env, const ref::Target& probe, std::uint64_t case_seed) {
  const CaseConfig cc = draw_config(env, opt.cfg, probe, case_seed);
  auto s = ref::make_setup(cc.cfg, case_seed, opt.num_slots, cc.max_T, case_gates(opt.gates, case_seed));
  if (case_conv(opt.conv, case_seed))
    s.conv = ref::make_conv_setup(cc.cfg, derive_seed(case_seed, 0xc0a7), opt.conv_shape.kernel_size,
                                  opt.conv_shape.state_dtype.value_or(cc.cfg.act_dtype), opt.conv_shape.activation,
                                  opt.conv_shape.bias);
  s.recon = opt.recon;
  s.record_dtype = opt.ring_record_dtype;
  return s;
}

void dump(const std::string& path, const FuzzOptions& opt, const ref::EngineSetup& setup,
          const std::vector<ref::Cmd>& cmds, const std::string& reason) {
  write_safetensors_atomic(path, fuzz_case_file(FuzzCase{setup, opt.target, opt.fault, cmds, reason}));
}
}  // namespace

FuzzReport run_fuzz(const FuzzOptions& opt, std::ostream* progress) {
  opt.cfg.validate();
  require(opt.cases >= 1, "cases", "must be >= 1, got ", opt.cases);
  require(opt.max_commands >= 1 && opt.max_commands <= 10000, "max-commands", "must be in [1, 10000], got ",
          opt.max_commands);
  require(opt.num_slots >= 1 && opt.num_slots <= 4096, "slots", "must be in [1, 4096], got ", opt.num_slots);
  require(opt.max_T >= 1 && opt.max_T <= 64, "max-T", "must be in [1, 64], got ", opt.max_T);
  require(opt.ring_record_dtype == DType::F32 || opt.ring_record_dtype == DType::BF16, "ring-dtype",
          "must be F32 or BF16");
  FuzzReport rep;
  rep.target = opt.target;
  rep.op = to_string(opt.cfg.op);
  // An unknown target is Error("target") before anything runs; a target whose capabilities exclude the
  // campaign is reported as not covered, never as passed. The probe stays: every case's configuration is drawn
  // from what it claims (envelope.hpp).
  const auto probe = ref::make_target(opt.target, opt.fault);
  {
    // The preset's dtypes, layout and forms are where the probe starts, not a requirement: a target that claims
    // other values is probed from the first variant it covers (the command line's fixed values kept).
    const ModelConfig base = claimed_variant(*probe, opt.cfg, opt.narrowing).value_or(opt.cfg);
    rep.not_covered = probe->unsupported(base, 1);
    rep.envelope = narrow(probe_envelope(*probe, base, opt.max_T), opt.narrowing);
    if (rep.not_covered.empty() && (rep.envelope.act_dtypes.empty() || rep.envelope.state_dtypes.empty() ||
                                    rep.envelope.layouts.empty() || rep.envelope.l2norms.empty() ||
                                    rep.envelope.round_beta.empty() ||
                                    (opt.cfg.op == Op::KDA && rep.envelope.kda_gates.empty())))
      rep.not_covered = "not supported by the target: a value the command line fixed";
    if (!rep.not_covered.empty() || !rep.envelope.covered()) {
      rep.covered = false;
      if (rep.not_covered.empty()) rep.not_covered = "not supported by the target: no window width";
      return rep;
    }
    if (!probe->implements_copy()) rep.not_covered = "copy (the target does not implement copy_slot)";
    if (opt.conv != ConvMix::Off && !probe->conv_state())
      rep.not_covered += std::string(rep.not_covered.empty() ? "" : "; ") + "conv (the target keeps no conv windows)";
    if (!probe->captures())
      rep.not_covered += (rep.not_covered.empty() ? "" : "; ") +
                         std::string("capture while live (the target does not claim the capture capability)");
    if (!probe->graph_replay() || !probe->captures() || !probe->graph_padding())
      rep.not_covered += (rep.not_covered.empty() ? "" : "; ") +
                         std::string("captured graphs replayed (the target does not claim graph_replay, with capture and "
                                     "graph_padding)");
  }
  if (opt.fault != ref::Fault::None) {
    const auto ts = ref::fault_targets(opt.fault);
    std::string list;
    for (const auto& t : ts) list += (list.empty() ? "" : ", ") + t;
    require(std::find(ts.begin(), ts.end(), opt.target) != ts.end(), "fault",
            "fault '", ref::to_string(opt.fault), "' exists only in target(s) ", list, ", not in '", opt.target, "'");
    require(!ref::conv_fault(opt.fault) || opt.conv != ConvMix::Off, "conv", "fault '", ref::to_string(opt.fault),
            "' lives in the conv component: run it with --conv mix or --conv on");
    if (const auto recon = ref::fault_reconstruction(opt.fault))
      require(opt.recon == *recon, "recon", "fault '", ref::to_string(opt.fault), "' lives in the ",
              ref::to_string(*recon), " reconstruction: run it with --recon ", ref::to_string(*recon));
  }
  std::vector<ref::Cmd> last_seq;
  std::string last_reason, last_call;
  std::optional<ref::Check> last_check;
  ref::EngineSetup last_setup;
  int case_no = 0;
  CampaignRun run(opt.control, opt.target, progress);
  if (opt.cases >= kFullDepthCases && opt.max_commands >= kFullDepthCommands)
    rep.coverage.full_depth.insert(to_string(opt.cfg.op));
  const auto t0 = std::chrono::steady_clock::now();
  auto prop = [&] {
    // The case's configuration follows from its seed, which is not shrunk: shrinking keeps the configuration.
    const std::uint64_t case_seed = *rc::gen::noShrink(rc::gen::arbitrary<std::uint64_t>());
    // A case the budgets or a signal leave out is not run (and counted as nothing).
    if (!run.begin_case(case_seed, opt.seed)) return;
    const auto setup = setup_for(opt, rep.envelope, *probe, case_seed);
    ++case_no;
    LifecycleJudging judging;
    judging.failed_setup = &last_setup;  // the setup the case ran with (its PAD convention drawn per case)
    judging.failed_check = &last_check;
    judging.failed_call = &last_call;
    ref::JudgedWork work;
    ref::EngineSetup ran;
    judging.work = &work;
    judging.ran_setup = &ran;
    judging.self_checks = opt.self_checks;
    try {
      check_lifecycle(setup, opt.target, opt.fault, &last_seq, &last_reason, judging);
    } catch (const rc::detail::CaseResult& r) {
      if (r.type != rc::detail::CaseResult::Type::Discard) {
        if (!run.shrinking()) rep.coverage.add_case(ran, work);
        run.end_case(true, last_seq.size());
      } else {
        run.end_case(false, 0, true);
      }
      throw;
    } catch (...) {
      if (!run.shrinking()) rep.coverage.add_case(ran, work);
      run.end_case(true, last_seq.size());
      throw;
    }
    if (!run.shrinking()) rep.coverage.add_case(ran, work);
    run.end_case(false, 0);
    if (progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *progress << "\r[fuzz " << opt.target << "] run " << case_no << " (" << s << " s)" << std::flush;
    }
  };
  const PropertyOutcome r =
      run_property(prop, "fuzz/" + opt.target, opt.seed, opt.cases, opt.max_commands, opt.control.no_shrink);
  if (progress) *progress << "\n";
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Cases that ran: RapidCheck also counts the ones a budget or a signal left out as successes.
  rep.cases_passed = run.cases_run() - (r.kind == PropertyOutcome::Kind::Failed ? 1 : 0);
  rep.ended_by = run.ended_by();
  rep.shrink_steps = run.shrink_steps();
  if (r.kind == PropertyOutcome::Kind::Failed) {
    rep.failed = true;
    rep.reason = last_reason.empty() ? r.description : last_reason;
    rep.check = last_check ? ref::to_string(*last_check) : "";
    rep.call = last_call;
    rep.counterexample = r.counterexample;
    for (const auto& c : last_seq) rep.sequence.push_back(c.str());
    // The campaign is deterministic in (options, seed); the dump replays the shrunk case alone.
    rep.reproduce = "--seed " + std::to_string(opt.seed);
    rep.dump_path = failure_dump_path(opt.dump_dir, "", opt.target, opt.seed);
    dump(rep.dump_path, opt, last_setup, last_seq, rep.reason);
  } else if (r.kind == PropertyOutcome::Kind::CouldNotRun) {
    rep.failed = true;
    rep.reason = "fuzz campaign could not run: " + r.description;
  }
  rep.cases_per_second = rep.seconds > 0 ? (rep.cases_passed + (rep.failed ? 1 : 0)) / rep.seconds : 0;
  return rep;
}

DumpedCase load_dump(const std::string& path) { return read_fuzz_case(path); }

std::string replay_dump(const std::string& path, const std::string& target, std::string* notes) {
  const FuzzCase c = read_fuzz_case(path);  // every check before anything runs (fuzz_case.hpp)
  const std::string& recorded = c.target;
  std::string use = recorded;
  if (recorded.rfind("exec:", 0) == 0) {
    require(!target.empty(), "target", "this case was judged against ", recorded,
            "; a command is never taken from a file: give it again with --target exec:'...'");
  }
  if (!target.empty()) {
    use = target;
    if (notes && target != c.target) *notes = "recorded target '" + c.target + "', replaying against '" + target + "'";
  }
  return replay_sequence(c.setup, use, c.fault, c.commands);
}

}  // namespace replayssm::fuzz
