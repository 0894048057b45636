// A structure-aware generator of kvtierd request lines: what the fuzz
// target's custom mutator (protocol_fuzz.cpp) writes, and what the corpus
// test replays from fixed seeds (tests/protocol_fuzz_corpus_test.cpp).
//
// Byte-level mutation cannot build what once killed the daemon, a request
// whose params nest 100,000 arrays deep (one 600 KB line): it would have to
// add 100,000 brackets and as many matching ones. This writes such lines on
// purpose. Requests of every method, their members in any order, missing or
// repeated, ids and params of the right and the wrong types, and values
// nested from 1 level to as deep as the byte budget allows (hundreds of
// thousands of levels in libFuzzer's 1 MiB), log-uniformly, and a third of
// the time exactly at kMaxJsonDepth, one under or one over; nested at the top
// level, in id, in method and in params, as arrays, objects, both mixed, with
// siblings at each level; strings full of brackets that nest nothing; nesting
// cut short.
//
// Thread-safety: none; one generator per thread.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/protocol_fuzz_one.h"
#include "wire/protocol.h"

namespace kvtier::wire {

// splitmix64 (Vigna): the same stream for a seed with every standard library,
// so a seed names an input.
class ProtocolFuzzRng {
 public:
  explicit ProtocolFuzzRng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); 0 when n is 0.
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
  bool one_in(std::size_t n) { return below(n) == 0; }
  // In [1, max], log-uniform: 1..10 comes up as often as 10,000..100,000.
  std::size_t log_uniform(std::size_t max) {
    if (max <= 1) return 1;
    const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;
    const double v = std::exp(u * std::log(static_cast<double>(max) + 1.0));
    return std::clamp(static_cast<std::size_t>(v), std::size_t{1}, max);
  }

 private:
  std::uint64_t state_;
};

class ProtocolFuzzGen {
 public:
  // Inputs of at most `max_bytes` bytes (libFuzzer's max_size).
  ProtocolFuzzGen(std::uint64_t seed, std::size_t max_bytes) : rng_(seed), max_bytes_(max_bytes) {}

  // One request line, or two or three, '\n' (or "\r\n") between them.
  std::string input() {
    std::string out;
    const std::size_t lines = rng_.one_in(4) ? 2 + rng_.below(2) : 1;
    for (std::size_t i = 0; i < lines; ++i) {
      if (i > 0) out += rng_.one_in(4) ? "\r\n" : "\n";
      line(out);
    }
    if (rng_.one_in(3)) out += '\n';
    // The budget is kept only roughly; a line cut short is an input too.
    if (out.size() > max_bytes_) out.resize(max_bytes_);
    return out;
  }

  // `text` with a nested value spliced in right after one of its '[' or '{'
  // (outside strings), as an element or a member, so that an input the
  // fuzzer found interesting gets deep where it was shallow. input() when
  // `text` opens no container.
  std::string deepen(std::string_view text) {
    std::vector<std::size_t> after_open;
    for_each_bracket(text, [&](std::size_t i) {
      if (text[i] == '[' || text[i] == '{') after_open.push_back(i + 1);
    });
    if (after_open.empty()) return input();
    const std::size_t at = after_open[rng_.below(after_open.size())];
    const std::string_view head = text.substr(0, at);
    const std::string_view tail = text.substr(at);
    std::string out(head);
    if (head.back() == '{') out += "\"deep\":";
    nested(out, json_text_depth(head).open, tail.size());
    // An empty container takes the value alone; else it goes first of several.
    const std::size_t next = tail.find_first_not_of(" \t\r\n");
    if (next != std::string_view::npos && tail[next] != ']' && tail[next] != '}') out += ',';
    out += tail;
    if (out.size() > max_bytes_) out.resize(max_bytes_);
    return out;
  }

 private:
  // Bytes kept back for what still follows a value in its request.
  static constexpr std::size_t kReserve = 256;

