// The lifecycle target of an implementation in its own process ("exec:COMMAND"): the reference's Target
// interface spoken over the target protocol (docs/target-protocol.md) to `/bin/sh -c COMMAND`.
//
// One process serves every judged case of a campaign (setup resets it); a process that fails (exits,
// crashes, hangs past the per-command timeout, writes a malformed frame or a tensor of the wrong shape or
// dtype) is killed and the next case starts a fresh one. Every failure is an Error whose field names the
// command and the field ("target.step.o.1", "target.io", "target.hello.version", ...) and whose message
// carries the child's status and the tail of its stderr.
//
// The pieces: capabilities.hpp (the protocol's versions and what an implementation claims), connection.hpp (its
// process: hello, budgets, transport statistics, shutdown), this header (the lifecycle commands and `fixture`).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "capabilities.hpp"
#include "connection.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::exec {

// Runs one static fixture through the implementation behind COMMAND (the `fixture` command): sends the
// fixture's op, config and in.* / param.* tensors, and returns the answered out.* tensors, parsed strictly
// (parse_fixture_answer: the fixture's out.* names, dtypes and shapes exactly). Error("target.fixture[.<name>]")
// for a refusal, a failed process or a misfit answer; Error("target.fixture") when the implementation does not
// claim the fixture's op.
std::map<std::string, Tensor> run_fixture(const std::string& command, const Fixture& f);

// The target for "exec:COMMAND"; make_target("exec:...") calls this after register_exec_targets().
std::unique_ptr<ref::Target> make_exec_target(const std::string& command);
// Makes ref::make_target accept "exec:COMMAND". Returns true.
bool register_exec_targets();

}  // namespace replayssm::exec
