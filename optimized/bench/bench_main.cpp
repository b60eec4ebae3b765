// replayssm_bench — the GPU kernel benchmark (replayssm/cuda/bench.hpp); the same code runs as
// `replayssm bench kernels`.
#include "replayssm/cuda/bench.hpp"

int main(int argc, char** argv) { return replayssm::cuda::bench_main(argc, argv); }
