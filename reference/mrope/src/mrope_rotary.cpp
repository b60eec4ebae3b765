// MRoPE rotary application: frequency-to-axis maps, the double-precision path and the binary32 engine path.
#include <cmath>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope.hpp"

namespace replayssm::mrope {

Rotary Rotary::from(const Preset& preset) {
  preset.validate();
  Rotary r;
  r.head_dim = preset.head_dim;
  r.rotary_dim = preset.rotary_dim();
  r.theta = preset.theta;
  r.section = preset.section;
  r.layout = preset.layout;
  return r;
}

namespace {
void check_rotary(const Rotary& rot) {
  require(rot.rotary_dim >= 2 && rot.rotary_dim % 2 == 0 && rot.rotary_dim <= rot.head_dim, "rotary_dim",
          "must be even and in [2, head_dim = ", rot.head_dim, "], got ", rot.rotary_dim);
  require(rot.section[0] >= 0 && rot.section[1] >= 0 && rot.section[2] >= 0, "section", "must be >= 0");
  // Summed in 64 bits: three ints near INT_MAX overflowed (undefined behaviour) before the comparison.
  require(std::int64_t{rot.section[0]} + rot.section[1] + rot.section[2] == rot.rotary_dim / 2, "section",
          "must sum to rotary_dim / 2 = ", rot.rotary_dim / 2);
  require(std::isfinite(rot.theta) && rot.theta > 1.0, "theta", "must be finite and > 1");
}
}  // namespace

int frequency_axis(const Rotary& rot, int j) {
  const int half = rot.rotary_dim / 2;
  require(j >= 0 && j < half, "j", "frequency index must be in [0, ", half, "), got ", j);
  const int s0 = rot.section[0], s1 = rot.section[1], s2 = rot.section[2];
  if (rot.layout == Layout::Chunked) {
    if (j < s0) return kAxisT;
    if (j < s0 + s1) return kAxisH;
    return kAxisW;
  }
  if (j % 3 == 1 && j < 3 * s1) return kAxisH;
  if (j % 3 == 2 && j < 3 * s2) return kAxisW;
  return kAxisT;
}

std::vector<int> frequency_axes(const Rotary& rot) {
  check_rotary(rot);
  std::vector<int> out(static_cast<std::size_t>(rot.rotary_dim / 2));
  for (int j = 0; j < rot.rotary_dim / 2; ++j) out[static_cast<std::size_t>(j)] = frequency_axis(rot, j);
  return out;
}

double inv_freq(const Rotary& rot, int j) {
  return std::pow(rot.theta, -2.0 * static_cast<double>(j) / static_cast<double>(rot.rotary_dim));
}

void rotate_heads(const Rotary& rot, const Pos3& pos, std::int64_t heads, const float* in, float* out) {
  const int half = rot.rotary_dim / 2;
  std::vector<double> c(static_cast<std::size_t>(half)), s(static_cast<std::size_t>(half));
  for (int j = 0; j < half; ++j) {
    const double angle = static_cast<double>(pos[static_cast<std::size_t>(frequency_axis(rot, j))]) * inv_freq(rot, j);
    c[static_cast<std::size_t>(j)] = std::cos(angle);
    s[static_cast<std::size_t>(j)] = std::sin(angle);
  }
  for (std::int64_t hd = 0; hd < heads; ++hd) {
    const float* x = in + hd * rot.head_dim;
    float* y = out + hd * rot.head_dim;
    for (int j = 0; j < half; ++j) {
      const double a = x[j], b = x[j + half];
      const double cj = c[static_cast<std::size_t>(j)], sj = s[static_cast<std::size_t>(j)];
      y[j] = static_cast<float>(a * cj - b * sj);
      y[j + half] = static_cast<float>(b * cj + a * sj);
    }
    for (int d = rot.rotary_dim; d < rot.head_dim; ++d) y[d] = x[d];
  }
}

namespace {
void check_rotate_args(const Rotary& rot, const std::vector<Pos3>& pos, std::int64_t heads,
                       const std::vector<float>& x) {
  check_rotary(rot);
  require(heads >= 1, "heads", "must be >= 1, got ", heads);
  const auto want = static_cast<std::size_t>(pos.size()) * static_cast<std::size_t>(heads) *
                    static_cast<std::size_t>(rot.head_dim);
  require(x.size() == want, "x", "has ", x.size(), " values, expected N * heads * head_dim = ", pos.size(), " * ",
          heads, " * ", rot.head_dim);
}
}  // namespace

std::vector<float> rotate(const Rotary& rot, const std::vector<Pos3>& pos, std::int64_t heads,
                          const std::vector<float>& x) {
  check_rotate_args(rot, pos, heads, x);
  std::vector<float> out(x.size());
  const std::size_t stride = static_cast<std::size_t>(heads) * static_cast<std::size_t>(rot.head_dim);
  for (std::size_t n = 0; n < pos.size(); ++n) rotate_heads(rot, pos[n], heads, x.data() + n * stride, out.data() + n * stride);
  return out;
}

std::vector<float> rotate_f32_engine(const Rotary& rot, const std::vector<Pos3>& pos, std::int64_t heads,
                                     const std::vector<float>& x) {
  check_rotate_args(rot, pos, heads, x);
  const int half = rot.rotary_dim / 2;
  const float base = static_cast<float>(rot.theta);
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (int j = 0; j < half; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(rot.rotary_dim);
    inv[static_cast<std::size_t>(j)] = 1.0f / std::pow(base, e);
  }
  std::vector<float> out(x.size());
  const std::size_t stride = static_cast<std::size_t>(heads) * static_cast<std::size_t>(rot.head_dim);
  std::vector<float> c(static_cast<std::size_t>(half)), s(static_cast<std::size_t>(half));
  for (std::size_t n = 0; n < pos.size(); ++n) {
    for (int j = 0; j < half; ++j) {
      const float p = static_cast<float>(pos[n][static_cast<std::size_t>(frequency_axis(rot, j))]);
      const float angle = p * inv[static_cast<std::size_t>(j)];
      c[static_cast<std::size_t>(j)] = std::cos(angle);
      s[static_cast<std::size_t>(j)] = std::sin(angle);
    }
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      const float* xv = x.data() + n * stride + static_cast<std::size_t>(hd * rot.head_dim);
      float* y = out.data() + n * stride + static_cast<std::size_t>(hd * rot.head_dim);
      for (int j = 0; j < half; ++j) {
        const float a = xv[j], b = xv[j + half];
        const float cj = c[static_cast<std::size_t>(j)], sj = s[static_cast<std::size_t>(j)];
        y[j] = a * cj - b * sj;
        y[j + half] = b * cj + a * sj;
      }
      for (int d = rot.rotary_dim; d < rot.head_dim; ++d) y[d] = xv[d];
    }
  }
  return out;
}

}  // namespace replayssm::mrope
