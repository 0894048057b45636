#include "engine/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

namespace kvtier {
namespace {

using tokenizer_detail::utf8_append;
using tokenizer_detail::utf8_decode;

// ---------------------------------------------------------------------------
// Unicode classification (see bpe_char_classify in the header for coverage).

struct CodePointRange {
  char32_t lo, hi;  // inclusive
};

// Unicode White_Space, which is what \s means in the `regex` module GPT-2 used.
constexpr CodePointRange kSpaceRanges[] = {
    {0x0009, 0x000D}, {0x0020, 0x0020}, {0x0085, 0x0085}, {0x00A0, 0x00A0}, {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};

// \p{L} over the blocks the header lists, sorted and disjoint.
constexpr CodePointRange kLetterRanges[] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00AA, 0x00AA},   {0x00B5, 0x00B5},
    {0x00BA, 0x00BA},   {0x00C0, 0x00D6},   {0x00D8, 0x00F6},   {0x00F8, 0x02C1},
    {0x02C6, 0x02D1},   {0x02E0, 0x02E4},   {0x02EC, 0x02EC},   {0x02EE, 0x02EE},
    {0x0370, 0x0374},   {0x0376, 0x0377},   {0x037A, 0x037D},   {0x037F, 0x037F},
    {0x0386, 0x0386},   {0x0388, 0x038A},   {0x038C, 0x038C},   {0x038E, 0x03A1},
    {0x03A3, 0x03F5},   {0x03F7, 0x0481},   {0x048A, 0x052F},   {0x0531, 0x0556},
    {0x0559, 0x0559},   {0x0560, 0x0588},   {0x05D0, 0x05EA},   {0x05EF, 0x05F2},
    {0x0620, 0x064A},   {0x066E, 0x066F},   {0x0671, 0x06D3},   {0x06D5, 0x06D5},
    {0x06E5, 0x06E6},   {0x06EE, 0x06EF},   {0x06FA, 0x06FC},   {0x06FF, 0x06FF},
    {0x0E01, 0x0E30},   {0x0E32, 0x0E33},   {0x0E40, 0x0E46},   {0x10A0, 0x10C5},
    {0x10C7, 0x10C7},   {0x10CD, 0x10CD},   {0x10D0, 0x10FA},   {0x10FC, 0x10FF},
    {0x1100, 0x11FF},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2071, 0x2071},   {0x207F, 0x207F},   {0x2090, 0x209C},   {0x2102, 0x2102},
    {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},
    {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},
    {0x212F, 0x2139},   {0x213C, 0x213F},   {0x2145, 0x2149},   {0x214E, 0x214E},
    {0x2183, 0x2184},   {0x3005, 0x3006},   {0x3031, 0x3035},   {0x303B, 0x303C},
    {0x3041, 0x3096},   {0x309D, 0x309F},   {0x30A1, 0x30FA},   {0x30FC, 0x30FF},
    {0x3105, 0x312F},   {0x3131, 0x318E},   {0x31A0, 0x31BF},   {0x31F0, 0x31FF},
    {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xF900, 0xFA6D},
    {0xFA70, 0xFAD9},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0xFF66, 0xFFBE},
    {0xFFC2, 0xFFC7},   {0xFFCA, 0xFFCF},   {0xFFD2, 0xFFD7},   {0xFFDA, 0xFFDC},
    {0x20000, 0x2A6DF}, {0x2A700, 0x2B81D}, {0x2B820, 0x2CEAD}, {0x2CEB0, 0x2EBE0},
    {0x2EBF0, 0x2EE5D}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A},
};
// \p{N}: every \p{Nd} range, plus \p{Nl} and \p{No} in the blocks the header lists.
constexpr CodePointRange kNumberRanges[] = {
    {0x0030, 0x0039},   {0x00B2, 0x00B3},   {0x00B9, 0x00B9},   {0x00BC, 0x00BE},
    {0x0660, 0x0669},   {0x06F0, 0x06F9},   {0x07C0, 0x07C9},   {0x0966, 0x096F},
    {0x09E6, 0x09EF},   {0x0A66, 0x0A6F},   {0x0AE6, 0x0AEF},   {0x0B66, 0x0B6F},
    {0x0BE6, 0x0BEF},   {0x0C66, 0x0C6F},   {0x0CE6, 0x0CEF},   {0x0D66, 0x0D6F},
    {0x0DE6, 0x0DEF},   {0x0E50, 0x0E59},   {0x0ED0, 0x0ED9},   {0x0F20, 0x0F29},
    {0x1040, 0x1049},   {0x1090, 0x1099},   {0x17E0, 0x17E9},   {0x1810, 0x1819},
    {0x1946, 0x194F},   {0x19D0, 0x19D9},   {0x1A80, 0x1A89},   {0x1A90, 0x1A99},
    {0x1B50, 0x1B59},   {0x1BB0, 0x1BB9},   {0x1C40, 0x1C49},   {0x1C50, 0x1C59},
    {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2150, 0x2182},
    {0x2185, 0x2189},   {0x2460, 0x249B},   {0x24EA, 0x24FF},   {0x2776, 0x2793},
    {0x3007, 0x3007},   {0x3021, 0x3029},   {0x3038, 0x303A},   {0x3192, 0x3195},
    {0x3220, 0x3229},   {0x3248, 0x324F},   {0x3251, 0x325F},   {0x3280, 0x3289},
    {0x32B1, 0x32BF},   {0xA620, 0xA629},   {0xA8D0, 0xA8D9},   {0xA900, 0xA909},
    {0xA9D0, 0xA9D9},   {0xA9F0, 0xA9F9},   {0xAA50, 0xAA59},   {0xABF0, 0xABF9},
    {0xFF10, 0xFF19},   {0x104A0, 0x104A9}, {0x10D30, 0x10D39}, {0x10D40, 0x10D49},
    {0x11066, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9},
    {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659},
    {0x116C0, 0x116C9}, {0x116D0, 0x116E3}, {0x11730, 0x11739}, {0x118E0, 0x118E9},
    {0x11950, 0x11959}, {0x11BF0, 0x11BF9}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x11DE0, 0x11DE9}, {0x11F50, 0x11F59}, {0x16130, 0x16139},
    {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16D70, 0x16D79},
    {0x1CCF0, 0x1CCF9}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}, {0x1E950, 0x1E959}, {0x1FBF0, 0x1FBF9},
};

