#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test_util::TempDir;

// The bytes of a safetensors file with exactly this header text and data section.
// `declared_len` overrides the length prefix to build inconsistent files.
std::string file_bytes(const std::string& header, const std::string& data,
                       std::optional<std::uint64_t> declared_len = std::nullopt) {
  return test_util::safetensors_bytes(header, data, {.align = 1, .declared_len = declared_len});
}

// A valid two-tensor file: "a" F32 (2,3) at [0,24), "b" I64 (2) at [24,40).
struct GoodFile {
  std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  std::vector<std::int64_t> b{42, -7};
  std::string header = json{{"__metadata__", {{"format", "pt"}}},
                            {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
                            {"b", {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {24, 40}}}}}
                           .dump();
  std::string data() const { return test_util::as_bytes(a) + test_util::as_bytes(b); }
  std::string bytes() const { return file_bytes(header, data()); }
};

// Opens a file with one tensor entry `entry` over `data` and expects an error naming `needle`.
void expect_entry_error(const json& entry, const std::string& data, const std::string& needle) {
  TempDir dir;
  const fs::path path = dir.write("t.safetensors", file_bytes(json{{"x", entry}}.dump(), data));
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.has_value()) << entry.dump();
  EXPECT_NE(f.error().find(needle), std::string::npos)
      << "error '" << f.error() << "' does not mention '" << needle << "'";
  EXPECT_NE(f.error().find(path.string()), std::string::npos) << f.error();
}

std::string open_error(const std::string& bytes) {
  TempDir dir;
  auto f = SafetensorsFile::open(dir.write("t.safetensors", bytes));
  return f.has_value() ? std::string("<opened>") : f.error();
}

TEST(SafetensorsTest, ReadsTensorsInPlace) {
  TempDir dir;
  GoodFile good;
  auto f = SafetensorsFile::open(dir.write("t.safetensors", good.bytes()));
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->size(), 2u);
  EXPECT_EQ(f->names(), (std::vector<std::string>{"a", "b"}));  // no __metadata__

  const SafetensorsTensor* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->dtype_size, 4u);
  EXPECT_EQ(a->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(a->bytes, 24u);
  EXPECT_EQ(a->elements(), 6u);
  EXPECT_EQ(std::memcmp(a->data, good.a.data(), 24), 0);

  const SafetensorsTensor* b = f->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, "I64");
  EXPECT_EQ(b->bytes, 16u);
  std::int64_t b0 = 0;
  std::memcpy(&b0, b->data, 8);
  EXPECT_EQ(b0, 42);

  // Pointers are the mapping's bytes at 8 + header length + offset: nothing was copied.
  const auto mapped = f->mapped_bytes();
  EXPECT_EQ(mapped.size(), good.bytes().size());
  EXPECT_EQ(a->data, mapped.data() + 8 + good.header.size());
  EXPECT_EQ(b->data, mapped.data() + 8 + good.header.size() + 24);
  EXPECT_EQ(std::memcmp(mapped.data(), good.bytes().data(), mapped.size()), 0);
  EXPECT_EQ(f->find("c"), nullptr);
  EXPECT_EQ(f->find("__metadata__"), nullptr);
}

// Counts lines of /proc/self/maps that map `path`.
int mappings_of(const fs::path& path) {
  const std::string target = fs::canonical(path).string();
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.ends_with(target)) ++count;
  }
  return count;
}

TEST(SafetensorsTest, MapsTheFileAndUnmapsOnDestruction) {
  TempDir dir;
  const fs::path path = dir.write("t.safetensors", GoodFile().bytes());
  EXPECT_EQ(mappings_of(path), 0);
  {
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.has_value()) << f.error();
    EXPECT_EQ(mappings_of(path), 1);
    SafetensorsFile moved = std::move(*f);  // the mapping moves, it is not duplicated
    EXPECT_EQ(mappings_of(path), 1);
    EXPECT_EQ(moved.find("a")->shape.size(), 2u);
    EXPECT_EQ(moved.mapped_bytes().size(), fs::file_size(path));
  }
  EXPECT_EQ(mappings_of(path), 0);
}

TEST(SafetensorsTest, MoveAssignmentReleasesTheOldMapping) {
  TempDir dir;
  const fs::path p1 = dir.write("one.safetensors", GoodFile().bytes());
  const fs::path p2 = dir.write("two.safetensors", GoodFile().bytes());
  auto f1 = SafetensorsFile::open(p1);
  auto f2 = SafetensorsFile::open(p2);
  ASSERT_TRUE(f1.has_value() && f2.has_value());
  const std::byte* a2 = f2->find("a")->data;
  *f1 = std::move(*f2);
  EXPECT_EQ(mappings_of(p1), 0);
  EXPECT_EQ(mappings_of(p2), 1);
  EXPECT_EQ(f1->find("a")->data, a2);
  EXPECT_EQ(f1->path(), p2);
}

