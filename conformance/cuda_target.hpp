// The lifecycle model's CUDA targets: the GPU kernels of optimized/ behind the reference's Target interface,
// so the same command sequences, judge and fault-free properties drive them.
//   "cuda"            — ReplaySSM: verify_replay (paged raw payload) + one all-layer commit_replay launch;
//   "cuda_full_state" — the GPU baseline: verify_full_state (T states to scratch) + commit_copy;
//   "cuda_fused"      — the fused step: verify_fused commits the previous step's accepted prefix at the start
//                       of this step's verify; commits are deferred (cuda_fused_target.cpp, docs/lifecycle.md).
// Prefill chunks run through the same kernels with n = T, committed inside the step; a fresh prefill zeroes
// its slot first. Both targets need a CUDA device; register_cuda_targets() adds them to ref::make_target.
#pragma once

namespace replayssm::conformance {

// Registers "cuda", "cuda_full_state" and "cuda_fused"; returns the number of CUDA devices (0: the targets are
// registered but constructing one throws Error("device")).
int register_cuda_targets();
// Registers "cuda_fused" (called by register_cuda_targets).
void register_cuda_fused_target();

}  // namespace replayssm::conformance