  // The tables read best in rows of a kind.
  // clang-format off
  // The daemon's methods, and two it does not have.
  static constexpr std::array<std::string_view, 17> kMethods = {
      "generate", "cancel", "stats", "health", "config.get", "config.set", "tiers",
      "cache.lookup", "cache.warm", "cache.pin", "cache.unpin", "cache.tree", "cache.flush",
      "shutdown", "help",
      "nope", ""};
  // Every parameter some method takes, and one none does.
  static constexpr std::array<std::string_view, 18> kKeys = {
      "prompt", "tokens", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop",
      "priority", "n", "stream", "cache_salt", "eviction", "id", "tier", "token_budget",
      "log_level",
      "unknown"};
  // Numbers at the edges of what the parameter parsers check: plain, float
  // (below the smallest float, over the largest, just over 1), and integer.
  static constexpr std::array<std::string_view, 22> kNumbers = {
      "0", "1", "-1", "2", "1.5", "-0", "-0.0", "64",
      "1e-300", "-1e-300", "1e-46", "1e39", "1e400", "3.4028235e38", "1.0000001", "0.9999999",
      "2147483647", "2147483648", "-2147483649",
      "9223372036854775807", "-9223372036854775808", "18446744073709551615"};
  static constexpr std::array<std::string_view, 8> kScalars = {
      "true", "false", "null", "\"\"", "\"x\"", "\"2.0\"", "\"l1\"", "\"window:4\""};
  // clang-format on

  // Bytes `out` may still grow by, with `later` bytes to come after it.
  std::size_t left(const std::string& out, std::size_t later = 0) const {
    const std::size_t used = out.size() + later + kReserve;
    return used >= max_bytes_ ? 0 : max_bytes_ - used;
  }

  void line(std::string& out) {
    switch (rng_.below(16)) {
      case 0:  // nesting at the top level, not a request at all
        nested(out, 0);
        return;
      case 1:  // a batch, which kvtierd refuses
        out += '[';
        request(out, 1);
        out += ',';
        request(out, 1);
        out += ']';
        return;
      default:
        request(out, 0);
    }
  }

  // A request object; `level`: the containers open around it.
  void request(std::string& out, int level) {
    std::array<int, 4> members = {0, 1, 2, 3};  // jsonrpc, id, method, params
    for (std::size_t i = members.size() - 1; i > 0; --i) {
      std::swap(members[i], members[rng_.below(i + 1)]);
    }
    out += '{';
    bool first = true;
    for (const int m : members) {
      if (rng_.one_in(m == 3 ? 5 : 12)) continue;  // missing
      for (int times = rng_.one_in(16) ? 2 : 1; times > 0; --times) {
        if (!first) out += ',';
        first = false;
        member(out, m, level + 1);
      }
    }
    out += '}';
  }

  void member(std::string& out, int which, int level) {
    switch (which) {
      case 0:
        out += "\"jsonrpc\":";
        if (rng_.one_in(8)) return value(out, level);
        out += "\"2.0\"";
        return;
      case 1:
        out += "\"id\":";
        if (rng_.one_in(4)) return value(out, level);
        out += rng_.one_in(2) ? kNumbers[rng_.below(kNumbers.size())] : "\"a1\"";
        return;
      case 2:
        out += "\"method\":";
        if (rng_.one_in(8)) return value(out, level);
        out += '"';
        out += kMethods[rng_.below(kMethods.size())];
        out += '"';
        return;
      default:
        out += "\"params\":";
        params(out, level);
    }
  }

  void params(std::string& out, int level) {
    switch (rng_.below(8)) {
      case 0:
        out += "{}";
        return;
      case 1:
        out += "[]";
        return;
      case 2:
        return value(out, level);
      default:
        break;
    }
    out += '{';
    for (std::size_t i = 0, n = rng_.below(5); i < n; ++i) {
      if (i > 0) out += ',';
      const std::string_view key = kKeys[rng_.below(kKeys.size())];
      out += '"';
      out += key;
      out += "\":";
      param_value(out, key, level + 1);
    }
    out += '}';
  }

