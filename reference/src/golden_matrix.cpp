// Golden matrices: sets of golden cases whose shapes follow public kernel test suites, so an engine that
// runs those suites can run the same shapes against the reference's expected values.
#include <algorithm>
#include <filesystem>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/reference/golden.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

namespace {

// A shape as the public suites list it: batch, tokens, q/k heads, value heads, head dim (K = V = D).
struct PublicShape {
  int B, T, H, HV, D;
};

nlohmann::json shape_json(const std::string& suite, const PublicShape& s) {
  return nlohmann::json{{"suite", suite}, {"B", s.B}, {"T", s.T}, {"H", s.H}, {"HV", s.HV}, {"D", s.D}};
}

ModelConfig model(const std::string& name, Op op, int H, int HV, int K, int V, DType act, DType state,
                  StateLayout layout) {
  ModelConfig c = model_config(name, op, H, HV, K, V);
  c.act_dtype = act;
  c.state_dtype = state;
  c.layout = layout;
  c.validate();
  return c;
}

// Concatenates anything streamable (names are built this way rather than with string + string chains).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

std::string dims(int H, int HV, int K, int V) {
  return K == V ? cat("H", H, "_HV", HV, "_K", K) : cat("H", H, "_HV", HV, "_K", K, "_V", V);
}

// Bytes the pool of one batched case may take (input and expected pool together). Rows beyond it are cut:
// the batch dimension only repeats the per-row work, the head and dimension combination is what matters.
constexpr std::int64_t kPoolBudget = 600 * 1024;

class Builder {
 public:
  explicit Builder(std::uint64_t seed) : seed_(seed) {}

  void add(const std::string& op, const ModelConfig& c, nlohmann::json args, const std::string& name,
           const GoldenFill& fill) {
    cases_.push_back(make_golden_case(op, c, args, name, derive_seed(seed_, cases_.size() + 1), fill));
  }

  // The shapes (B, T, H, HV, D) of FLA tests/ops/test_gdn.py (GDN) or test_kda.py (KDA) ::test_fused_recurrent,
  // in order. Sequences of up to 64 tokens are kept whole, longer ones are cut to `max_T`.
  void fused_recurrent_suite(Op op, const std::vector<PublicShape>& shapes, int max_T) {
    const bool gdn = op == Op::GDN;
    for (const PublicShape& s : shapes)
      recurrent_shape(gdn ? "fla/test_gdn/test_fused_recurrent" : "fla/test_kda/test_fused_recurrent",
                      gdn ? "fla-gdn" : "fla-kda", op, s, s.T <= 64 ? s.T : std::min(s.T, max_T));
  }

  std::vector<GoldenCase> take() { return std::move(cases_); }

 private:
  // A recurrent-kernel shape (B, T, H, HV, D) of a public suite, run for T tokens. With B > 1 the rows run as
  // one mtp_batch step that accepts every token (each row: its own initial state, final state written to its
  // slot) over a pool with one slot more than the batch; B is cut to the pool budget, and a single row is a
  // plain recurrent case.
  void recurrent_shape(const std::string& suite, const std::string& prefix, Op op, const PublicShape& s, int T) {
    const ModelConfig c = model(prefix, op, s.H, s.HV, s.D, s.D, DType::F32, DType::F32, StateLayout::KV);
    const std::int64_t slot_bytes = c.state_elems() * 4 * 2;
    const int B = static_cast<int>(std::clamp<std::int64_t>(kPoolBudget / slot_bytes - 1, 1, s.B));
    nlohmann::json args{{"public_shape", shape_json(suite, s)}};
    const std::string tag = cat("B", B, "_T", T, "_", dims(s.H, s.HV, s.D, s.D));
    if (B == 1) {
      add("recurrent", c, args, cat(prefix, "__recurrent__", tag), sequence_fill(T));
      return;
    }
    std::vector<std::int32_t> slot(static_cast<std::size_t>(B)), acc(static_cast<std::size_t>(B), T);
    for (int r = 0; r < B; ++r) slot[static_cast<std::size_t>(r)] = B - r;  // reversed; slot 0 stays untouched
    add("mtp_batch", c, args, cat(prefix, "__mtp_batch__", tag), batch_fill(T, B + 1, slot, acc));
  }

