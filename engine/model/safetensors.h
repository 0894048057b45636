// A small read-only reader for the safetensors format, zero-copy over mmap.
//
// File layout (https://huggingface.co/docs/safetensors):
//   u64 little-endian N | N bytes of UTF-8 JSON header | data section
// The header is an object mapping tensor name -> {"dtype": "F32", "shape": [d0, d1, ...],
// "data_offsets": [begin, end]}, offsets relative to the start of the data section, plus
// an optional "__metadata__" object of string -> string that is ignored here.
//
// open() validates everything before handing out a single pointer: the header length
// against the file size, the JSON, every entry's dtype, shape and offsets, and that the
// byte range equals prod(shape) * dtype size (with overflow checks). Any input file,
// however malformed, yields an error message naming the file and the problem; nothing
// is read outside the mapping.
//
// Thread safety: after open() the object is immutable; concurrent const access is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvtier {

// One tensor of an open file. `data` points into the file's mapping (read-only, never
// copied) and stays valid as long as the SafetensorsFile that returned it.
struct SafetensorsTensor {
  std::string dtype;                 // as written in the file: "F32", "F16", "BF16", "I64", ...
  std::size_t dtype_size = 0;        // bytes per element
  std::vector<std::uint64_t> shape;  // empty for a scalar
  const std::byte* data = nullptr;   // start of the tensor's bytes; not necessarily aligned
  std::size_t bytes = 0;             // == prod(shape) * dtype_size

  std::uint64_t elements() const { return dtype_size == 0 ? 0 : bytes / dtype_size; }
};

class SafetensorsFile {
 public:
  // Opens and maps `path` (PROT_READ, MAP_PRIVATE) and validates its header.
  static std::expected<SafetensorsFile, std::string> open(const std::filesystem::path& path);

  // The tensor called `name`, or null when the file has none. The pointer is valid as
  // long as this object.
  const SafetensorsTensor* find(std::string_view name) const;

  // Every tensor name in the file (without "__metadata__"), sorted, for diagnostics.
  std::vector<std::string> names() const;
  std::size_t size() const { return tensors_.size(); }

  // The whole mapped file, for callers (and tests) that check where a pointer lies.
  std::span<const std::byte> mapped_bytes() const { return {base_, length_}; }
  const std::filesystem::path& path() const { return path_; }

  // Drops the mapping's pages from this process's resident set. They stay in
  // the page cache, and a later read faults them back in, so every pointer
  // stays valid and reads the same bytes: for a caller that has copied what
  // it reads most (a model packs its matrices) and reads the rest by rows
  // (embedding tables), so a lookup holds a row resident, not the table.
  void release_resident_pages() const;

  // Copies `bytes` bytes of the mapping, from `at` on, into `out` with
  // pread on the file rather than through the mapping: for rows of a large
  // table read a few at a time. A fault on the mapping maps a whole
  // page-cache folio (on a recent kernel with large folios, up to 2 MB
  // around a 5 kB row), so random rows read through it leave most of the
  // table resident; read this way they stay in the page cache only, shared
  // and reclaimable. Where pread fails or comes up short, copies from the
  // mapping. REQUIRES: [at, at + bytes) lies in mapped_bytes().
  void copy_out(const std::byte* at, std::size_t bytes, void* out) const;

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  void release();

  std::filesystem::path path_;
  const std::byte* base_ = nullptr;  // munmap'ed by the destructor
  std::size_t length_ = 0;
  int fd_ = -1;  // the file, for copy_out; closed by the destructor
  std::unordered_map<std::string, SafetensorsTensor> tensors_;
};

// Bytes per element of a safetensors dtype string; 0 for an unknown one.
std::size_t safetensors_dtype_size(std::string_view dtype);

// The floating-point dtypes safetensors_to_f32 widens exactly: F32, F16, BF16.
bool safetensors_dtype_widens_to_f32(std::string_view dtype);

// Writes the tensor's elements to out[0, t.elements()) as fp32, exactly:
// F32 is copied, F16 converted with its subnormals, infinities and NaN
// payloads kept, BF16 (the top half of an fp32) shifted into place. Reads the
// little-endian bytes wherever they lie, aligned or not.
// REQUIRES: safetensors_dtype_widens_to_f32(t.dtype); out holds t.elements() floats.
void safetensors_to_f32(const SafetensorsTensor& t, float* out);

// A tensor of an F32 file write_f32_safetensors writes: its name and shape.
struct SafetensorsEntry {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::uint64_t bytes() const;  // prod(shape) * 4
};

// Writes an F32 safetensors file that SafetensorsFile maps with every tensor
// usable in place: the entries in order, each starting 64-byte aligned in
// the file (the header padded with spaces, the gaps with zeros).
// write_data(i, out) writes entry i's bytes, little-endian, exactly
// entries[i].bytes() of them, as it likes (from memory, or generated a
// piece at a time). Errors name the path.
std::expected<void, std::string> write_f32_safetensors(
    const std::filesystem::path& path, std::span<const SafetensorsEntry> entries,
    const std::function<void(std::size_t index, std::ostream& out)>& write_data);

// One element of each half-precision format, bits as stored.
float f16_to_f32(std::uint16_t bits);
float bf16_to_f32(std::uint16_t bits);

}  // namespace kvtier