TEST(SafetensorsTest, AcceptsScalarsEmptyTensorsAndEmptyFiles) {
  TempDir dir;
  const std::string header = json{
      {"scalar", {{"dtype", "F64"}, {"shape", json::array()}, {"data_offsets", {0, 8}}}},
      {"empty", {{"dtype", "F32"}, {"shape", {0, 5}}, {"data_offsets", {8, 8}}}},
      {"huge_but_empty",
       {{"dtype", "F32"},
        {"shape", {std::uint64_t{1} << 62, std::uint64_t{1} << 62, 0}},
        {"data_offsets",
         {8, 8}}}}}.dump();
  const double value = 2.5;
  auto f = SafetensorsFile::open(dir.write(
      "t.safetensors", file_bytes(header, std::string(reinterpret_cast<const char*>(&value), 8))));
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->find("scalar")->elements(), 1u);
  EXPECT_EQ(f->find("empty")->bytes, 0u);
  EXPECT_EQ(f->find("huge_but_empty")->bytes, 0u);

  auto empty = SafetensorsFile::open(dir.write("empty.safetensors", file_bytes("{}", "")));
  ASSERT_TRUE(empty.has_value()) << empty.error();
  EXPECT_EQ(empty->size(), 0u);
}

TEST(SafetensorsTest, RejectsMissingAndNonRegularFiles) {
  TempDir dir;
  auto missing = SafetensorsFile::open(dir.path() / "nope.safetensors");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().find("nope.safetensors"), std::string::npos) << missing.error();
  EXPECT_NE(missing.error().find("cannot open"), std::string::npos) << missing.error();

  auto directory = SafetensorsFile::open(dir.path());
  ASSERT_FALSE(directory.has_value());
  EXPECT_NE(directory.error().find("not a regular file"), std::string::npos) << directory.error();
}

// Opening a FIFO for reading once blocked until a writer came, so a model
// folder with a FIFO for its weights hung kvtierd's start-up for ever. A
// writer here comes after 30 s only if the open is still blocked then.
TEST(SafetensorsTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  const fs::path fifo = dir.path() / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::mutex mu;
  std::condition_variable cv;
  bool opened = false, unblocked = false;
  std::thread writer([&] {
    std::unique_lock lock(mu);
    if (cv.wait_for(lock, std::chrono::seconds(30), [&] { return opened; })) return;
    unblocked = true;
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
  });
  auto file = SafetensorsFile::open(fifo);
  {
    std::lock_guard lock(mu);
    opened = true;
  }
  cv.notify_all();
  writer.join();
  EXPECT_FALSE(unblocked) << "the open waited for a writer";
  ASSERT_FALSE(file.has_value());
  EXPECT_NE(file.error().find("not a regular file"), std::string::npos) << file.error();
}

TEST(SafetensorsTest, RejectsTruncatedFiles) {
  EXPECT_NE(open_error("").find("truncated file"), std::string::npos);
  EXPECT_NE(open_error(std::string("\x10\0\0", 3)).find("truncated file"), std::string::npos);
  // The header claims 1234 bytes, the file holds 2 after the length.
  const std::string err = open_error(file_bytes("{}", "", 1234));
  EXPECT_NE(err.find("truncated file: header says 1234 bytes, file has 2"), std::string::npos)
      << err;
  // Cut a good file anywhere: it must fail cleanly, never read past the mapping.
  const std::string good = GoodFile().bytes();
  for (std::size_t len = 0; len < good.size(); ++len) {
    EXPECT_NE(open_error(good.substr(0, len)), "<opened>") << "length " << len;
  }
}

