#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace kvtier {
namespace {

using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; a real header is a few
// hundred bytes per tensor, so anything larger is corrupt or hostile.
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr std::size_t kLengthPrefixBytes = 8;

// Closes a descriptor on every path out of open(); the mapping outlives it.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Unmaps on error paths until ownership passes to a SafetensorsFile.
class MapGuard {
 public:
  MapGuard(void* base, std::size_t length) : base_(base), length_(length) {}
  MapGuard(const MapGuard&) = delete;
  MapGuard& operator=(const MapGuard&) = delete;
  ~MapGuard() {
    if (base_ != nullptr) ::munmap(base_, length_);
  }
  void* release() { return std::exchange(base_, nullptr); }

 private:
  void* base_;
  std::size_t length_;
};

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

// Concatenates its arguments as an ostream would print them (g++ 12 has no std::format).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string errno_text() { return std::strerror(errno); }

// Validates one header entry and returns the tensor it describes. `data` and
// `data_size` are the data section; errors leave out the file name (the caller adds it).
std::expected<SafetensorsTensor, std::string> parse_entry(const std::string& name,
                                                          const json& entry, const std::byte* data,
                                                          std::uint64_t data_size) {
  const std::string where = cat("tensor '", name, "'");
  if (!entry.is_object()) return std::unexpected(where + ": entry is not a JSON object");

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return std::unexpected(where + ": missing or non-string \"dtype\"");
  }
  SafetensorsTensor t;
  t.dtype = dtype_it->get<std::string>();
  t.dtype_size = safetensors_dtype_size(t.dtype);
  if (t.dtype_size == 0) return std::unexpected(cat(where, ": unknown dtype '", t.dtype, "'"));

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return std::unexpected(where + ": missing or non-array \"shape\"");
  }
  std::uint64_t elements = 1;
  bool overflow = false;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned()) {
      // The entry's type, not its text: dumping deeply nested JSON would recurse.
      return std::unexpected(cat(where, ": shape entry ", t.shape.size(), " is a ", d.type_name(),
                                 ", not a non-negative integer"));
    }
    const auto dim = d.get<std::uint64_t>();
    t.shape.push_back(dim);
    // Keep scanning after an overflow: a later 0 makes the product legitimately 0.
    overflow = overflow || __builtin_mul_overflow(elements, dim, &elements);
  }
  if (std::ranges::find(t.shape, 0u) != t.shape.end()) {
    elements = 0;
    overflow = false;
  }
  std::uint64_t expected_bytes = 0;
  if (overflow || __builtin_mul_overflow(elements, t.dtype_size, &expected_bytes)) {
    return std::unexpected(
        cat(where, ": shape ", shape_text(t.shape), " overflows 64-bit byte size"));
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return std::unexpected(where + ": \"data_offsets\" must be [begin, end] non-negative integers");
  }
  const auto begin = (*offsets_it)[0].get<std::uint64_t>();
  const auto end = (*offsets_it)[1].get<std::uint64_t>();
  if (begin > end) {
    return std::unexpected(
        cat(where, ": data_offsets [", begin, ",", end, "] has begin after end"));
  }
  if (end > data_size) {
    return std::unexpected(
        cat(where, ": data_offsets [", begin, ",", end, "] beyond data size ", data_size));
  }
  if (end - begin != expected_bytes) {
    return std::unexpected(cat(where, ": data_offsets [", begin, ",", end, "] hold ", end - begin,
                               " bytes but ", t.dtype, " shape ", shape_text(t.shape), " needs ",
                               expected_bytes));
  }
  t.data = data + begin;
  t.bytes = static_cast<std::size_t>(expected_bytes);
  return t;
}

// Parses the JSON header into `tensors`. Error messages leave out the file name.
std::expected<void, std::string> parse_header(
    std::string_view header, const std::byte* data, std::uint64_t data_size,
    std::unordered_map<std::string, SafetensorsTensor>& tensors) {
  // The non-throwing overload: malformed JSON yields a "discarded" value.
  json root = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return std::unexpected("header is not valid JSON");
  if (!root.is_object()) {
    return std::unexpected(cat("header is a JSON ", root.type_name(), ", not an object"));
  }
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return std::unexpected("\"__metadata__\" is not a JSON object");
      continue;
    }
    auto tensor = parse_entry(name, entry, data, data_size);
    if (!tensor) return std::unexpected(std::move(tensor.error()));
    tensors.emplace(name, std::move(*tensor));
  }
  return {};
}

}  // namespace

