// SHA-256 through OpenSSL's libcrypto (EVP digest API; Debian's libssl-dev): a maintained, tested
// implementation instead of a hand-written one.
#include "replayssm/sha256.hpp"

#include <openssl/evp.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "replayssm/error.hpp"

namespace replayssm {

namespace {

// One EVP SHA-256 context; every libcrypto failure is an Error("sha256") naming the call.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    require(ctx_ != nullptr, "sha256", "EVP_MD_CTX_new failed");
    require(EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1, "sha256", "EVP_DigestInit_ex failed");
  }
  void update(const void* p, std::size_t n) {
    require(EVP_DigestUpdate(ctx_.get(), p, n) == 1, "sha256", "EVP_DigestUpdate failed");
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    require(EVP_DigestFinal_ex(ctx_.get(), md, &len) == 1 && len == 32, "sha256", "EVP_DigestFinal_ex failed");
    std::string out;
    char buf[3];
    for (unsigned int i = 0; i < len; ++i) {
      std::snprintf(buf, sizeof buf, "%02x", md[i]);
      out += buf;
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string sha256_hex(const std::uint8_t* data, std::size_t size) {
  Sha256 s;
  s.update(data, size);
  return s.hex();
}

std::string sha256_hex(std::string_view bytes) {
  return sha256_hex(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "path", "cannot open '", path, "'");
  Sha256 s;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = in.gcount();
    if (got > 0) s.update(buf.data(), static_cast<std::size_t>(got));
  }
  require(in.eof(), "path", "read error on '", path, "'");
  return s.hex();
}

}  // namespace replayssm
