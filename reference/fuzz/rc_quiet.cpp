#include "rc_quiet.hpp"

#include <rapidcheck/detail/Configuration.h>

#include <iostream>
#include <streambuf>
#include <string>

namespace replayssm::fuzz {

namespace {

// Forwards whole lines to `out`, except those starting with `drop` (a line is judged once it is complete).
class LineFilter : public std::streambuf {
 public:
  LineFilter(std::streambuf* out, std::string drop) : out_(out), drop_(std::move(drop)) {}

 protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    line_.push_back(traits_type::to_char_type(ch));
    if (line_.back() == '\n') emit();
    return ch;
  }
  // std::cerr is unit-buffered: it syncs after every insertion, mid-line, so a partial line waits for its end.
  int sync() override { return out_->pubsync(); }

 public:
  // Forwards whatever is left (a last line without its newline), unless it is to be dropped.
  void emit() {
    if (line_.rfind(drop_, 0) != 0) out_->sputn(line_.data(), static_cast<std::streamsize>(line_.size()));
    line_.clear();
  }

 private:
  std::streambuf* out_;
  std::string drop_;
  std::string line_;
};

}  // namespace

void load_rapidcheck_configuration_quietly() {
  // Static: RapidCheck exits the process on a malformed RC_PARAMS while the filter is installed, and stream
  // cleanup at exit still flushes through it.
  static LineFilter filter(std::cerr.rdbuf(), "Using configuration:");
  std::streambuf* const original = std::cerr.rdbuf(&filter);
  (void)rc::detail::configuration();
  filter.emit();
  std::cerr.flush();
  std::cerr.rdbuf(original);
}

}  // namespace replayssm::fuzz
