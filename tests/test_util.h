// Helpers shared by the test files: a self-deleting temporary directory, writing
// and reading a file, whether a program is on PATH, running a shell command for
// its output, a substring check that prints both
// strings on failure, one safetensors
// writer (well-formed files from a tensor list, or any header text for the reader's
// error paths), and the bundled model loaded once per test process. Header-only;
// each *_test.cpp includes what it uses.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/gpt2/gpt2_model.h"
#include "engine/model/tokenizer.h"

namespace kvtier::test_util {

// A loopback TCP port nothing listens on now (the kernel's choice).
inline int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A tokenizer with one token standing for the end of the text, for models
// whose vocabulary has none (the bundled character model): the rest is
// `inner`'s.
class WithEndOfText final : public Tokenizer {
 public:
  WithEndOfText(const Tokenizer& inner, int eot) : inner_(inner), eot_(eot) {}
  std::expected<std::vector<int>, std::string> encode(std::string_view text) const override {
    return inner_.encode(text);
  }
  std::string decode(std::span<const int> tokens) const override { return inner_.decode(tokens); }
  int vocab_size() const override { return inner_.vocab_size(); }
  std::optional<int> end_of_text() const override { return eot_; }

 private:
  const Tokenizer& inner_;
  int eot_;
};

// models/fortunes-char and its tokenizer, loaded on first use and kept for
// the rest of the process (tests run one at a time, so sharing the Model's
// scratch buffers is safe). Throws, failing the calling test, if it cannot load.
struct BundledModel {
  Gpt2Model model;
  std::unique_ptr<Tokenizer> tokenizer;
};
inline BundledModel& bundled_model() {
  static BundledModel* bundled = [] {
    const auto dir = std::filesystem::path(KVTIER_SOURCE_DIR) / "models/fortunes-char";
    auto model = Gpt2Model::load(dir);
    if (!model) throw std::runtime_error("cannot load the bundled model: " + model.error());
    auto tokenizer = Tokenizer::load(model->config().tokenizer);
    if (!tokenizer) throw std::runtime_error("cannot load its tokenizer: " + tokenizer.error());
    return new BundledModel{std::move(*model), std::move(*tokenizer)};
  }();
  return *bundled;
}

// Writes `bytes` to `path` verbatim (binary, truncating) and returns `path`.
inline std::filesystem::path write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("test_util::write_file: cannot write " + path.string());
  return path;
}

// The whole of the file at `path`, as bytes; "" when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Whether `program` is an executable in one of $PATH's folders.
inline bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view dirs(path);
  while (!dirs.empty()) {
    const std::string dir(dirs.substr(0, dirs.find(':')));
    dirs.remove_prefix(std::min(dirs.size(), dir.size() + 1));
    if (!dir.empty() && ::access((std::filesystem::path(dir) / program).c_str(), X_OK) == 0)
      return true;
  }
  return false;
}

// A fresh, uniquely named directory under the system temp dir, removed with everything
// in it when the object goes out of scope.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kvtier_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);  // a leftover of an earlier process with this pid
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `bytes` to the file `name` in this directory and returns its path.
  std::filesystem::path write(const std::string& name, std::string_view bytes) const {
    return write_file(path_ / name, bytes);
  }

 private:
  std::filesystem::path path_;
};

// What a shell command printed (stdout; redirect stderr in the command to
// have it too) and its exit status, -1 when it did not exit or could not run.
struct CommandResult {
  int status = -1;
  std::string output;
};
inline CommandResult run_command(const std::string& command) {
  CommandResult run;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) run.output.append(buf, n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) run.status = WEXITSTATUS(status);
  return run;
}

// EXPECT_TRUE(contains(haystack, needle)) prints both on failure.
inline ::testing::AssertionResult contains(std::string_view haystack, std::string_view needle) {
  if (haystack.find(needle) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << haystack << "\" does not contain \"" << needle << "\"";
}

// The raw bytes of a vector's elements (host byte order, i.e. little-endian here).
template <typename T>
std::string as_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// One tensor of a safetensors file.
struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::string data;  // raw little-endian bytes
};

// How the bytes of a safetensors file are laid out around the header text.
struct SafetensorsLayout {
  // The header is padded with spaces so the data section (at 8 + header length) starts at
  // a multiple of `align` bytes; 1 keeps the header text exactly as given.
  std::size_t align = 8;
  // Then this many more spaces, to build files whose tensors are unaligned.
  std::size_t misalign = 0;
  // Overrides the 8-byte length prefix (which is otherwise the padded header's length),
  // to build files that are inconsistent with themselves.
  std::optional<std::uint64_t> declared_len = std::nullopt;
};

// The bytes of a safetensors file with the given header text and data section.
inline std::string safetensors_bytes(std::string header, std::string_view data,
                                     const SafetensorsLayout& layout = {}) {
  const std::size_t align = layout.align == 0 ? 1 : layout.align;
  header.append((align - (8 + header.size()) % align) % align + layout.misalign, ' ');
  const std::uint64_t len = layout.declared_len.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xFF));
  out += header;
  out += data;
  return out;
}

// The bytes of a well-formed safetensors file holding `tensors` back to back, in order.
inline std::string safetensors_bytes(const std::vector<Tensor>& tensors,
                                     const SafetensorsLayout& layout = {}) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const Tensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  return safetensors_bytes(header.dump(), data, layout);
}

// Writes safetensors_bytes(tensors, layout) to `path` and returns `path`.
inline std::filesystem::path write_safetensors(const std::filesystem::path& path,
                                               const std::vector<Tensor>& tensors,
                                               const SafetensorsLayout& layout = {}) {
  return write_file(path, safetensors_bytes(tensors, layout));
}

}  // namespace kvtier::test_util
