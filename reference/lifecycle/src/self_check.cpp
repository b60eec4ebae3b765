// Self checks (self_check.hpp): the kinds' names, the `self_check` claim's JSON form and the bound of one
// comparison between two paths of one implementation.
#include "replayssm/lifecycle/self_check.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"

namespace replayssm::ref {

namespace {
struct KindName {
  SelfCheckKind k;
  const char* name;
};
constexpr KindName kKinds[] = {{SelfCheckKind::VerifyVsSteps, "verify_vs_steps"},
                               {SelfCheckKind::Repeat, "repeat"},
                               {SelfCheckKind::Permute, "permute"},
                               {SelfCheckKind::Chunks, "chunks"}};

// One ulp of x's binade in a format with `mantissa` explicit bits (0 for x = 0).
double ulp(double x, int mantissa) {
  x = std::fabs(x);
  if (x == 0.0 || !std::isfinite(x)) return 0.0;
  return std::ldexp(1.0, std::ilogb(x) - mantissa);
}
int mantissa_bits(DType d) { return d == DType::BF16 ? 7 : 23; }

// Both paths within c * scale of the exact value: the tiers' worst-element constants (tier.hpp).
double path_constant(Tier t) { return t == Tier::Fp32 ? 2e-5 : 16.0 * unit_roundoff(t); }
}  // namespace

std::string to_string(SelfCheckKind k) {
  for (const auto& n : kKinds)
    if (n.k == k) return n.name;
  return "unknown";
}

SelfCheckKind parse_self_check_kind(const std::string& s, const std::string& field) {
  std::string known;
  for (const auto& n : kKinds) {
    if (s == n.name) return n.k;
    known += (known.empty() ? "" : ", ") + std::string(n.name);
  }
  fail(field, "unknown self check '", s, "' (known: ", known, ")");
}

std::vector<SelfCheckKind> all_self_check_kinds() {
  std::vector<SelfCheckKind> v;
  for (const auto& n : kKinds) v.push_back(n.k);
  return v;
}

nlohmann::json SelfClaim::to_json() const {
  auto names = nlohmann::json::array();
  for (auto k : exact) names.push_back(to_string(k));
  return {{"exact", names}, {"tier", to_string(tier)}};
}

SelfClaim SelfClaim::from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_object(), field, "must be an object with exact (check names) and tier, got ", j.type_name());
  SelfClaim c;
  for (const auto& [k, v] : j.items()) {
    const std::string f = field + "." + k;
    if (k == "tier") {
      require(v.is_string(), f, "must be a tier name (fp32, tf32, bf16)");
      c.tier = parse_tier(v.get<std::string>(), f);
    } else if (k == "exact") {
      require(v.is_array(), f, "must be an array of self check names");
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string ef = f + "[" + std::to_string(i) + "]";
        require(v[i].is_string(), ef, "must be a self check name");
        const auto kind = parse_self_check_kind(v[i].get<std::string>(), ef);
        require(c.exact.insert(kind).second, ef, "lists '", to_string(kind), "' twice");
      }
    } else {
      fail(f, "is not a self_check key (exact, tier)");
    }
  }
  return c;
}

std::string SelfClaim::str() const {
  std::string s = "exact: ";
  if (exact.empty()) s += "none";
  bool first = true;
  for (auto k : exact) {
    s += (first ? "" : ", ") + to_string(k);
    first = false;
  }
  return s + "; tier " + to_string(tier);
}

int extra_stores_every(SelfCheckKind kind, int chunk) {
  switch (kind) {
    case SelfCheckKind::VerifyVsSteps: return 1;
    case SelfCheckKind::Chunks: return chunk;
    default: return 0;
  }
}

std::vector<double> self_check_bound(const ModelConfig& cfg, int every, const SelfClaim& claim, const TermScales& ts,
                                     int n, bool state, const std::vector<float>& a, const std::vector<float>& b) {
  require(a.size() == b.size(), "self_check", "the two paths' tensors differ in length (", a.size(), " vs ", b.size(),
          ")");
  const double c2 = 2.0 * path_constant(claim.tier);
  const std::vector<double> zeros(static_cast<std::size_t>(cfg.HV), 0.0);
  // BF16 state: stores one path makes and the other does not (every > 0), carried by the update's contraction
  // (|alpha| <= 1, 0 <= beta <= 1, |k| = 1) with at most a column's 2-norm, sqrt(K) times its largest element.
  const bool bf16_state = cfg.state_dtype == DType::BF16;
  const double per_rounding = bf16_state && every > 0 ? std::ldexp(std::sqrt(cfg.K), -8) : 0.0;
  std::vector<double> bound;
  if (state) {
    const auto per_head = running_state_scales(ts, zeros, n);
    bound = state_element_scales(cfg, per_head);
    require(bound.size() == a.size(), "self_check", "a state of ", a.size(), " values, the config has ", bound.size());
    const int stores = every > 0 ? (n + every - 1) / every + 1 : 0;
    for (double& x : bound) x *= c2 + per_rounding * stores;
    for (std::size_t i = 0; i < bound.size(); ++i)
      bound[i] += ulp(std::max(std::fabs(a[i]), std::fabs(b[i])), mantissa_bits(cfg.state_dtype));
    return bound;
  }
  TermScales o = ts;
  add_state_error(o, zeros);
  bound = output_element_scales(cfg, o);
  require(bound.size() == a.size(), "self_check", "an output of ", a.size(), " values, the window has ", bound.size());
  const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
  for (int t = 0; t < ts.T; ++t) {
    const auto run = per_rounding > 0 ? running_state_scales(ts, zeros, t + 1) : zeros;
    for (int hv = 0; hv < cfg.HV; ++hv) {
      const std::size_t th = static_cast<std::size_t>(t) * cfg.HV + hv;
      const int read = every > 0 ? t / every : 0;  // stores path B made before token t's output
      const double carried = per_rounding * read * run[static_cast<std::size_t>(hv)] * ts.q_l1[th];
      for (int v = 0; v < cfg.V; ++v) {
        const std::size_t i = static_cast<std::size_t>(t) * per + static_cast<std::size_t>(hv) * cfg.V + v;
        bound[i] = c2 * bound[i] + carried + ulp(std::max(std::fabs(a[i]), std::fabs(b[i])), mantissa_bits(cfg.act_dtype));
      }
    }
  }
  return bound;
}

}  // namespace replayssm::ref
