// The GPU kernel benchmark behind replayssm_bench and `replayssm bench kernels` (replayssm/cuda/bench.hpp):
// the ReplaySSM step (verify + payload capture + all-layer commit) against the full-state step (verify
// writing T states + commit copy), with bytes moved against a device-to-device copy measured in the same run.
//
// Method: every timed unit is a CUDA graph (the per-layer verify launches, or the one commit launch, or a
// whole step); 3 warm-up rounds, then `repeats` rounds timed with CUDA events, medians reported. Inputs,
// pools, payloads and scratch rotate over R disjoint sets so that the working set of consecutive launches
// is >= 4x the L2 size: L2 cannot serve a launch the data of the previous repeat.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "replayssm/cuda/bench.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cuda {

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("cuda.") + what, cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

// A strictly parsed integer (the whole string, base 10).
int parse_int(const std::string& s, const std::string& field) {
  std::size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  require(used == s.size() && !s.empty(), field, "expected an integer, got '", s, "'");
  return v;
}

std::vector<int> parse_list(const std::string& x, const std::string& field) {
  std::vector<int> v;
  std::size_t p = 0;
  while (p <= x.size()) {
    std::size_t q = x.find(',', p);
    if (q == std::string::npos) q = x.size();
    v.push_back(parse_int(x.substr(p, q - p), field));
    p = q + 1;
  }
  return v;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Graph {
  cudaGraphExec_t exec = nullptr;
  template <class F>
  void capture(cudaStream_t s, F&& f) {
    cudaGraph_t g;
    ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    f();
    ck(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
    ck(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    ck(cudaGraphDestroy(g), "cudaGraphDestroy");
  }
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

// Median time (us) of `launch` over repeats, timed with events on s.
struct Timer {
  cudaEvent_t a, b;
  Timer() {
    ck(cudaEventCreate(&a), "cudaEventCreate");
    ck(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  template <class F>
  double time_us(cudaStream_t s, F&& f) {
    ck(cudaEventRecord(a, s), "cudaEventRecord");
    f();
    ck(cudaEventRecord(b, s), "cudaEventRecord");
    ck(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return 1000.0 * ms;
  }
};

double copy_bandwidth(cudaStream_t s, int repeats) {
  const std::size_t bytes = std::size_t(2) << 30;
  DeviceBuffer x(bytes), y(bytes);
  fill_random(x.get(), static_cast<std::int64_t>(bytes / 4), DType::F32, 1, 1.f, s);
  Timer t;
  std::vector<double> v;
  for (int i = 0; i < repeats + 3; ++i) {
    const double us = t.time_us(s, [&] { ck(cudaMemcpyAsync(y.get(), x.get(), bytes, cudaMemcpyDeviceToDevice, s), "copy"); });
    if (i >= 3) v.push_back(us);
  }
  return 2.0 * bytes / (median(v) * 1e-6) / 1e9;  // GB/s, read + write
}

// fp32 FMA lane instructions per second (FFMA and FMUL issue at the same rate): 8 CTAs of 256 threads per SM,
// each thread 8 independent FFMA chains (fma_chains), median of `repeats` timed launches after 3 warm-ups.
double fma_rate(cudaStream_t s, int sms, int repeats) {
  const unsigned grid = static_cast<unsigned>(sms) * 8;
  const int iters = 4096;
  DeviceBuffer out(std::size_t{grid} * 256 * sizeof(float));
  Timer t;
  std::vector<double> v;
  for (int i = 0; i < repeats + 3; ++i) {
    const double us = t.time_us(s, [&] { fma_chains(out.as<float>(), grid, iters, s); });
    if (i >= 3) v.push_back(us);
  }
  return static_cast<double>(grid) * 256 * 128 * iters / (median(v) * 1e-6);
}

struct Row {
  int batch, T, n, R, scratch_sets;
  double copy_gbs;
  double ver_rep, com_rep, step_rep, ver_full, com_copy, step_full, step_fused;
  double b_ver_rep, b_com_rep, b_ver_full, b_com_copy, b_fused;
  double scratch_full, scratch_rep;
};

Row run_config(const ModelConfig& cfg, int batch, int T, int accept, int repeats, double copy_gbs, std::size_t l2,
               Schedule sched, cudaStream_t s) {
  const int L = cfg.num_layers;
  const std::int64_t head = static_cast<std::int64_t>(cfg.K) * cfg.V;
  const std::int64_t es = cfg.state_dtype == DType::BF16 ? 2 : 4, as = cfg.act_dtype == DType::BF16 ? 2 : 4;
  const std::int64_t req_state = cfg.HV * head * es;  // one request, one layer
  const int n = accept < 0 ? T : std::min(accept, T);
  // Rotation sets so that consecutive uses of one set are >= 4 L2 apart.
  int R = static_cast<int>(std::ceil(4.0 * static_cast<double>(l2) / (static_cast<double>(L) * batch * req_state)));
  R = std::max(1, std::min(R, 16));
  PoolGeometry pool{L, batch * R, 0};
  const PayloadGeometry pay = PayloadGeometry::sized(4, T, batch, R);
  const std::int64_t tokens = static_cast<std::int64_t>(batch) * T;
  const std::int64_t row_w = PayloadGeometry::row_width(cfg);

  // payloads2: the other buffer of the fused step's pair (it captures into one while it replays the other).
  std::vector<DeviceBuffer> pools, payloads, payloads2, outs, params, inputs;
  for (int l = 0; l < L; ++l) {
    pools.emplace_back(static_cast<std::size_t>(pool.num_slots * req_state));
    fill_random(pools.back().get(), pool.num_slots * cfg.state_elems(), cfg.state_dtype, 100 + l, 0.5f, s);
    payloads.emplace_back(static_cast<std::size_t>(payload_bytes(cfg, pay)));
    payloads2.emplace_back(static_cast<std::size_t>(payload_bytes(cfg, pay)));
    outs.emplace_back(static_cast<std::size_t>(tokens * cfg.HV * cfg.V * as));
    params.emplace_back(static_cast<std::size_t>(cfg.HV * (1 + cfg.a_width()) * 4));
    std::vector<float> p(static_cast<std::size_t>(cfg.HV * (1 + cfg.a_width())));
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = i < static_cast<std::size_t>(cfg.HV) ? 0.5f : -3.0f;
    params.back().upload(p.data(), p.size() * 4);
  }
  // Inputs per (rotation, layer): q, k, v, a, b packed in one buffer.
  const std::int64_t qk = tokens * cfg.H * cfg.K, vv = tokens * cfg.HV * cfg.V, aa = tokens * cfg.HV * cfg.a_width(),
                     bb = tokens * cfg.HV;
  const std::int64_t in_elems = 2 * qk + vv + aa + bb;
  for (int i = 0; i < R * L; ++i) {
    inputs.emplace_back(static_cast<std::size_t>(in_elems * as));
    fill_random(inputs.back().get(), in_elems, cfg.act_dtype, 1000 + i, 1.7f, s);
  }
  // Full-state scratch: one per (rotation, layer) when memory allows, else as many as fit (each >> L2).
  const std::int64_t scratch_layer = full_state_scratch_bytes(cfg, batch, T);
  std::size_t free_b = 0, total_b = 0;
  ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const std::int64_t budget = static_cast<std::int64_t>(static_cast<double>(free_b) * 0.85) - (std::int64_t(1) << 30);
  int nS = static_cast<int>(std::min<std::int64_t>(R * L, std::max<std::int64_t>(1, budget / scratch_layer)));
  std::vector<DeviceBuffer> scratch;
  for (int i = 0; i < nS; ++i) scratch.emplace_back(static_cast<std::size_t>(scratch_layer));

  std::vector<std::unique_ptr<DeviceBatch>> batches;
  for (int r = 0; r < R; ++r) {
    auto b = std::make_unique<DeviceBatch>(cfg, pool, pay, T, batch);
    b->set_schedule(sched);
    std::vector<BatchRow> rows(static_cast<std::size_t>(batch));
    std::vector<std::int32_t> pages;
    for (int i = 0; i < batch; ++i) {
      const int slot = r * batch + i;
      rows[static_cast<std::size_t>(i)] = BatchRow{slot, slot, T, i * T, n};
      for (int p = 0; p < pay.pages_per_row; ++p) pages.push_back(slot * pay.pages_per_row + p);
    }
    b->set_rows(rows, pages, tokens, s);
    std::vector<LayerPointers> lp(static_cast<std::size_t>(L));
    for (int l = 0; l < L; ++l) {
      lp[static_cast<std::size_t>(l)] = LayerPointers{pools[static_cast<std::size_t>(l)].get(),
                                                            payloads[static_cast<std::size_t>(l)].get(),
                                                            scratch[static_cast<std::size_t>((r * L + l) % nS)].get(),
                                                            params[static_cast<std::size_t>(l)].as<const float>(),
                                                            params[static_cast<std::size_t>(l)].as<const float>() + cfg.HV};
    }
    b->set_layers(lp, s);
    batches.push_back(std::move(b));
  }
  ck(cudaStreamSynchronize(s), "sync");

  auto token_inputs = [&](int r, int l) {
    const char* base = static_cast<const char*>(inputs[static_cast<std::size_t>(r * L + l)].get());
    return TokenInputs{base, base + qk * as, base + 2 * qk * as, base + (2 * qk + vv) * as,
                             base + (2 * qk + vv + aa) * as};
  };
  auto verify_all = [&](int r, bool replay) {
    const auto& b = *batches[static_cast<std::size_t>(r)];
    for (int l = 0; l < L; ++l) {
      const auto& lp = b.layers()[static_cast<std::size_t>(l)];
      if (replay)
        verify_replay(b, lp, token_inputs(r, l), outs[static_cast<std::size_t>(l)].get(), s);
      else
        verify_full_state(b, lp, token_inputs(r, l), outs[static_cast<std::size_t>(l)].get(), s);
    }
  };
  // The fused step in its steady state: each layer's launch commits the previous step's n records of every
  // row (in place: the rows keep their slots, so rotation set r is its own previous step) from `payloads`
  // and verifies this step's T tokens, capturing into `payloads2`.
  auto fused_all = [&](int r) {
    const auto& b = *batches[static_cast<std::size_t>(r)];
    for (int l = 0; l < L; ++l) {
      LayerPointers lp = b.layers()[static_cast<std::size_t>(l)];
      lp.payload = payloads2[static_cast<std::size_t>(l)].get();
      verify_fused(b, b, payloads[static_cast<std::size_t>(l)].get(), lp, token_inputs(r, l),
                   outs[static_cast<std::size_t>(l)].get(), s);
    }
  };
  // One eager pass first (kernel attributes and occupancy queries happen outside graph capture).
  fused_all(0);
  verify_all(0, true);
  commit_replay(*batches[0], s);
  verify_all(0, false);
  commit_copy(*batches[0], s);
  synchronize(s);
  std::vector<Graph> g_vr(static_cast<std::size_t>(R)), g_cr(static_cast<std::size_t>(R)),
      g_sr(static_cast<std::size_t>(R)), g_vf(static_cast<std::size_t>(R)), g_cc(static_cast<std::size_t>(R)),
      g_sf(static_cast<std::size_t>(R)), g_fu(static_cast<std::size_t>(R));
  for (int r = 0; r < R; ++r) {
    const auto& b = *batches[static_cast<std::size_t>(r)];
    const auto ri = static_cast<std::size_t>(r);
    g_vr[ri].capture(s, [&] { verify_all(r, true); });
    g_cr[ri].capture(s, [&] { commit_replay(b, s); });
    g_sr[ri].capture(s, [&] {
      verify_all(r, true);
      commit_replay(b, s);
    });
    g_vf[ri].capture(s, [&] { verify_all(r, false); });
    g_cc[ri].capture(s, [&] { commit_copy(b, s); });
    g_sf[ri].capture(s, [&] {
      verify_all(r, false);
      commit_copy(b, s);
    });
    g_fu[ri].capture(s, [&] { fused_all(r); });
  }
  Timer tm;
  std::vector<double> t_vr, t_cr, t_sr, t_vf, t_cc, t_sf, t_fu;
  int rot = 0;
  auto next = [&] { return static_cast<std::size_t>(rot++ % R); };
  for (int it = 0; it < repeats + 3; ++it) {
    const bool keep = it >= 3;
    auto run = [&](std::vector<Graph>& g, std::vector<double>& out) {
      const double us = tm.time_us(s, [&] { ck(cudaGraphLaunch(g[next()].exec, s), "cudaGraphLaunch"); });
      if (keep) out.push_back(us);
    };
    run(g_vf, t_vf);
    run(g_cc, t_cc);
    run(g_vr, t_vr);
    run(g_cr, t_cr);
    run(g_sf, t_sf);
    run(g_sr, t_sr);
    run(g_fu, t_fu);
  }
  synchronize(s);

  Row row{};
  row.batch = batch;
  row.T = T;
  row.n = n;
  row.R = R;
  row.scratch_sets = nS;
  row.copy_gbs = copy_gbs;
  row.ver_rep = median(t_vr);
  row.com_rep = median(t_cr);
  row.step_rep = median(t_sr);
  row.ver_full = median(t_vf);
  row.com_copy = median(t_cc);
  row.step_full = median(t_sf);
  row.step_fused = median(t_fu);
  const double state_all = static_cast<double>(L) * batch * req_state;
  const double in_bytes = static_cast<double>(L) * in_elems * as, o_bytes = static_cast<double>(L) * tokens * cfg.HV * cfg.V * as;
  const double pay_bytes = static_cast<double>(L) * tokens * row_w * as;
  row.b_ver_rep = state_all + in_bytes + o_bytes + pay_bytes;
  row.b_com_rep = 2 * state_all + static_cast<double>(L) * batch * n * row_w * as;
  row.b_ver_full = state_all * (1 + T) + in_bytes + o_bytes;
  row.b_com_copy = 2 * state_all;
  // fused: the state read and written once, the previous step's n payload rows, this step's inputs, outputs
  // and payload capture
  row.b_fused = 2 * state_all + static_cast<double>(L) * batch * n * row_w * as + in_bytes + o_bytes + pay_bytes;
  row.scratch_full = static_cast<double>(L) * scratch_layer;
  row.scratch_rep = static_cast<double>(L) * tokens * row_w * as;
  return row;
}

double pct(double bytes, double us, double gbs) { return 100.0 * bytes / (us * 1e-6) / 1e9 / gbs; }

Schedule parse_schedule(const std::string& v) {
  if (v == "auto") return Schedule::Auto;
  if (v == "per-tile") return Schedule::PerTile;
  if (v == "persistent") return Schedule::Persistent;
  fail("--schedule", "expected auto, per-tile or persistent, got '", v, "'");
}

void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  require(f != nullptr, path, "cannot be opened for writing");
  const bool ok = std::fputs(text.c_str(), f) >= 0;
  require(std::fclose(f) == 0 && ok, path, "could not be written");
}

}  // namespace

BenchOptions parse_bench_args(const std::vector<std::string>& args) {
  BenchOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&]() -> const std::string& {
      require(i + 1 < args.size(), a, "needs a value");
      return args[++i];
    };
    if (a == "--preset") o.preset = val();
    else if (a == "--batches") o.batches = parse_list(val(), a);
    else if (a == "--T") o.Ts = parse_list(val(), a);
    else if (a == "--repeats") o.repeats = parse_int(val(), a);
    else if (a == "--accept") {
      const std::string& v = val();
      o.accept = v == "all" ? -1 : parse_int(v, a);
    } else if (a == "--schedule") o.schedule = parse_schedule(val());
    else if (a == "--csv") o.csv = val();
    else if (a == "--md") o.md = val();
    else fail(a, "unknown argument");
  }
  return o;
}

int run_bench(const BenchOptions& o, std::FILE* out, std::FILE* log) {
  const ModelConfig cfg = preset(o.preset);
  check_supported(cfg);
  require(!o.batches.empty() && !o.Ts.empty(), "--batches/--T", "must not be empty");
  for (int b : o.batches) require(b >= 1, "--batches", "must be >= 1, got ", b);
  for (int T : o.Ts) require(T >= 1, "--T", "must be >= 1, got ", T);
  require(o.repeats >= 1, "--repeats", "must be >= 1, got ", o.repeats);
  require(o.accept >= -1, "--accept", "must be 'all' or >= 0, got ", o.accept);
  if (device_count() == 0) {
    std::fprintf(log, "no CUDA device (cudaGetDeviceCount failed or found none): the kernel benchmark needs a GPU\n");
    return 2;
  }
  const Schedule sched = o.schedule;
  const int accept = o.accept, repeats = o.repeats;
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t s;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{s};
  const double copy_gbs = copy_bandwidth(s, 20);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::fprintf(out, "# replayssm bench kernels: %s (%d SMs, L2 %d MB), %s UTC\n", prop.name, prop.multiProcessorCount,
               prop.l2CacheSize >> 20, date);
  std::fprintf(out,
               "# preset %s: %d layers, %s H=%d HV=%d K=%d V=%d, state %s, act %s, layout %s; accepted n = %s; "
               "schedule %s\n",
               cfg.name.c_str(), cfg.num_layers, to_string(cfg.op).c_str(), cfg.H, cfg.HV, cfg.K, cfg.V,
               std::string(dtype_name(cfg.state_dtype)).c_str(), std::string(dtype_name(cfg.act_dtype)).c_str(),
               to_string(cfg.layout).c_str(), accept < 0 ? "T" : std::to_string(accept).c_str(),
               to_string(sched).c_str());
  std::fprintf(out, "# device-to-device copy (2 GiB, read + write counted): %.0f GB/s; medians of %d repeats\n",
               copy_gbs, repeats);
  std::fprintf(out,
               "# fp32 FMA rate (8 independent FFMA chains per thread, %d CTAs of 256): %.2f T lane instructions/s\n",
               prop.multiProcessorCount * 8, fma_rate(s, prop.multiProcessorCount, 20) / 1e12);
  std::vector<Row> rows;
  for (int b : o.batches)
    for (int T : o.Ts) {
      rows.push_back(
          run_config(cfg, b, T, accept, repeats, copy_gbs, static_cast<std::size_t>(prop.l2CacheSize), sched, s));
      const Row& r = rows.back();
      std::fprintf(log, "batch %d T %d done (R=%d, scratch sets %d)\n", r.batch, r.T, r.R, r.scratch_sets);
    }
  std::string table;
  char line[1024];
  table += "| batch | T | n | verify replay us | commit replay us | ReplaySSM step us | verify full us | commit copy us "
           "| full-state step us | speedup | commit replay %copy | commit copy %copy | verify replay %copy | "
           "verify full %copy | scratch full MiB | payload MiB | fused step us | fused vs ReplaySSM step | fused %copy |\n";
  table += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::string csvs =
      "gpu,date,preset,batch,T,n,copy_GBps,verify_replay_us,commit_replay_us,step_replay_us,verify_full_us,"
      "commit_copy_us,step_full_us,speedup,commit_replay_pct_copy,commit_copy_pct_copy,verify_replay_pct_copy,"
      "verify_full_pct_copy,bytes_verify_replay,bytes_commit_replay,bytes_verify_full,bytes_commit_copy,"
      "scratch_full_bytes,payload_bytes,step_fused_us,fused_vs_replay,fused_pct_copy,bytes_fused\n";
  for (const Row& r : rows) {
    const double sp = r.step_full / r.step_rep;
    std::snprintf(line, sizeof line,
                  "| %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1f%% | %.1f%% | %.1f%% | "
                  "%.1f%% | %.0f | %.1f | %.1f | %.2fx | %.1f%% |\n",
                  r.batch, r.T, r.n, r.ver_rep, r.com_rep, r.step_rep, r.ver_full, r.com_copy, r.step_full, sp,
                  pct(r.b_com_rep, r.com_rep, r.copy_gbs), pct(r.b_com_copy, r.com_copy, r.copy_gbs),
                  pct(r.b_ver_rep, r.ver_rep, r.copy_gbs), pct(r.b_ver_full, r.ver_full, r.copy_gbs),
                  r.scratch_full / 1048576.0, r.scratch_rep / 1048576.0, r.step_fused, r.step_rep / r.step_fused,
                  pct(r.b_fused, r.step_fused, r.copy_gbs));
    table += line;
    std::snprintf(line, sizeof line,
                  "%s,%s,%s,%d,%d,%d,%.1f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.3f,%.2f,%.2f,%.2f,%.2f,%.0f,%.0f,%.0f,%.0f,"
                  "%.0f,%.0f,%.2f,%.3f,%.2f,%.0f\n",
                  prop.name, date, cfg.name.c_str(), r.batch, r.T, r.n, r.copy_gbs, r.ver_rep, r.com_rep, r.step_rep,
                  r.ver_full, r.com_copy, r.step_full, sp, pct(r.b_com_rep, r.com_rep, r.copy_gbs),
                  pct(r.b_com_copy, r.com_copy, r.copy_gbs), pct(r.b_ver_rep, r.ver_rep, r.copy_gbs),
                  pct(r.b_ver_full, r.ver_full, r.copy_gbs), r.b_ver_rep, r.b_com_rep, r.b_ver_full, r.b_com_copy,
                  r.scratch_full, r.scratch_rep, r.step_fused, r.step_rep / r.step_fused,
                  pct(r.b_fused, r.step_fused, r.copy_gbs), r.b_fused);
    csvs += line;
  }
  std::fputs(table.c_str(), out);
  std::fflush(out);
  if (!o.csv.empty()) write_file(o.csv, csvs);
  if (!o.md.empty()) {
    std::snprintf(line, sizeof line, ", copy %.0f GB/s\n\n", copy_gbs);
    write_file(o.md, std::string(prop.name) + ", " + date + line + table);
  }
  return 0;
}

int bench_main(int argc, char** argv) {
  try {
    return run_bench(parse_bench_args(std::vector<std::string>(argv + 1, argv + argc)), stdout, stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayssm_bench: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace replayssm::cuda
