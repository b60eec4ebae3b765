// The engine-level implementation of a process ("exec:COMMAND" at --level engine): the RequestEngine
// interface (reference/engine_level/request_engine.hpp) spoken over the engine protocol
// (docs/target-protocol.md, "Engine level": protocol "replayssm.engine", version 0.2) to `/bin/sh -c COMMAND`,
// on the frames of the target protocol. Prefix snapshots (`snapshot_hit`, the `snapshot` query, setup option
// `block`) and `migrate` are sent only to an engine whose hello claims `prefix_snapshots` / `migrates` (0.2); an
// engine answering 0.1 keeps working without them and may not claim them. One process per judged case; every failure (exit, crash, timeout,
// malformed frame, a tensor of the wrong shape or dtype, an error answer) is an Error naming the command and
// field ("engine.step.o.0"), with the process status and the tail of its stderr.
#pragma once

#include <memory>
#include <string>

#include "replayssm/engine_level/request_engine.hpp"

namespace replayssm::exec {

inline constexpr const char* kEngineProtocolName = "replayssm.engine";
inline constexpr int kEngineProtocolMajor = 0, kEngineProtocolMinor = 2;

std::unique_ptr<ref::engine_level::RequestEngine> make_engine_exec(const std::string& command);
// Makes ref::engine_level::make_request_engine accept "exec:COMMAND". Returns true.
bool register_engine_exec();

}  // namespace replayssm::exec
