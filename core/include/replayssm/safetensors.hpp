// replayssm/safetensors.hpp — a strict reader and a deterministic writer for the safetensors format.
//
// Format (public specification: the huggingface/safetensors README, "Format" section, and the reference
// reader in its src/tensor.rs):
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian;
//   bytes [8, 8+N)      a UTF-8 JSON object (the header);
//   bytes [8+N, end)    the data section: every tensor's bytes, row-major, little-endian, no strides.
// Each header key other than "__metadata__" names a tensor:
//   "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// with offsets relative to the start of the data section, end exclusive. "__metadata__", when present, is
// an object mapping strings to strings (structured values are nested as JSON text inside a string).
//
// What the reader validates (every check throws replayssm::Error; the field names the problem):
//   header.length                 file shorter than 8 bytes; N > 100,000,000; 8 + N beyond the file
//   header                        header does not start with '{' (a UTF-8 byte-order mark or leading blank
//                                 is refused, as the reference reader intends), a NUL byte, invalid UTF-8,
//                                 invalid JSON (trailing spaces are fine: they are the writer's padding),
//                                 a JSON value that is not an object
//   tensor 'x'                    an entry that is not an object, a duplicate tensor name
//   tensor 'x'.<key>              a key other than dtype / shape / data_offsets, or a duplicate key
//   tensor 'x'.dtype              missing, not a string, or not one of BOOL U8 I8 I16 U16 F16 BF16 I32 U32
//                                 F32 I64 U64 F64 (other safetensors dtypes, e.g. F8_E4M3 or C64, are
//                                 refused as unsupported by this project)
//   tensor 'x'.shape              missing, not an array, a dimension that is not a non-negative integer or
//                                 exceeds int64, an element count or byte size that overflows
//   tensor 'x'.data_offsets       missing, not an array of two non-negative integers, begin > end,
//                                 end - begin != numel * dtype size, a gap or an overlap with the previous
//                                 tensor in offset order (the tensors must tile the data section from 0),
//                                 an end beyond the data section (a truncated file)
//   tensor 'x'.data               a BOOL byte other than 0 or 1 (stricter than the reference reader)
//   data                          bytes after the last tensor (the data section must end where the last
//                                 tensor ends; a file with no tensors has an empty data section)
//   __metadata__                  not an object, or a duplicate "__metadata__" key
//   __metadata__.<key>            a value that is not a string, or a duplicate key
//   path                          the file cannot be opened or read (read_safetensors only)
//   file                          the file is larger than SafetensorsLimits::max_file_bytes (read_safetensors
//                                 checks the size on disk before reading a byte)
//   tensor 'x'.shape              also: the tensor's byte size exceeds SafetensorsLimits::max_tensor_bytes
// Any string (also "") may name a tensor, except "__metadata__". Zero-size tensors (a zero dimension) are
// allowed and have begin == end; shape [] is a scalar (one element). Float values (NaN, Inf, subnormals) are
// not inspected.
//
// Writer conventions (serialize_safetensors): the header JSON lists "__metadata__" first (omitted when the
// metadata map is empty), then the tensors in data order; it is padded with trailing spaces so that N is a
// multiple of 8; tensors are laid out by descending element size, then by name, so every tensor starts at
// an offset that is a multiple of its element size (the data section starts at a multiple of 8). The same
// input gives the same bytes. The writer checks its input the same way (data size == numel * dtype size,
// no tensor named "__metadata__", valid UTF-8 names and metadata) and throws Error before writing anything.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "replayssm/tensor.hpp"

namespace replayssm {

// Largest header accepted, as in the reference reader.
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

// Absolute caps on what reading a file may cost, checked before anything is allocated for it: the bytes of any
// one tensor and of the whole file (length prefix, header and data). A hostile file declares its own shapes,
// so "bounded by the declared shapes" bounds nothing; these caps do, whatever it declares. The defaults leave
// room for the committed fixtures and for golden sets at real model dimensions (the largest real-dimension
// tensor is a pool of a few hundred MiB). Every reader built on this one (fixtures, fuzz cases, protocol
// frames) takes the process-wide default unless given limits explicitly.
struct SafetensorsLimits {
  std::uint64_t max_tensor_bytes = 4ull << 30;  // 4 GiB
  std::uint64_t max_file_bytes = 16ull << 30;   // 16 GiB
};
// The process-wide default (initially SafetensorsLimits{}); thread-safe.
SafetensorsLimits default_safetensors_limits();
// Replaces the process-wide default. Error("limits.max_tensor_bytes" / "limits.max_file_bytes") for a zero cap.
void set_default_safetensors_limits(const SafetensorsLimits& limits);

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" object; empty when absent

  bool operator==(const SafetensorsFile& o) const;
};

// Reads and validates a whole file. Error messages name `path`.
SafetensorsFile read_safetensors(const std::string& path,
                                 const SafetensorsLimits& limits = default_safetensors_limits());

// Validates and decodes the bytes of a safetensors file; `origin` is only used in error messages.
SafetensorsFile parse_safetensors(const std::vector<std::uint8_t>& bytes, const std::string& origin = "<memory>",
                                  const SafetensorsLimits& limits = default_safetensors_limits());

// Encodes a file following the writer conventions above. Throws Error on invalid input.
std::vector<std::uint8_t> serialize_safetensors(const SafetensorsFile& file);

// Serializes `file`, writes it to a new temporary file in the directory of `path`, flushes it to disk and
// renames it over `path`. On any failure the temporary file is removed, an existing `path` is left
// untouched, and Error("path", ...) (or the serializer's Error) is thrown. POSIX only.
void write_safetensors_atomic(const std::string& path, const SafetensorsFile& file);

}  // namespace replayssm
