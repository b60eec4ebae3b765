// The lifecycle model's CUDA targets: the GPU kernels of optimized/ behind the reference's Target interface,
// so the same command sequences, judge and fault-free properties drive them.
//   "cuda"            — ReplaySSM: verify_replay (paged raw payload) + one all-layer commit_replay launch;
//   "cuda_full_state" — the GPU baseline: verify_full_state (T states to scratch) + commit_copy.
// Prefill chunks run through the same kernels with n = T, committed inside the step; a fresh prefill zeroes
// its slot first. Both targets need a CUDA device; register_cuda_targets() adds them to ref::make_target.
#pragma once

namespace replayssm::conformance {

// Registers "cuda" and "cuda_full_state"; returns the number of CUDA devices (0: the targets are
// registered but constructing one throws Error("device")).
int register_cuda_targets();

}  // namespace replayssm::conformance