bool in_ranges(std::span<const CodePointRange> ranges, char32_t cp) {
  // First range whose end is at or past cp; cp is in it if it starts by cp.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                             [](const CodePointRange& r, char32_t c) { return r.hi < c; });
  return it != ranges.end() && it->lo <= cp;
}

// ---------------------------------------------------------------------------
// GPT-2's byte alphabet: each byte as one printable character.

constexpr bool byte_prints_as_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<char32_t, 256> char_of_byte{};
  // The alphabet is U+0021..U+0143, so a flat table inverts it; -1 = not in it.
  static constexpr char32_t kMaxChar = 0x100 + 68;
  std::array<int, kMaxChar> byte_of_char{};

  constexpr ByteAlphabet() {
    byte_of_char.fill(-1);
    char32_t next_extra = 0x100;  // non-printable bytes, in byte order
    for (int b = 0; b < 256; ++b) {
      const char32_t c = byte_prints_as_itself(b) ? static_cast<char32_t>(b) : next_extra++;
      char_of_byte[b] = c;
      byte_of_char[c] = b;
    }
  }
};
constexpr ByteAlphabet kAlphabet;

// A token as encoder.json and vocab.bpe spell it -> its raw bytes. Fails on a
// character outside the alphabet.
std::expected<std::string, std::string> alphabet_to_bytes(std::string_view spelled) {
  std::string bytes;
  bytes.reserve(spelled.size());
  for (std::size_t i = 0; i < spelled.size();) {
    const auto ch = utf8_decode(spelled, i);
    if (ch.length == 0) return std::unexpected("invalid UTF-8");
    if (ch.code_point >= ByteAlphabet::kMaxChar || kAlphabet.byte_of_char[ch.code_point] < 0) {
      return std::unexpected(tokenizer_detail::code_point_describe(ch.code_point) +
                             " is not in GPT-2's byte alphabet");
    }
    bytes += static_cast<char>(kAlphabet.byte_of_char[ch.code_point]);
    i += ch.length;
  }
  return bytes;
}