  std::uint64_t seed_;
  std::vector<GoldenCase> cases_;
};

std::vector<GoldenCase> public_matrix(std::uint64_t seed) {
  Builder b(seed);
  constexpr int kMaxT = 17;  // not a multiple of 16: a chunked implementation sees a ragged tail

  // FLA tests/ops/test_gdn.py::test_fused_recurrent. Its (2, 1000, 2, 8, 128) is left out to keep the committed
  // files small: GVA 4 at D = 128 with 8 value heads is in the KDA list below.
  b.fused_recurrent_suite(Op::GDN,
                          {{1, 63, 1, 1, 64}, {2, 500, 4, 4, 60}, {3, 1024, 2, 2, 128}, {4, 1024, 3, 3, 128},
                           {4, 2048, 4, 4, 64}, {2, 1024, 4, 4, 128}, {2, 1024, 4, 8, 128}},
                          kMaxT);
  // FLA tests/ops/test_kda.py::test_fused_recurrent.
  b.fused_recurrent_suite(Op::KDA,
                          {{1, 64, 1, 1, 64}, {2, 512, 3, 3, 60}, {3, 1000, 4, 4, 100}, {4, 1024, 4, 4, 128},
                           {2, 512, 2, 4, 60}, {2, 1024, 2, 8, 128}},
                          kMaxT);

  // FLA test_chunk / test_chunk_with_chunk_size: D in {60, 64, 100, 128} (60 and 100 exercise masking),
  // GVA up to 4, T = 75 (the shortest length the chunk tests use: one full chunk of 64 and a ragged one),
  // chunk sizes 16 / 32 / 64.
  struct ChunkShape {
    Op op;
    int H, HV, D, T, C;
  };
  for (const ChunkShape& s : std::vector<ChunkShape>{{Op::GDN, 2, 2, 60, 75, 64},
                                                     {Op::GDN, 1, 4, 64, 75, 32},
                                                     {Op::GDN, 2, 4, 100, 75, 64},
                                                     {Op::GDN, 1, 2, 128, 75, 16},
                                                     {Op::KDA, 1, 2, 60, 75, 64},
                                                     {Op::KDA, 1, 2, 100, 75, 32}}) {
    const std::string prefix = s.op == Op::GDN ? "fla-gdn" : "fla-kda";
    const std::string suite = s.op == Op::GDN ? "fla/test_gdn/test_chunk" : "fla/test_kda/test_chunk";
    const ModelConfig c = model(prefix, s.op, s.H, s.HV, s.D, s.D, DType::F32, DType::F32, StateLayout::KV);
    b.add("chunked", c, {{"chunk", s.C}, {"public_shape", shape_json(suite, {1, s.T, s.H, s.HV, s.D})}},
          cat(prefix, "__chunked__T", s.T, "_C", s.C, "_", dims(s.H, s.HV, s.D, s.D)),
          sequence_fill(s.T));
  }
  {  // FLA test_kda gate-in-kernel with safe_gate: the lower-bound sigmoid gate (lower_bound -5).
    ModelConfig c = model("fla-kda-safe-gate", Op::KDA, 2, 4, 64, 64, DType::F32, DType::F32, StateLayout::KV);
    c.kda_gate = KdaGate::LowerBoundSigmoid;
    b.add("recurrent", c, {{"public_shape", shape_json("fla/test_kda/test_fused_recurrent_gate_in_kernel",
                                                       {1, 64, 2, 4, 64})}},
          cat("fla-kda-safe-gate__recurrent__T17_", dims(2, 4, 64, 64)), sequence_fill(17));
  }

  // FlashInfer tests/gdn/test_decode_delta_rule.py::test_verify_kernel_mtp: T in {2, 4, 8}, B in {1, 4, 8, 16},
  // bf16 inputs, [pool, HV, V, K] state (K-last), pool larger than the batch; heads scaled down from
  // (16, 16, 32) keeping the value/key head ratio 2. Rows read permuted slots, one row is PAD (-1) from B = 4
  // on, accepted lengths cover 0, partial and full.
  struct MtpShape {
    int B, T, D;
    DType state;
  };
  for (const MtpShape& s : std::vector<MtpShape>{{1, 2, 128, DType::F32},
                                                 {4, 4, 64, DType::BF16},
                                                 {8, 8, 64, DType::F32},
                                                 {16, 4, 64, DType::BF16},
                                                 {16, 8, 64, DType::BF16}}) {
    const int slots = s.B + (s.B >= 4 ? 2 : 1);
    std::vector<std::int32_t> slot, acc;
    for (int r = 0; r < s.B; ++r) {
      slot.push_back(r == 1 && s.B >= 4 ? -1 : static_cast<std::int32_t>((r * 7 + 3) % slots));
      acc.push_back(static_cast<std::int32_t>((r * 3 + s.T) % (s.T + 1)));  // row 0 accepts all
    }
    for (int r = 0; r < s.B; ++r)  // (r * 7 + 3) mod slots is injective when 7 and slots are coprime
      for (int q = 0; q < r; ++q)
        require(slot[static_cast<std::size_t>(r)] < 0 || slot[static_cast<std::size_t>(q)] != slot[static_cast<std::size_t>(r)],
                "matrix", "slot collision in the MTP pattern");
    const ModelConfig c = model("flashinfer-mtp", Op::GDN, 1, 2, s.D, s.D, DType::BF16, s.state, StateLayout::VK);
    b.add("mtp_batch", c,
          {{"public_shape", {{"suite", "flashinfer/tests/gdn/test_verify_kernel_mtp"}, {"B", s.B}, {"T", s.T},
                             {"pool", slots}, {"H", 16}, {"HV", 32}, {"D", 128}}}},
          cat("flashinfer-mtp__mtp_batch__B", s.B, "_T", s.T, "_pool", slots, "_", dims(1, 2, s.D, s.D),
              s.state == DType::BF16 ? "_bf16state" : ""),
          batch_fill(s.T, slots, slot, acc));
  }

  // GVA ratios 1, 2, 3, 4, 8 with K != V (both K < V and K > V), recurrent and chunked, GDN and KDA.
  for (int G : {1, 2, 3, 4, 8}) {
    const int H = G == 8 ? 1 : 2;
    const ModelConfig kv = model("gva-ratio", Op::GDN, H, H * G, 16, 24, DType::BF16, DType::F32, StateLayout::VK);
    b.add("recurrent", kv, {{"public_shape", {{"suite", "gva-ratio"}, {"G", G}}}},
          cat("gva-ratio__recurrent__G", G, "_T20_", dims(H, H * G, 16, 24)), sequence_fill(20));
    const ModelConfig vk = model("gva-ratio", Op::GDN, H, H * G, 24, 16, DType::F32, DType::F32, StateLayout::KV);
    b.add("chunked", vk, {{"chunk", 16}, {"public_shape", {{"suite", "gva-ratio"}, {"G", G}}}},
          cat("gva-ratio__chunked__G", G, "_T37_C16_", dims(H, H * G, 24, 16)), sequence_fill(37));
  }
  for (int G : {2, 4}) {
    const ModelConfig c = model("gva-ratio-kda", Op::KDA, 2, 2 * G, 24, 16, DType::F32, DType::F32, StateLayout::VK);
    b.add("recurrent", c, {{"public_shape", {{"suite", "gva-ratio"}, {"G", G}}}},
          cat("gva-ratio-kda__recurrent__G", G, "_T20_", dims(2, 2 * G, 24, 16)), sequence_fill(20));
  }
  return b.take();
}

}  // namespace

std::vector<std::string> matrix_names() { return {"public"}; }

std::vector<GoldenCase> matrix_cases(const std::string& name, std::uint64_t seed) {
  if (name == "public") return public_matrix(seed);
  fail("matrix", "unknown golden matrix '", name, "' (known: public)");
}

std::vector<std::string> write_matrix_set(const std::string& name, std::uint64_t seed, const std::string& dir) {
  const auto cases = matrix_cases(name, seed);
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  for (const auto& g : cases) {
    const auto path = (std::filesystem::path(dir) / (g.name + ".safetensors")).string();
    save_fixture(path, to_fixture(g));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace replayssm::ref