  // A value of the type `key` wants, or, a third of the time, any value.
  void param_value(std::string& out, std::string_view key, int level) {
    if (rng_.one_in(3)) return value(out, level);
    if (key == "prompt" || key == "cache_salt" || key == "eviction" || key == "tier" ||
        key == "log_level") {
      if (rng_.one_in(2)) return bracket_string(out);
      out += kScalars[rng_.below(kScalars.size())];
    } else if (key == "tokens" || key == "stop") {
      out += '[';
      for (std::size_t i = 0, n = rng_.below(4); i < n; ++i) {
        if (i > 0) out += ',';
        out += key == "stop" ? "\"\\n\"" : kNumbers[rng_.below(kNumbers.size())];
      }
      out += ']';
    } else if (key == "stream") {
      out += rng_.one_in(2) ? "true" : "false";
    } else {
      out += kNumbers[rng_.below(kNumbers.size())];
    }
  }

  void value(std::string& out, int level) {
    switch (rng_.below(6)) {
      case 0:
        out += rng_.one_in(2) ? kNumbers[rng_.below(kNumbers.size())]
                              : kScalars[rng_.below(kScalars.size())];
        return;
      case 1:
        return bracket_string(out);
      default:
        return nested(out, level);
    }
  }

  // A string of brackets, quotes and backslashes, escaped: valid JSON that
  // nests nothing, however many '[' it holds.
  void bracket_string(std::string& out) {
    static constexpr std::array<std::string_view, 8> kPieces = {"[",    "]",    "{", "}",
                                                                "\\\"", "\\\\", ":", ","};
    out += '"';
    for (std::size_t i = 0, n = rng_.log_uniform(left(out) / 4 + 1); i < n; ++i) {
      out += kPieces[rng_.one_in(2) ? 0 : rng_.below(kPieces.size())];
    }
    out += '"';
  }

  // Arrays and objects nested inside each other, taking at most half the
  // bytes left; `level`: the containers open around the value, so that the
  // depth can be put at kMaxJsonDepth for the whole document.
  void nested(std::string& out, int level, std::size_t later = 0) {
    enum Shape { kArrays, kObjects, kMixed, kSiblings };
    const auto shape = static_cast<Shape>(rng_.below(4));
    // Bytes per level, at most: "[" "]"; "{\"a\":" "}"; with a sibling
    // "{\"{\":0,\"a\":" "}".
    const std::size_t per_level = shape == kArrays ? 2 : shape == kSiblings ? 12 : 6;
    const std::size_t most = left(out, later) / 2 / per_level;
    if (most == 0) {
      out += '0';
      return;
    }
    std::size_t depth = rng_.log_uniform(most);
    if (rng_.one_in(3)) {
      // At the limit, one under, one over: where an off-by-one would show.
      const long long want =
          static_cast<long long>(kMaxJsonDepth) - level + static_cast<long long>(rng_.below(3)) - 1;
      depth =
          static_cast<std::size_t>(std::clamp<long long>(want, 1, static_cast<long long>(most)));
    }
    std::string closers;  // in opening order
    closers.reserve(depth);
    for (std::size_t i = 0; i < depth; ++i) {
      const bool array = shape == kArrays || (shape != kObjects && rng_.one_in(2));
      if (array) {
        out += '[';
        if (shape == kSiblings && rng_.one_in(2)) out += "\"[\",";
        closers += ']';
      } else {
        out += shape == kSiblings && rng_.one_in(2) ? "{\"{\":0,\"a\":" : "{\"a\":";
        closers += '}';
      }
    }
    // An object needs a value; an array may be empty.
    if (closers.back() == '}' || rng_.one_in(2)) out += kScalars[rng_.below(kScalars.size())];
    // Now and then cut short: the outermost closers never come.
    const std::size_t missing = rng_.one_in(10) ? rng_.below(closers.size() + 1) : 0;
    for (std::size_t i = closers.size(); i > missing; --i) out += closers[i - 1];
  }

  ProtocolFuzzRng rng_;
  std::size_t max_bytes_;
};

}  // namespace kvtier::wire