TEST(SafetensorsTest, RejectsAbsurdHeaderLength) {
  const std::string err = open_error(file_bytes("{}", "", ~std::uint64_t{0}));
  EXPECT_NE(err.find("header length"), std::string::npos) << err;
  EXPECT_NE(open_error(file_bytes("{}", "", std::uint64_t{1} << 40)), "<opened>");
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotAJsonObject) {
  EXPECT_NE(open_error(file_bytes("{\"a\": ", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(open_error(file_bytes("\xff\xfe", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(open_error(file_bytes("[1,2]", "")).find("not an object"), std::string::npos);
  EXPECT_NE(open_error(file_bytes("\"text\"", "")).find("not an object"), std::string::npos);
  EXPECT_NE(open_error(file_bytes("{\"__metadata__\": 3}", "")).find("__metadata__"),
            std::string::npos);
  EXPECT_NE(open_error(file_bytes("{\"x\": [1]}", "")).find("tensor 'x'"), std::string::npos);
}

TEST(SafetensorsTest, RejectsBadDtype) {
  const std::string data(16, '\0');
  expect_entry_error({{"shape", {4}}, {"data_offsets", {0, 16}}}, data, "dtype");
  expect_entry_error({{"dtype", 4}, {"shape", {4}}, {"data_offsets", {0, 16}}}, data, "dtype");
  expect_entry_error({{"dtype", "F128"}, {"shape", {1}}, {"data_offsets", {0, 16}}}, data,
                     "unknown dtype 'F128'");
  expect_entry_error({{"dtype", "f32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}, data,
                     "unknown dtype");
}

TEST(SafetensorsTest, RejectsBadShape) {
  const std::string data(16, '\0');
  for (const json& shape : {json(4), json({-4}), json({2.0, 2}), json({"4"}), json(nullptr)}) {
    SCOPED_TRACE(shape.dump());
    expect_entry_error({{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {0, 16}}}, data,
                       "shape");
  }
  expect_entry_error({{"dtype", "F32"}, {"data_offsets", {0, 16}}}, data, "shape");
}

TEST(SafetensorsTest, RejectsDeeplyNestedShapeWithoutRecursing) {
  const int depth = 100000;
  const std::string shape = std::string(depth, '[') + std::string(depth, ']');
  const std::string header =
      "{\"x\": {\"dtype\": \"F32\", \"shape\": [" + shape + "], \"data_offsets\": [0, 0]}}";
  const std::string err = open_error(file_bytes(header, ""));
  EXPECT_NE(err.find("shape entry 0 is a array"), std::string::npos) << err.substr(0, 200);
}

TEST(SafetensorsTest, RejectsShapesWhoseSizeOverflows) {
  const std::string data(16, '\0');
  // 2^62 * 8 elements, and 2^62 elements * 4 bytes, both wrap 64 bits.
  expect_entry_error(
      {{"dtype", "F32"}, {"shape", {std::uint64_t{1} << 62, 8}}, {"data_offsets", {0, 16}}}, data,
      "overflows");
  expect_entry_error(
      {{"dtype", "F32"}, {"shape", {std::uint64_t{1} << 62}}, {"data_offsets", {0, 16}}}, data,
      "overflows");
  // 2^64 / 4 * 4 wraps to 0: must not be mistaken for an empty tensor.
  expect_entry_error({{"dtype", "F32"},
                      {"shape", {std::uint64_t{1} << 32, std::uint64_t{1} << 30}},
                      {"data_offsets", {0, 0}}},
                     data, "overflows");
}

TEST(SafetensorsTest, RejectsBadOffsets) {
  const std::string data(16, '\0');
  auto entry = [](const json& offsets) {
    return json{{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", offsets}};
  };
  for (const json& offsets : {json(nullptr), json({0}), json({0, 16, 32}), json({-16, 0}),
                              json({0.0, 16}), json({"0", "16"})}) {
    SCOPED_TRACE(offsets.dump());
    expect_entry_error(entry(offsets), data, "data_offsets");
  }
  expect_entry_error(entry({16, 0}), data, "begin after end");
  expect_entry_error(entry({8, 24}), data, "data_offsets [8,24] beyond data size 16");
  expect_entry_error(entry({std::uint64_t(-16), std::uint64_t(-1)}), data, "beyond data size");
  // Four F32 need 16 bytes; 12 or 20 is a shape/offset mismatch.
  expect_entry_error(entry({0, 12}), data, "hold 12 bytes");
  expect_entry_error(entry({0, 20}), data + "xxxx", "needs 16");
}

// Flipping bytes of the header must give a clean error or a valid file, never a crash
// (run under the sanitizer build to check the "never reads outside" half).
TEST(SafetensorsTest, SurvivesCorruptedHeaders) {
  GoodFile good;
  const std::string bytes = good.bytes();
  TempDir dir;
  int opened = 0;
  for (std::size_t pos = 0; pos < 8 + good.header.size(); ++pos) {
    for (char replacement : {'9', '"', '\xff'}) {
      std::string mutated = bytes;
      mutated[pos] = replacement;
      auto f = SafetensorsFile::open(dir.write("t.safetensors", mutated));
      if (!f) continue;
      ++opened;
      for (const std::string& name : f->names()) {
        const SafetensorsTensor* t = f->find(name);
        ASSERT_NE(t, nullptr);
        const auto mapped = f->mapped_bytes();
        EXPECT_GE(t->data, mapped.data());
        EXPECT_LE(t->data + t->bytes, mapped.data() + mapped.size());
      }
    }
  }
  EXPECT_GT(opened, 0);  // some mutations (digits in metadata) leave a valid file
}

TEST(SafetensorsTest, DtypeSizes) {
  EXPECT_EQ(safetensors_dtype_size("F32"), 4u);
  EXPECT_EQ(safetensors_dtype_size("F16"), 2u);
  EXPECT_EQ(safetensors_dtype_size("BF16"), 2u);
  EXPECT_EQ(safetensors_dtype_size("I64"), 8u);
  EXPECT_EQ(safetensors_dtype_size("BOOL"), 1u);
  EXPECT_EQ(safetensors_dtype_size("F32 "), 0u);
  EXPECT_EQ(safetensors_dtype_size(""), 0u);
}

// A plain reference for a binary floating-point format with `exponent_bits`
// and `mantissa_bits`: the value its fields spell, computed in double by
// ldexp (exact for every half-precision value), as fp32 bits. NaNs keep their
// payload, shifted to fp32's mantissa width.
std::uint32_t reference_f32_bits(std::uint32_t bits, int exponent_bits, int mantissa_bits) {
  const std::uint32_t sign = (bits >> (exponent_bits + mantissa_bits)) & 1u;
  const std::uint32_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
  const std::uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  if (exponent == (1u << exponent_bits) - 1) {  // infinity or NaN
    return (sign << 31) | 0x7F800000u | (mantissa << (23 - mantissa_bits));
  }
  const double magnitude = exponent == 0 ? std::ldexp(double(mantissa), 1 - bias - mantissa_bits)
                                         : std::ldexp(double(mantissa + (1u << mantissa_bits)),
                                                      int(exponent) - bias - mantissa_bits);
  const float value = static_cast<float>(sign ? -magnitude : magnitude);
  return std::bit_cast<std::uint32_t>(value);
}

TEST(SafetensorsF32Test, WidensEveryF16AndBf16ValueBitForBit) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    SCOPED_TRACE(bits);
    const auto h = static_cast<std::uint16_t>(bits);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(h)), reference_f32_bits(bits, 5, 10));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(bf16_to_f32(h)), reference_f32_bits(bits, 8, 7));
  }
}

TEST(SafetensorsF32Test, WidensTheEdgeValues) {
  struct Case {
    std::uint16_t f16;
    float expected;
  };
  const Case cases[] = {
      {0x0000, 0.0f},         {0x3C00, 1.0f},     {0xC000, -2.0f},     {0x0001, 0x1p-24f},
      {0x03FF, 0x1.ff8p-15f}, {0x0400, 0x1p-14f}, {0x8001, -0x1p-24f}, {0x7BFF, 65504.0f},
      {0x3555, 0x1.554p-2f},  {0x7C00, INFINITY}, {0xFC00, -INFINITY},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(c.f16)),
              std::bit_cast<std::uint32_t>(c.expected))
        << std::hex << c.f16;
  }
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(0x8000)), 0x80000000u);  // -0 stays negative
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(0x7E00)), 0x7FC00000u);  // quiet NaN
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(0xFD01)), 0xFFA02000u);  // signalling, payload
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x0001), 0x1p-133f);  // the smallest BF16 subnormal
  EXPECT_EQ(bf16_to_f32(0xFF80), -INFINITY);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(bf16_to_f32(0x7FC1)), 0x7FC10000u);
}

