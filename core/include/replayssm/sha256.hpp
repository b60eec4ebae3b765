// replayssm/sha256.hpp — SHA-256 (FIPS 180-4) of a byte buffer or a file, as lowercase hex, computed by
// OpenSSL's libcrypto (EVP API).
//
// Used by the fixture manifest (fixtures/MANIFEST.json) to pin every committed fixture file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace replayssm {

// Lowercase hex digest (64 characters) of the bytes.
std::string sha256_hex(const std::uint8_t* data, std::size_t size);
std::string sha256_hex(std::string_view bytes);
// Digest of a whole file; throws Error("path") when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace replayssm
