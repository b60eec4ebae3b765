// record_trace: a lifecycle command sequence through the Engine over the recording oracle.
#include <map>

#include "replayssm/reference/engine.hpp"
#include "replayssm/reference/recording_target.hpp"

namespace replayssm::ref {

Trace record_trace(const EngineSetup& setup, const std::vector<Cmd>& cmds, std::uint64_t seed,
                   const std::string& source) {
  auto owned = std::make_unique<RecordingTarget>(make_target("full_state"));
  RecordingTarget* rec = owned.get();
  Engine engine(std::move(owned), setup);
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    const std::size_t first = rec->commands().size();
    rec->begin_lifecycle(static_cast<std::int32_t>(i));
    engine.execute(cmds[i]);
    // The rows of this command's step and commit: request ids in batch order (the engine's packing) and the
    // early-stop positions the lifecycle command gave them.
    std::map<std::int32_t, std::int32_t> stop;
    for (const auto& r : cmds[i].rows) stop[r.req] = r.stop_at;
    for (std::size_t c = first; c < rec->commands().size(); ++c) {
      TraceCommand& tc = rec->commands()[c];
      if (tc.op != TraceCommand::Op::Step && tc.op != TraceCommand::Op::Commit) continue;
      const auto& packed = engine.last_rows();
      for (std::size_t r = 0; r < tc.rows.size() && r < packed.size(); ++r) {
        tc.notes[r].request = packed[r].req;
        if (packed[r].req >= 0 && tc.rows[r].kind == RowKind::Verify) tc.notes[r].stop_at = stop[packed[r].req];
      }
    }
    std::set<std::int32_t> resident;
    for (const auto& [id, r] : engine.requests())
      if (r.slot != kPadSlot) resident.insert(r.slot);
    rec->retain(resident);
  }
  Trace t;
  t.setup = setup;
  t.lifecycle = cmds;
  t.commands = rec->finish();
  t.seed = seed;
  t.source = source;
  return t;
}

}  // namespace replayssm::ref