std::string bytes_to_alphabet(std::string_view bytes) {
  std::string spelled;
  for (const char b : bytes) {
    utf8_append(kAlphabet.char_of_byte[static_cast<unsigned char>(b)], spelled);
  }
  return spelled;
}

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

}  // namespace

BpeCharClass bpe_char_classify(char32_t cp) {
  if (cp < 0x80) {  // ASCII: the hot path
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return BpeCharClass::kLetter;
    if (cp >= '0' && cp <= '9') return BpeCharClass::kNumber;
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return BpeCharClass::kSpace;
    return BpeCharClass::kOther;
  }
  if (in_ranges(kLetterRanges, cp)) return BpeCharClass::kLetter;
  if (in_ranges(kNumberRanges, cp)) return BpeCharClass::kNumber;
  if (in_ranges(kSpaceRanges, cp)) return BpeCharClass::kSpace;
  return BpeCharClass::kOther;
}

std::vector<std::string_view> bpe_pretokenize(std::string_view text) {
  // Decode once; the matcher below then walks characters by index.
  // Character i spans bytes [begin(i), chars[i].end).
  struct Char {
    BpeCharClass cls;
    bool is_space_char;  // U+0020 exactly: the regex's optional prefix " ?"
    std::size_t end;
  };
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (std::size_t off = 0; off < text.size();) {
    const auto ch = utf8_decode(text, off);
    const std::size_t len = ch.length == 0 ? 1 : ch.length;
    const BpeCharClass cls =
        ch.length == 0 ? BpeCharClass::kOther : bpe_char_classify(ch.code_point);
    off += len;
    chars.push_back({cls, ch.length == 1 && ch.code_point == ' ', off});
  }
  const std::size_t n = chars.size();
  const auto begin = [&](std::size_t i) { return i == 0 ? std::size_t{0} : chars[i - 1].end; };
  const auto cls_at = [&](std::size_t i) { return chars[i].cls; };
  // Index past the run of class `cls` starting at i.
  const auto run_end = [&](std::size_t i, BpeCharClass cls) {
    while (i < n && chars[i].cls == cls) ++i;
    return i;
  };

  std::vector<std::string_view> pieces;
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i;  // the piece will be characters [i, j)
    const std::string_view rest = text.substr(begin(i));
    // 's|'t|'re|'ve|'m|'ll|'d (ASCII, case-sensitive)
    if (rest.size() >= 2 && rest[0] == '\'') {
      if (rest[1] == 's' || rest[1] == 't' || rest[1] == 'm' || rest[1] == 'd') {
        j = i + 2;
      } else if (rest.starts_with("'re") || rest.starts_with("'ve") || rest.starts_with("'ll")) {
        j = i + 3;
      }
    }
    if (j == i) {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one of the three runs,
      // optionally after a single space. Whitespace never starts a run, so the
      // class of the first non-prefix character picks the alternative.
      const std::size_t start = (chars[i].is_space_char && i + 1 < n) ? i + 1 : i;
      const BpeCharClass cls = cls_at(start);
      if (cls != BpeCharClass::kSpace) j = run_end(start, cls);
    }
    if (j == i) {
      // `\s+(?!\S)|\s+`: a whitespace run. When text follows, the first
      // alternative backtracks one character so that the last space can
      // prefix the next word; a lone whitespace character before text falls
      // through to the second alternative and stands alone.
      j = run_end(i, BpeCharClass::kSpace);
      if (j < n && j - i >= 2) --j;
    }
    pieces.push_back(text.substr(begin(i), chars[j - 1].end - begin(i)));
    i = j;
  }
  return pieces;
}

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::load(
    const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
  auto encoder_text = tokenizer_detail::file_read(encoder_json);
  if (!encoder_text) return std::unexpected(std::move(encoder_text.error()));
  auto merges_text = tokenizer_detail::file_read(vocab_bpe);
  if (!merges_text) return std::unexpected(std::move(merges_text.error()));
  return parse(*encoder_text, encoder_json.string(), *merges_text, vocab_bpe.string());
}

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::parse(
    std::string_view encoder_json_text, std::string_view encoder_name,
    std::string_view vocab_bpe_text, std::string_view vocab_bpe_name) {
  const std::string enc_where(encoder_name);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(encoder_json_text);
  } catch (const nlohmann::json::exception& e) {
    return std::unexpected(enc_where + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object() || doc.empty()) {
    return std::unexpected(enc_where + ": expected a non-empty object {\"token\": id, ...}");
  }

  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  if (auto ok = tok->read_vocabulary(doc, enc_where); !ok) return std::unexpected(ok.error());
  if (auto ok = tok->read_merges(vocab_bpe_text, vocab_bpe_name, enc_where); !ok)
    return std::unexpected(ok.error());
  if (const int eot = tok->token_id("<|endoftext|>"); eot >= 0) tok->end_of_text_ = eot;
  return tok;
}

