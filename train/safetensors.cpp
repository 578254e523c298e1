#include "train/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "lib/error.h"

namespace ft {

namespace {

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8})
    if (name == safetensors_dtype(d)) {
      *out = d;
      return true;
    }
  return false;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A JSON reader for the safetensors header: objects, arrays, strings and integers are all it
// contains (the format has no floats, booleans or nulls).
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  struct Value {
    enum class Kind { String, Integer, Array, Object } kind;
    std::string text;
    int64_t integer = 0;
    std::vector<Value> items;
    std::vector<std::pair<std::string, Value>> members;
  };

  Value parse_document() {
    Value v = parse_value(0);
    skip_space();
    check(i_ == s_.size(), "unexpected text after the header's JSON object");
    return v;
  }

 private:
  void check(bool ok, const char* what) const {
    FT_CHECK(ok, "load_safetensors: '", path_, "': bad header JSON at byte ", i_, ": ", what);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip_space();
    check(i_ < s_.size() && s_[i_] == c, "unexpected character");
    ++i_;
  }
  Value parse_value(int depth) {
    check(depth < 8, "nesting too deep");
    skip_space();
    check(i_ < s_.size(), "the header ends early");
    const char c = s_[i_];
    if (c == '"') return Value{Value::Kind::String, parse_string(), 0, {}, {}};
    if (c == '[') {
      Value v{Value::Kind::Array, "", 0, {}, {}};
      ++i_;
      skip_space();
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, v;
      while (true) {
        v.items.push_back(parse_value(depth + 1));
        skip_space();
        check(i_ < s_.size(), "the header ends inside an array");
        if (s_[i_] == ']') return ++i_, v;
        expect(',');
      }
    }
    if (c == '{') {
      Value v{Value::Kind::Object, "", 0, {}, {}};
      ++i_;
      skip_space();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, v;
      while (true) {
        skip_space();
        check(i_ < s_.size() && s_[i_] == '"', "expected a key");
        std::string key = parse_string();
        expect(':');
        v.members.emplace_back(std::move(key), parse_value(depth + 1));
        skip_space();
        check(i_ < s_.size(), "the header ends inside an object");
        if (s_[i_] == '}') return ++i_, v;
        expect(',');
      }
    }
    check(c == '-' || (c >= '0' && c <= '9'), "expected a string, integer, array or object");
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    check(i_ - start <= 19 && i_ > start + (s_[start] == '-'), "bad integer");
    Value v{Value::Kind::Integer, "", 0, {}, {}};
    v.integer = std::stoll(s_.substr(start, i_ - start));
    return v;
  }
  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      check(i_ < s_.size(), "unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      check(i_ < s_.size(), "unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          check(i_ + 4 <= s_.size(), "short \\u escape");
          const unsigned code = static_cast<unsigned>(std::stoul(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          check(code < 0x80, "only ASCII \\u escapes are supported");
          out += static_cast<char>(code);
          break;
        }
        default: check(false, "unknown escape");
      }
    }
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    FT_CHECK(n > 0, "save_safetensors: writing '", path, "' failed: ", std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // std::map orders names, so the file's layout is deterministic.
  std::vector<Tensor> host;
  std::string header = "{";
  size_t offset = 0;
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first_meta = true;
    for (const auto& [key, value] : metadata) {
      if (!first_meta) header += ',';
      header += json_string(key);
      header += ':';
      header += json_string(value);
      first_meta = false;
    }
    header += "}";
    first = false;
  }
  for (const auto& [name, tensor] : tensors) {
    check_defined(tensor, "save_safetensors", name.c_str());
    FT_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    host.push_back(tensor.detach().to(kCPU));
    std::string shape = "[";
    for (size_t d = 0; d < tensor.shape().size(); ++d) {
      if (d) shape += ',';
      shape += std::to_string(tensor.shape()[d]);
    }
    shape += ']';
    const size_t bytes = tensor.nbytes();
    if (!first) header += ',';
    header += json_string(name) + ":{\"dtype\":\"" + safetensors_dtype(tensor.dtype()) +
              "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
    first = false;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the format's recommended alignment

  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FT_CHECK(fd >= 0, "save_safetensors: cannot create '", temp, "': ", std::strerror(errno));
  try {
    uint8_t length[8];
    for (int b = 0; b < 8; ++b) length[b] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * b));
    write_all(fd, length, 8, temp);
    write_all(fd, header.data(), header.size(), temp);
    for (const Tensor& t : host) write_all(fd, t.data_ptr(), t.nbytes(), temp);
    FT_CHECK(::fsync(fd) == 0, "save_safetensors: fsync of '", temp, "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    FT_FAIL("save_safetensors: cannot rename '", temp, "' to '", path, "': ", std::strerror(err));
  }
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in.good(), "load_safetensors: cannot open '", path, "'");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  FT_CHECK(file_size >= 8, "load_safetensors: '", path, "' is too short (", file_size, " bytes) for a header length");
  uint8_t length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_size = 0;
  for (int b = 7; b >= 0; --b) header_size = (header_size << 8) | length_bytes[b];
  FT_CHECK(header_size <= file_size - 8, "load_safetensors: '", path, "' declares a ", header_size,
           "-byte header but only ", file_size - 8, " bytes follow (truncated or not a safetensors file)");
  FT_CHECK(header_size <= (100u << 20), "load_safetensors: '", path, "' declares an implausible ", header_size,
           "-byte header");
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  FT_CHECK(in.good(), "load_safetensors: reading the header of '", path, "' failed");
  const uint64_t data_size = file_size - 8 - header_size;

  HeaderParser parser(header, path);
  const HeaderParser::Value root = parser.parse_document();
  FT_CHECK(root.kind == HeaderParser::Value::Kind::Object, "load_safetensors: '", path,
           "': the header is not a JSON object");
  SafetensorsFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : root.members) {
    using Kind = HeaderParser::Value::Kind;
    if (name == "__metadata__") {
      FT_CHECK(entry.kind == Kind::Object, "load_safetensors: '", path, "': __metadata__ must be an object");
      for (const auto& [key, value] : entry.members) {
        FT_CHECK(value.kind == Kind::String, "load_safetensors: '", path, "': metadata '", key, "' is not a string");
        out.metadata[key] = value.text;
      }
      continue;
    }
    FT_CHECK(entry.kind == Kind::Object, "load_safetensors: '", path, "': entry '", name, "' is not an object");
    const HeaderParser::Value *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [key, value] : entry.members) {
      if (key == "dtype") dtype = &value;
      else if (key == "shape") shape = &value;
      else if (key == "data_offsets") offsets = &value;
    }
    FT_CHECK(dtype && dtype->kind == Kind::String && shape && shape->kind == Kind::Array && offsets &&
                 offsets->kind == Kind::Array && offsets->items.size() == 2,
             "load_safetensors: '", path, "': entry '", name, "' needs dtype, shape and two data_offsets");
    DType dt;
    FT_CHECK(parse_dtype(dtype->text, &dt), "load_safetensors: '", path, "': tensor '", name, "' has dtype '",
             dtype->text, "', which fusedtrain does not support");
    Shape dims;
    uint64_t count = 1;
    for (const auto& d : shape->items) {
      FT_CHECK(d.kind == Kind::Integer && d.integer >= 0 && d.integer < (int64_t{1} << 40), "load_safetensors: '",
               path, "': tensor '", name, "' has a bad dimension");
      dims.push_back(d.integer);
      count *= static_cast<uint64_t>(d.integer);
    }
    const auto& b = offsets->items[0];
    const auto& e = offsets->items[1];
    FT_CHECK(b.kind == Kind::Integer && e.kind == Kind::Integer && b.integer >= 0 && e.integer >= b.integer,
             "load_safetensors: '", path, "': tensor '", name, "' has bad data_offsets");
    const uint64_t begin = static_cast<uint64_t>(b.integer), end = static_cast<uint64_t>(e.integer);
    FT_CHECK(end - begin == count * dtype_size(dt), "load_safetensors: '", path, "': tensor '", name, "' spans ",
             end - begin, " bytes but ", dtype->text, " ", shape_str(dims), " needs ", count * dtype_size(dt));
    FT_CHECK(end <= data_size, "load_safetensors: '", path, "': tensor '", name, "' ends at byte ", end,
             " past the ", data_size, " data bytes (truncated file)");
    ranges.emplace_back(begin, end);
    Tensor t = Tensor::empty(dims, dt, kCPU);
    in.seekg(static_cast<std::streamoff>(8 + header_size + begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(end - begin));
    FT_CHECK(in.good() || end == begin, "load_safetensors: reading tensor '", name, "' from '", path, "' failed");
    out.tensors.emplace(name, t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    FT_CHECK(ranges[i].first >= ranges[i - 1].second, "load_safetensors: '", path, "': two tensors' byte ranges overlap");
  return out;
}

}  // namespace ft
