#include "replayssm/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm {

namespace {
// Shortest %g spelling that reads back as exactly the same double (so str() -> parse() is lossless).
std::string shortest(double x) {
  char buf[64];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}
}  // namespace

std::string Tolerance::str() const {
  const std::string per = scale ? " per term scale" : "";
  switch (kind) {
    case Kind::Exact: return "exact";
    case Kind::AllClose: return "allclose(atol=" + shortest(atol) + ",rtol=" + shortest(rtol) + ")" + per;
    case Kind::RelRms: return "rel_rms(" + shortest(ratio) + ")";
    case Kind::Budget: return "budget(rel_rms=" + shortest(ratio) + ",atol=" + shortest(atol) + ")" + per;
  }
  return "exact";
}

Tolerance Tolerance::scaled(std::vector<double> term_scale) const {
  Tolerance t = *this;
  t.scale = std::make_shared<const std::vector<double>>(std::move(term_scale));
  return t;
}

Tolerance Tolerance::parse(const std::string& text, const std::string& field) {
  if (text == "exact") return exact();
  // Scanned by hand: std::regex matching recursed once per character and overflowed the stack on a
  // tolerance of ~30 KB (a hostile fixture's metadata; docs/fuzzing.md). Each number is the longest run of
  // [0-9.eE+-] (what the former patterns matched: the character after it, ',' or ')', is not in the set).
  std::string_view rest(text);
  auto take = [&](std::string_view lit) {
    if (rest.substr(0, lit.size()) != lit) return false;
    rest.remove_prefix(lit.size());
    return true;
  };
  // The whole number must be consumed: "1e-5e3" is not a number.
  auto num = [&](double& v) {
    const std::size_t n = std::min(rest.find_first_not_of("0123456789.eE+-"), rest.size());
    if (n == 0) return false;
    const std::string x(rest.substr(0, n));
    rest.remove_prefix(n);
    std::size_t used = 0;
    try {
      v = std::stod(x, &used);
    } catch (const std::logic_error&) {
      return false;  // std::stod failures: the error below
    }
    require(used == x.size(), field, "malformed number '", x, "' in '", text, "'");
    return true;
  };
  double a = 0, b = 0;
  if (take("allclose(atol=") && num(a) && take(",rtol=") && num(b) && take(")") && rest.empty()) {
    require(a >= 0 && b >= 0, field, "negative tolerance in '", text, "'");
    return allclose(a, b);
  }
  rest = text;
  if (take("budget(rel_rms=") && num(a) && take(",atol=") && num(b) && take(")") && rest.empty()) {
    require(a >= 0 && b >= 0, field, "negative tolerance in '", text, "'");
    return budget(a, b);
  }
  rest = text;
  if (take("rel_rms(") && num(a) && take(")") && rest.empty()) {
    require(a >= 0, field, "negative tolerance in '", text, "'");
    return rel_rms(a);
  }
  fail(field, "cannot parse tolerance '", text,
       "' (expected exact, allclose(atol=A,rtol=R), rel_rms(Q) or budget(rel_rms=Q,atol=A))");
}

namespace {
bool same_bits(double a, double b) {
  std::uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y;
}
std::string fmt(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}
}  // namespace

CompareReport compare(const std::vector<double>& ref, const std::vector<double>& got, const Tolerance& tol) {
  CompareReport r;
  if (ref.size() != got.size()) {
    r.ok = false;
    r.message = "FAIL length mismatch: ref has " + std::to_string(ref.size()) + " elements, got has " +
                std::to_string(got.size());
    return r;
  }
  r.count = ref.size();
  const std::vector<double>* scale = tol.scale.get();
  if (scale && scale->size() != ref.size()) {
    r.ok = false;
    r.message = "FAIL the term scale has " + std::to_string(scale->size()) + " elements, the tensors " +
                std::to_string(ref.size());
    return r;
  }
  // A zero term scale: the exact value is 0; the smallest normal binary32 number keeps a flushed subnormal in.
  constexpr double kZeroScaleBound = 0x1p-126;
  double sum_d2 = 0.0, sum_r2 = 0.0, sum_s2 = 0.0;
  double worst_score = -1.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double a = ref[i], b = got[i];
    bool bad = false;
    double score = 0.0;  // larger = worse
    if (!std::isfinite(a) || !std::isfinite(b)) {
      // Non-finite values: identical bits always agree; for tolerance kinds any NaN matches any NaN.
      bad = !(same_bits(a, b) || (tol.kind != Tolerance::Kind::Exact && std::isnan(a) && std::isnan(b)));
      score = bad ? HUGE_VAL : 0.0;
    } else {
      const double d = std::fabs(a - b);
      sum_d2 += d * d;
      sum_r2 += a * a;
      if (d > r.max_abs) r.max_abs = d;
      switch (tol.kind) {
        case Tolerance::Kind::Exact:
          bad = !same_bits(a, b);
          score = bad ? (d > 0 ? d : 1e-300) : 0.0;
          break;
        case Tolerance::Kind::AllClose:
        case Tolerance::Kind::Budget: {
          const double s = scale ? (*scale)[i] : 1.0;
          if (scale) sum_s2 += s * s;
          const double bound = scale ? std::max(tol.atol * s + tol.rtol * std::fabs(a), kZeroScaleBound)
                                     : tol.atol + tol.rtol * std::fabs(a);
          score = bound > 0 ? d / bound : (d > 0 ? HUGE_VAL : 0.0);
          bad = d > bound;
          if (score > r.worst_excess) r.worst_excess = score;
          break;
        }
        case Tolerance::Kind::RelRms: score = d; break;
      }
    }
    if (bad) ++r.mismatches;
    if (score > worst_score) {
      worst_score = score;
      r.worst_index = i;
      r.worst_ref = a;
      r.worst_got = b;
    }
  }
  r.rel_rms = sum_r2 > 0 ? std::sqrt(sum_d2 / sum_r2) : (sum_d2 > 0 ? HUGE_VAL : 0.0);
  r.ok = r.mismatches == 0;
  if (tol.kind == Tolerance::Kind::RelRms && !(r.rel_rms <= tol.ratio)) r.ok = false;
  if (tol.kind == Tolerance::Kind::Budget && r.count > 0) {
    const double n = static_cast<double>(r.count);
    // Scaled: the RMS of the term scales is what rounding errors are relative to; else max(1, RMS(ref)).
    const double rms_scale = scale ? std::max(std::sqrt(sum_s2 / n), kZeroScaleBound) : std::max(1.0, std::sqrt(sum_r2 / n));
    if (!(std::sqrt(sum_d2 / n) <= tol.ratio * rms_scale)) r.ok = false;
  }
  std::ostringstream os;
  os << (r.ok ? "ok" : "FAIL") << " [" << tol.str() << "] n=" << r.count << " mismatches=" << r.mismatches
     << " max_abs=" << fmt(r.max_abs) << " rel_rms=" << fmt(r.rel_rms);
  if (tol.kind == Tolerance::Kind::AllClose || tol.kind == Tolerance::Kind::Budget)
    os << " worst_excess=" << fmt(r.worst_excess);
  if (r.count) os << " worst@" << r.worst_index << " ref=" << fmt(r.worst_ref) << " got=" << fmt(r.worst_got);
  if (r.count && scale) os << " term_scale=" << fmt((*scale)[r.worst_index]);
  r.message = os.str();
  return r;
}

CompareReport compare(const std::vector<float>& ref, const std::vector<float>& got, const Tolerance& tol) {
  return compare(std::vector<double>(ref.begin(), ref.end()), std::vector<double>(got.begin(), got.end()), tol);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace replayssm
