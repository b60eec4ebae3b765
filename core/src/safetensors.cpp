#include "replayssm/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "replayssm/atomic_file.hpp"
#include "replayssm/error.hpp"

namespace replayssm {

namespace {

using json = nlohmann::json;

std::string tensor_field(const std::string& name) { return "tensor '" + name + "'"; }

// Re-throws e with " (in <origin>)" appended to its message, keeping the field.
[[noreturn]] void rethrow_with_origin(const Error& e, const std::string& origin) {
  std::string msg = e.what();
  if (!e.field().empty() && msg.size() >= e.field().size() + 2) msg = msg.substr(e.field().size() + 2);
  throw Error(e.field(), msg + " (in " + origin + ")");
}

std::uint64_t read_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void append_le64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// Parses the header text, refusing duplicate keys in any object (nlohmann keeps the last one silently).
// Errors name the duplicated key: "tensor 'x'", "tensor 'x'.dtype", "__metadata__", "__metadata__.k".
json parse_header_json(const char* begin, const char* end) {
  // A valid header nests three levels deep ({tensor: {"shape": [..]}}); refuse anything past 8 before
  // parsing, so a crafted header cannot exhaust memory or the stack.
  {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (const char* p = begin; p != end; ++p) {
      if (in_string) {
        if (escaped) escaped = false;
        else if (*p == '\\') escaped = true;
        else if (*p == '"') in_string = false;
      } else if (*p == '"') {
        in_string = true;
      } else if (*p == '{' || *p == '[') {
        if (++depth > 8) fail("header", "JSON nesting deeper than 8 levels");
      } else if (*p == '}' || *p == ']') {
        --depth;
      }
    }
  }
  struct Frame {
    bool is_object;
    std::string field;  // field name of this object/array, for messages
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> stack;
  auto key_field = [&](const std::string& key) -> std::string {
    if (stack.size() == 1) return key == "__metadata__" ? std::string("__metadata__") : tensor_field(key);
    return stack.back().field + "." + key;
  };
  auto child_field = [&]() -> std::string {
    if (stack.empty()) return "header";
    return stack.back().is_object ? key_field(stack.back().last_key) : stack.back().field + "[]";
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start: stack.push_back({true, child_field(), {}, {}}); break;
      case json::parse_event_t::array_start: stack.push_back({false, child_field(), {}, {}}); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: stack.pop_back(); break;
      case json::parse_event_t::key: {
        const std::string k = parsed.get<std::string>();
        Frame& top = stack.back();
        if (!top.keys.insert(k).second) fail(key_field(k), "duplicate key \"", k, "\" in the header");
        top.last_key = k;
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    fail("header", "invalid JSON: ", e.what());
  }
}

// A JSON value that must be a non-negative integer (as the reference's usize fields).
std::uint64_t get_uint(const json& v, const std::string& field, const char* what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() == 0) return 0;  // "-0"
  fail(field, what, " must be a non-negative integer, got ", v.dump());
}

// numel * dtype size, overflow-checked; errors name `field`.
std::uint64_t byte_size(DType dtype, const Shape& shape, const std::string& field) {
  const std::int64_t n = shape_numel(shape, field);
  const std::uint64_t es = dtype_size(dtype);
  if (static_cast<std::uint64_t>(n) > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / es)
    fail(field, "byte size overflows (", n, " elements of ", es, " bytes)");
  return static_cast<std::uint64_t>(n) * es;
}

void check_utf8(const std::string& s, const std::string& field) {
  try {
    (void)json(s).dump();
  } catch (const json::exception&) {
    fail(field, "is not valid UTF-8");
  }
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
};

Entry parse_entry(const std::string& name, const json& v, const SafetensorsLimits& limits) {
  const std::string f = tensor_field(name);
  require(v.is_object(), f, "must be an object with dtype, shape and data_offsets, got ", v.type_name());
  for (const auto& item : v.items())
    require(item.key() == "dtype" || item.key() == "shape" || item.key() == "data_offsets", f + "." + item.key(),
            "unexpected key (a tensor entry has exactly dtype, shape and data_offsets)");
  Entry e;
  e.name = name;

  require(v.contains("dtype"), f + ".dtype", "missing");
  const json& jd = v.at("dtype");
  require(jd.is_string(), f + ".dtype", "must be a string, got ", jd.type_name());
  e.dtype = parse_dtype(jd.get_ref<const std::string&>(), f + ".dtype");

  require(v.contains("shape"), f + ".shape", "missing");
  const json& js = v.at("shape");
  require(js.is_array(), f + ".shape", "must be an array, got ", js.type_name());
  for (std::size_t i = 0; i < js.size(); ++i) {
    const std::uint64_t d = get_uint(js[i], f + ".shape", "every dimension");
    require(d <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), f + ".shape", "dimension ",
            i, " is too large (", d, ")");
    e.shape.push_back(static_cast<std::int64_t>(d));
  }
  const std::uint64_t nbytes = byte_size(e.dtype, e.shape, f + ".shape");
  require(nbytes <= limits.max_tensor_bytes, f + ".shape", dtype_name(e.dtype), " ", shape_str(e.shape), " needs ",
          nbytes, " bytes, more than the cap of ", limits.max_tensor_bytes, " bytes per tensor");

  require(v.contains("data_offsets"), f + ".data_offsets", "missing");
  const json& jo = v.at("data_offsets");
  require(jo.is_array() && jo.size() == 2, f + ".data_offsets", "must be an array [begin, end], got ", jo.dump());
  e.begin = get_uint(jo[0], f + ".data_offsets", "begin");
  e.end = get_uint(jo[1], f + ".data_offsets", "end");
  require(e.begin <= e.end, f + ".data_offsets", "begin ", e.begin, " is after end ", e.end);
  require(e.end - e.begin == nbytes, f + ".data_offsets", "spans ", e.end - e.begin, " bytes, but ",
          dtype_name(e.dtype), " ", shape_str(e.shape), " needs ", nbytes);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& v) {
  require(v.is_object(), "__metadata__", "must be an object of string values, got ", v.type_name());
  std::map<std::string, std::string> out;
  for (const auto& item : v.items()) {
    require(item.value().is_string(), "__metadata__." + item.key(), "must be a string, got ",
            item.value().type_name(), " (nest structured values as JSON text)");
    out.emplace(item.key(), item.value().get<std::string>());
  }
  return out;
}

void check_file_size(std::uint64_t size, const SafetensorsLimits& limits) {
  require(size <= limits.max_file_bytes, "file", "has ", size, " bytes, more than the cap of ", limits.max_file_bytes,
          " bytes per file");
}

SafetensorsFile parse_impl(const std::vector<std::uint8_t>& bytes, const SafetensorsLimits& limits) {
  check_file_size(bytes.size(), limits);
  require(bytes.size() >= 8, "header.length", "the file has ", bytes.size(),
          " bytes, fewer than the 8 bytes of the header length");
  const std::uint64_t n = read_le64(bytes.data());
  require(n <= kSafetensorsMaxHeader, "header.length", "header length ", n, " exceeds the limit of ",
          kSafetensorsMaxHeader, " bytes");
  require(n <= bytes.size() - 8, "header.length", "header length ", n, " runs beyond the end of the file (",
          bytes.size() - 8, " bytes follow the length)");
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  require(n > 0 && text[0] == '{', "header", "must start with '{'");
  // nlohmann's lexer takes a NUL byte for the end of the input and would ignore what follows it; JSON text
  // never holds a raw NUL (inside strings control characters must be escaped), so refuse it here.
  if (const void* nul = std::memchr(text, 0, static_cast<std::size_t>(n)))
    fail("header", "contains a NUL byte at offset ", static_cast<const char*>(nul) - text, " (invalid JSON)");
  const json h = parse_header_json(text, text + n);
  require(h.is_object(), "header", "must be a JSON object, got ", h.type_name());

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& item : h.items()) {
    if (item.key() == "__metadata__") {
      out.metadata = parse_metadata(item.value());
    } else {
      entries.push_back(parse_entry(item.key(), item.value(), limits));
    }
  }