// Through a file: the data of a 2-byte dtype sits at odd addresses as often as not.
TEST(SafetensorsF32Test, WidensTensorsOfAFile) {
  const std::vector<std::uint16_t> f16 = {0x3C00, 0x0001, 0xC000};
  const std::vector<std::uint16_t> bf16 = {0x3F80, 0xBF00, 0x7F80};
  const std::vector<float> f32 = {1.5f, -0.0f, 3.0f};
  TempDir dir;
  const fs::path path = test_util::write_safetensors(dir.path() / "half.safetensors",
                                                     {{"a", "F16", {3}, test_util::as_bytes(f16)},
                                                      {"b", "BF16", {3}, test_util::as_bytes(bf16)},
                                                      {"c", "F32", {3}, test_util::as_bytes(f32)}},
                                                     {.misalign = 1});
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.has_value()) << file.error();
  std::vector<float> out(3);
  safetensors_to_f32(*file->find("a"), out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 0x1p-24f, -2.0f}));
  safetensors_to_f32(*file->find("b"), out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -0.5f, INFINITY}));
  safetensors_to_f32(*file->find("c"), out.data());
  EXPECT_EQ(test_util::as_bytes(out), test_util::as_bytes(f32));
  for (const char* dtype : {"F32", "F16", "BF16"})
    EXPECT_TRUE(safetensors_dtype_widens_to_f32(dtype));
  for (const char* dtype : {"F64", "I16", "F8_E4M3", "f16"}) {
    EXPECT_FALSE(safetensors_dtype_widens_to_f32(dtype)) << dtype;
  }
}

}  // namespace
}  // namespace kvtier
