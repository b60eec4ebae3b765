// Trace fixtures from the lifecycle generator (trace.hpp): `replayssm fixtures generate --traces` and
// `replayssm fuzz --export-trace`. Sequences come from the campaigns' own stateful generator
// (generate_commands), so a trace exercises what a campaign does; the recording oracle supplies the
// expectations (record_trace).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "campaign.hpp"
#include "replayssm/fixtures/trace.hpp"

namespace replayssm::fuzz {

struct TraceSetOptions {
  ModelConfig cfg;
  std::uint64_t seed = 20261129;
  int cases = 3;           // traces written
  int max_commands = 20;   // the generator's size: longest lifecycle sequence
  int num_slots = 3;
  int max_T = 4;
  ref::GateRange gates = ref::GateRange::Benign;  // the ranges of the gate inputs and parameters (inputs.hpp)
  bool out_of_place = false;  // a quarter of the verify rows commit into a free slot (a double buffer)
  ref::PadConvention pad_convention = ref::PadConvention::MinusOne;  // the slot PAD rows carry (trace 1.1 if not -1)
  bool graph_padding = false;  // half the steps run as captured batches with a stale or PAD tail (trace 1.1)
  bool captures = false;  // half the lifecycle steps are followed by a capture of a new CUDA-graph bucket (trace 1.2)
  ref::StepMix step_mix;  // what one step may mix (the setup's step_mix: traces a narrowed target can replay)
  std::string name = "trace";  // file names <cfg.name>__<name>__<i>: a hazard's set is named for its hazard
};

// Candidate j of a set: setup and sequence seeded by derive_seed(seed, j + 1).
ref::Trace make_set_trace(const TraceSetOptions& o, int j);
// Writes `cases` traces into dir (created if needed) as <cfg.name>__<name>__<i>.safetensors, each atomically and
// the same bytes for the same options. Candidates are looked at in order; until the set covers
// trace_coverage_goal() (with graph_padding, also both kinds of graph tail), only one that adds to its coverage is taken (up to 256 candidates), then any. Returns
// the paths.
std::vector<std::string> write_trace_set(const TraceSetOptions& o, const std::string& dir);

// The trace of a dumped failing case (the shrunk sequence, recorded from the oracle: it passes for a correct
// implementation and fails where the dumped target failed). Written atomically to path.
void export_trace(const DumpedCase& c, const std::string& path, const std::string& source);
// The trace's source text for a dump: its file name only, so the same dump exports the same bytes wherever it
// lies and whichever command exported it.
std::string trace_source_of_dump(const std::string& dump_path);

// What a trace exercises: its target commands ("allocate", "step", "commit", "copy_slot"), its lifecycle
// commands ("lifecycle.admit", ...) and the row cases ("prefill.fresh", "prefill.chunk", "verify.n=0",
// "verify.0<n<T", "verify.n=T", "verify.early_stop", "pad", "commit.kept", and on captured steps
// "graph.stale_tail" / "graph.pad_tail", which trace_coverage_goal does not ask for).
std::set<std::string> trace_coverage(const ref::Trace& t);
// Everything trace_coverage can report: the set a committed collection of traces must cover.
std::set<std::string> trace_coverage_goal();

}  // namespace replayssm::fuzz