std::size_t safetensors_dtype_size(std::string_view dtype) {
  struct Entry {
    std::string_view name;
    std::size_t size;
  };
  static constexpr Entry kDtypes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
  };
  for (const Entry& e : kDtypes) {
    if (e.name == dtype) return e.size;
  }
  return 0;
}

std::expected<SafetensorsFile, std::string> SafetensorsFile::open(
    const std::filesystem::path& path) {
  auto fail = [&](const std::string& what) {
    return std::unexpected(cat(path.string(), ": ", what));
  };

  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, for ever.
  // It changes nothing for the regular file that is all we accept.
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return fail("cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail("cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) return fail("not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < kLengthPrefixBytes) {
    return fail(
        cat("truncated file: ", file_size, " bytes, too short for the 8-byte header length"));
  }

  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (base == MAP_FAILED) return fail("cannot mmap: " + errno_text());
  MapGuard map_guard(base, file_size);
  const auto* bytes = static_cast<const std::byte*>(base);

  const std::uint64_t header_len = read_u64_le(bytes);
  if (header_len > kMaxHeaderBytes) {
    return fail(cat("header length ", header_len, " exceeds the ", kMaxHeaderBytes, " byte limit"));
  }
  if (header_len > file_size - kLengthPrefixBytes) {
    return fail(cat("truncated file: header says ", header_len, " bytes, file has ",
                    file_size - kLengthPrefixBytes, " after the length"));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + kLengthPrefixBytes),
                                header_len);
  const std::byte* data = bytes + kLengthPrefixBytes + header_len;
  const std::uint64_t data_size = file_size - kLengthPrefixBytes - header_len;

  SafetensorsFile file;
  try {
    auto parsed = parse_header(header, data, data_size, file.tensors_);
    if (!parsed) return fail(parsed.error());
  } catch (const std::exception& e) {
    // nlohmann only throws on misuse we have guarded against, and std::bad_alloc.
    return fail(cat("header cannot be read: ", e.what()));
  }
  file.path_ = path;
  file.base_ = static_cast<const std::byte*>(map_guard.release());
  file.length_ = file_size;
  file.fd_ = fd.release();
  return file;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, tensor] : tensors_) out.push_back(name);
  std::ranges::sort(out);
  return out;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      base_(std::exchange(other.base_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      tensors_(std::move(other.tensors_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    length_ = std::exchange(other.length_, 0);
    fd_ = std::exchange(other.fd_, -1);
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

std::uint64_t SafetensorsEntry::bytes() const {
  std::uint64_t n = sizeof(float);
  for (std::uint64_t d : shape) n *= d;
  return n;
}

std::expected<void, std::string> write_f32_safetensors(
    const std::filesystem::path& path, std::span<const SafetensorsEntry> entries,
    const std::function<void(std::size_t index, std::ostream& out)>& write_data) {
  constexpr std::uint64_t kAlign = 64;
  auto aligned = [](std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    offset = aligned(offset);
    header[e.name] = {
        {"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes()}}};
    offset += e.bytes();
  }
  std::string text = header.dump();
  text.append(aligned(8 + text.size()) - 8 - text.size(), ' ');  // data starts 64-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return std::unexpected(path.string() + ": cannot create: " + errno_text());
  const std::uint64_t n = text.size();
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out.write(length, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  const char zeros[kAlign] = {};
  std::uint64_t written = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out.write(zeros, static_cast<std::streamsize>(aligned(written) - written));
    written = aligned(written);
    write_data(i, out);
    written += entries[i].bytes();
  }
  out.close();
  if (!out) return std::unexpected(path.string() + ": write failed: " + errno_text());
  return {};
}

void SafetensorsFile::copy_out(const std::byte* at, std::size_t bytes, void* out) const {
  assert(at >= base_ && at + bytes <= base_ + length_);
  const ssize_t got = ::pread(fd_, out, bytes, at - base_);
  if (got != static_cast<ssize_t>(bytes)) std::memcpy(out, at, bytes);
}

void SafetensorsFile::release_resident_pages() const {
  if (base_ == nullptr) return;
  // Advice only: where the kernel declines, the pages simply stay resident.
  (void)::madvise(const_cast<std::byte*>(base_), length_, MADV_DONTNEED);
}

void SafetensorsFile::release() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), length_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  length_ = 0;
  fd_ = -1;
  tensors_.clear();
}

}  // namespace kvtier