std::expected<void, std::string> BpeTokenizer::read_vocabulary(const nlohmann::json& doc,
                                                               const std::string& enc_where) {
  const std::size_t vocab_size = doc.size();
  id_to_bytes_.resize(vocab_size);
  std::vector<bool> id_seen(vocab_size, false);
  id_by_bytes_.reserve(vocab_size);
  for (const auto& [spelled, value] : doc.items()) {
    const std::string entry = enc_where + ": token " + in_quotes(spelled);
    if (!value.is_number_integer()) return std::unexpected(entry + ": id is not an integer");
    const auto id = value.get<std::int64_t>();
    if (id < 0 || static_cast<std::uint64_t>(id) >= vocab_size) {
      return std::unexpected(entry + ": id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(vocab_size) + "), the range " +
                             std::to_string(vocab_size) + " tokens must number");
    }
    if (id_seen[id]) {
      return std::unexpected(entry + ": id " + std::to_string(id) + " is used twice");
    }
    id_seen[id] = true;
    auto bytes = alphabet_to_bytes(spelled);
    if (!bytes || bytes->empty()) {
      return std::unexpected(entry + ": " + (bytes ? "empty token" : bytes.error()));
    }
    if (!id_by_bytes_.emplace(*bytes, static_cast<int>(id)).second) {
      return std::unexpected(entry + ": spells the same bytes as another token");
    }
    id_to_bytes_[id] = std::move(*bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const int id = token_id(std::string_view(&byte, 1));
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return std::unexpected(enc_where + ": no token for byte " + hex + " (" +
                             in_quotes(bytes_to_alphabet(std::string(1, static_cast<char>(b)))) +
                             "); byte-level BPE needs all 256");
    }
    byte_ids_[b] = id;
  }

  return {};
}