  // The tensors, in offset order, must tile the data section exactly.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  const std::uint64_t data_len = bytes.size() - 8 - n;
  std::uint64_t cursor = 0;
  const std::string* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string f = tensor_field(e.name) + ".data_offsets";
    if (e.begin < cursor)
      fail(f, "[", e.begin, ", ", e.end, "] overlaps tensor '", *prev, "', whose data ends at ", cursor);
    if (e.begin > cursor)
      fail(f, "[", e.begin, ", ", e.end, "] leaves a gap: the previous data ends at ", cursor);
    require(e.end <= data_len, f, "[", e.begin, ", ", e.end, "] ends beyond the data section of ", data_len,
            " bytes (truncated file?)");
    cursor = e.end;
    prev = &e.name;
  }
  require(cursor == data_len, "data", data_len - cursor, " trailing bytes after the last tensor (the data section has ",
          data_len, " bytes, the tensors cover ", cursor, ")");

  const std::uint8_t* data = bytes.data() + 8 + n;
  for (Entry& e : entries) {
    Tensor t;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.assign(data + e.begin, data + e.end);
    if (t.dtype == DType::BOOL) {
      for (std::size_t i = 0; i < t.data.size(); ++i)
        require(t.data[i] <= 1, tensor_field(e.name) + ".data", "BOOL element ", i, " is ",
                static_cast<int>(t.data[i]), ", not 0 or 1");
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

bool SafetensorsFile::operator==(const SafetensorsFile& o) const {
  if (metadata != o.metadata || tensors.size() != o.tensors.size()) return false;
  for (auto a = tensors.begin(), b = o.tensors.begin(); a != tensors.end(); ++a, ++b) {
    if (a->first != b->first || a->second.dtype != b->second.dtype || a->second.shape != b->second.shape ||
        a->second.data != b->second.data)
      return false;
  }
  return true;
}

namespace {
std::atomic<std::uint64_t> g_max_tensor_bytes{SafetensorsLimits{}.max_tensor_bytes};
std::atomic<std::uint64_t> g_max_file_bytes{SafetensorsLimits{}.max_file_bytes};
}  // namespace

SafetensorsLimits default_safetensors_limits() {
  return SafetensorsLimits{g_max_tensor_bytes.load(), g_max_file_bytes.load()};
}

void set_default_safetensors_limits(const SafetensorsLimits& limits) {
  require(limits.max_tensor_bytes > 0, "limits.max_tensor_bytes", "must be > 0");
  require(limits.max_file_bytes > 0, "limits.max_file_bytes", "must be > 0");
  g_max_tensor_bytes = limits.max_tensor_bytes;
  g_max_file_bytes = limits.max_file_bytes;
}

SafetensorsFile parse_safetensors(const std::vector<std::uint8_t>& bytes, const std::string& origin,
                                  const SafetensorsLimits& limits) {
  try {
    return parse_impl(bytes, limits);
  } catch (const Error& e) {
    rethrow_with_origin(e, origin);
  }
}

SafetensorsFile read_safetensors(const std::string& path, const SafetensorsLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("path", "cannot open '", path, "': ", std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::string problem;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    problem = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if (static_cast<std::uint64_t>(st.st_size) > limits.max_file_bytes) {
    ::close(fd);
    try {
      check_file_size(static_cast<std::uint64_t>(st.st_size), limits);  // before a byte is allocated
    } catch (const Error& e) {
      rethrow_with_origin(e, path);
    }
  } else {
    bytes.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) { problem = std::strerror(errno); break; }
      if (r == 0) { problem = "the file shrank while being read"; break; }
      got += static_cast<std::size_t>(r);
    }
  }
  ::close(fd);
  if (!problem.empty()) fail("path", "cannot read '", path, "': ", problem);
  return parse_safetensors(bytes, path, limits);
}

std::vector<std::uint8_t> serialize_safetensors(const SafetensorsFile& file) {
  struct Item {
    const std::string* name;
    const Tensor* tensor;
    std::uint64_t nbytes;
  };
  std::vector<Item> items;
  for (const auto& [name, t] : file.tensors) {
    const std::string f = tensor_field(name);
    require(name != "__metadata__", f, "the name __metadata__ is reserved for the metadata map");
    check_utf8(name, f);
    const std::uint64_t nbytes = byte_size(t.dtype, t.shape, f + ".shape");
    require(t.data.size() == nbytes, f + ".data", "holds ", t.data.size(), " bytes, but ", dtype_name(t.dtype),
            " ", shape_str(t.shape), " needs ", nbytes);
    items.push_back({&name, &t, nbytes});
  }
  for (const auto& [k, v] : file.metadata) {
    check_utf8(k, "__metadata__");
    check_utf8(v, "__metadata__." + k);
  }
  // Descending element size, then name: every tensor starts at a multiple of its element size.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    const std::size_t sa = dtype_size(a.tensor->dtype), sb = dtype_size(b.tensor->dtype);
    return sa != sb ? sa > sb : *a.name < *b.name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : file.metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (const Item& it : items) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = std::string(dtype_name(it.tensor->dtype));
    e["shape"] = it.tensor->shape;
    e["data_offsets"] = {offset, offset + it.nbytes};
    header[*it.name] = std::move(e);
    offset += it.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  require(text.size() <= kSafetensorsMaxHeader, "header.length", "the header would have ", text.size(),
          " bytes, more than the limit of ", kSafetensorsMaxHeader);

  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + offset);
  append_le64(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  for (const Item& it : items) out.insert(out.end(), it.tensor->data.begin(), it.tensor->data.end());
  return out;
}

void write_safetensors_atomic(const std::string& path, const SafetensorsFile& file) {
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file);  // all input errors before any I/O
  write_file_atomic(path, bytes.data(), bytes.size(), "path");
}

}  // namespace replayssm
