// write_file_atomic (the --json/--junit reports, safetensors files): what is in the way of a write.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "replayssm/atomic_file.hpp"
#include "replayssm/error.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using replayssm::testing::field_of;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "replayssm-af-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::set<std::string> listing() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.insert(e.path().filename().string());
    return out;
  }
};

std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(AtomicFile, ADirectoryInTheWayIsNamedAndNothingIsLeftBehind) {
  TempDir dir;
  fs::create_directory(dir.path / "report.json");
  std::ofstream(dir.path / "report.json" / "inside") << "kept";
  std::string message;
  try {
    write_file_atomic((dir.path / "report.json").string(), std::string_view("{}\n"), "json");
  } catch (const Error& e) {
    message = e.what();
    EXPECT_EQ(e.field(), "json");
  }
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  EXPECT_EQ(dir.listing(), (std::set<std::string>{"report.json"}));  // no temporary file left
  EXPECT_EQ(text_of(dir.path / "report.json" / "inside"), "kept");
}

TEST(AtomicFile, ASymlinkStaysALinkAndItsFileIsReplaced) {
  TempDir dir;
  fs::create_directory(dir.path / "real");
  std::ofstream(dir.path / "real" / "r.json") << "old";
  fs::create_symlink(dir.path / "real" / "r.json", dir.path / "link.json");
  write_file_atomic((dir.path / "link.json").string(), std::string_view("new"), "json");
  EXPECT_TRUE(fs::is_symlink(dir.path / "link.json"));
  EXPECT_EQ(text_of(dir.path / "real" / "r.json"), "new");
  EXPECT_EQ(dir.listing(), (std::set<std::string>{"link.json", "real"}));
}

// A FIFO stands for /dev/stdout or a pipe: the bytes go through it and the FIFO itself stays (a rename would
// have replaced it by a regular file, and the reader would see nothing).
TEST(AtomicFile, AFifoIsWrittenThroughNotReplaced) {
  TempDir dir;
  const fs::path fifo = dir.path / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // a reader, so the writer's open succeeds
  ASSERT_GE(rd, 0);
  write_file_atomic(fifo.string(), std::string_view("{\"ok\":true}\n"), "json");
  char buf[64] = {};
  const ssize_t got = ::read(rd, buf, sizeof buf - 1);
  ::close(rd);
  EXPECT_EQ(std::string(buf, got > 0 ? static_cast<std::size_t>(got) : 0), "{\"ok\":true}\n");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(AtomicFile, AMissingDirectoryIsAnErrorNamingTheField) {
  TempDir dir;
  EXPECT_EQ(field_of([&] { write_file_atomic((dir.path / "no" / "x.xml").string(), std::string_view("x"), "junit"); }),
            "junit");
  EXPECT_TRUE(dir.listing().empty());
}
