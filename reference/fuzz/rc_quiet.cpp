#include "rc_quiet.hpp"

#include <rapidcheck/detail/Configuration.h>

#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

namespace replayssm::fuzz {

namespace {

// Forwards whole lines to `out`, except those starting with one of `drop` (a line is judged once it is complete).
class LineFilter : public std::streambuf {
 public:
  LineFilter(std::streambuf* out, std::vector<std::string> drop) : out_(out), drop_(std::move(drop)) {}

 protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    line_.push_back(traits_type::to_char_type(ch));
    if (line_.back() == '\n' || line_.back() == '\r') emit();  // '\r': a progress line rewritten in place
    return ch;
  }
  // std::cerr is unit-buffered: it syncs after every insertion, mid-line, so a partial line waits for its end.
  int sync() override { return out_->pubsync(); }

 public:
  // Forwards whatever is left (a last line without its newline), unless it is to be dropped.
  void emit() {
    bool keep = true;
    for (const auto& d : drop_) keep = keep && line_.rfind(d, 0) != 0;
    if (keep) out_->sputn(line_.data(), static_cast<std::streamsize>(line_.size()));
    line_.clear();
  }

 private:
  std::streambuf* out_;
  std::vector<std::string> drop_;
  std::string line_;
};

}  // namespace

void load_rapidcheck_configuration_quietly() {
  // Static: RapidCheck exits the process on a malformed RC_PARAMS while the filter is installed, and stream
  // cleanup at exit still flushes through it.
  static LineFilter filter(std::cerr.rdbuf(), {"Using configuration:"});
  std::streambuf* const original = std::cerr.rdbuf(&filter);
  (void)rc::detail::configuration();
  filter.emit();
  std::cerr.flush();
  std::cerr.rdbuf(original);
}

void drop_rapidcheck_reproduce_lines() {
  // Never destroyed: RapidCheck prints the lines at static destruction, and std::cerr is flushed after that.
  static auto* filter = new LineFilter(std::cerr.rdbuf(), {"Some of your RapidCheck properties had failures",
                                                           "RC_PARAMS=\"reproduce="});
  std::cerr.rdbuf(filter);
  std::cerr.setf(std::ios_base::unitbuf);
}

}  // namespace replayssm::fuzz