std::expected<void, std::string> BpeTokenizer::read_merges(std::string_view vocab_bpe_text,
                                                           std::string_view vocab_bpe_name,
                                                           const std::string& enc_where) {
  const std::size_t vocab_size = id_to_bytes_.size();
  // vocab.bpe: produced[id] marks the tokens merges may use so far: the bytes,
  // then each merge's result as its line is read.
  const std::string bpe_where(vocab_bpe_name);
  std::vector<bool> produced(vocab_size, false);
  for (const int id : byte_ids_) produced[id] = true;
  int rank = 0;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < vocab_bpe_text.size();) {
    std::size_t nl = vocab_bpe_text.find('\n', pos);
    if (nl == std::string_view::npos) nl = vocab_bpe_text.size();
    std::string_view line = vocab_bpe_text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;

    const std::string where = bpe_where + ":" + std::to_string(line_no);
    const std::size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return std::unexpected(where + ": expected two symbols separated by one space, got " +
                             in_quotes(line));
    }
    int side_ids[2];
    const std::string_view sides[2] = {line.substr(0, space), line.substr(space + 1)};
    for (int s = 0; s < 2; ++s) {
      auto bytes = alphabet_to_bytes(sides[s]);
      if (!bytes) return std::unexpected(where + ": " + in_quotes(sides[s]) + ": " + bytes.error());
      side_ids[s] = token_id(*bytes);
      if (side_ids[s] < 0 || !produced[side_ids[s]]) {
        return std::unexpected(where + ": unknown symbol " + in_quotes(sides[s]) +
                               ": neither a byte nor the result of an earlier merge");
      }
    }
    const std::string merged = id_to_bytes_[side_ids[0]] + id_to_bytes_[side_ids[1]];
    const int merged_id = token_id(merged);
    if (merged_id < 0) {
      return std::unexpected(where + ": the merge's result " +
                             in_quotes(bytes_to_alphabet(merged)) + " is not in " + enc_where);
    }
    if (produced[merged_id]) {
      return std::unexpected(where + ": " + in_quotes(bytes_to_alphabet(merged)) +
                             " is already a byte or an earlier merge's result");
    }
    produced[merged_id] = true;
    merges_.emplace(pair_key(side_ids[0], side_ids[1]), Merge{rank++, merged_id});
  }
  return {};
}

int BpeTokenizer::token_id(std::string_view bytes) const {
  const auto it = id_by_bytes_.find(bytes);
  return it == id_by_bytes_.end() ? -1 : it->second;
}

void BpeTokenizer::merge_piece(std::string_view piece, std::vector<int>& out) const {
  // The symbols form a linked list over the piece's bytes; symbol i keeps its
  // slot when it absorbs its right neighbour, whose slot dies (id -1).
  struct Symbol {
    int id;
    int prev;
    int next;  // -1 at the ends
  };
  const int n = static_cast<int>(piece.size());
  std::vector<Symbol> syms(n);
  for (int i = 0; i < n; ++i) {
    syms[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }

  // Candidate merges, lowest rank first and, within a rank, leftmost first:
  // the order the reference loop (merge every occurrence of the best pair,
  // left to right, then look again) applies them in. That holds because a
  // merge's result only takes part in later-ranked merges (checked at load),
  // so a new pair never outranks the one just merged. Entries go stale when
  // either side changes; they are checked when popped.
  struct Candidate {
    int rank;
    int left;  // slot of the left symbol
    int left_id;
    int right_id;
    int merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    const int right = syms[left].next;
    const auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
    if (it != merges_.end())
      queue.push({it->second.rank, left, syms[left].id, syms[right].id, it->second.merged_id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = syms[c.left];
    // A slot's right neighbour changes only when the slot absorbs it, which
    // changes the slot's id, so comparing both ids catches every stale entry.
    if (left.id != c.left_id || left.next < 0 || syms[left.next].id != c.right_id) continue;
    Symbol& right = syms[left.next];
    left.id = c.merged_id;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.left;
    right.id = -1;
    consider(left.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0 && i < n; i = syms[i].next) out.push_back(syms[i].id);
}

std::expected<std::vector<int>, std::string> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<int> piece_ids;
  for (const std::string_view piece : bpe_pretokenize(text)) {
    const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
    if (cacheable) {
      std::lock_guard lock(cache_mu_);
      if (const auto it = cache_.find(piece); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    piece_ids.clear();
    merge_piece(piece, piece_ids);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    if (cacheable) {
      std::lock_guard lock(cache_mu_);
      if (cache_.size() >= kCacheMaxEntries) cache_.clear();
      cache_.emplace(piece, piece_ids);
    }
  }
  return ids;
}

std::string BpeTokenizer::decode(std::span<const int> tokens) const {
  std::string out;
  out.reserve(tokens.size() * 4);
  for (const int id : tokens) {
    assert(id >= 0 && id < vocab_size());
    if (id < 0 || id >= vocab_size()) continue;
    out += id_to_bytes_[id];
  }
  return out;
}

}  // namespace kvtier
