#include "engine/model/tiktoken_tokenizer.h"

#include <openssl/evp.h>

#include <charconv>
#include <functional>

#include "engine/model/bpe_merge.h"

namespace kvtier {
namespace {

// Strict base64 (RFC 4648, padded): OpenSSL decodes, the checks around it
// refuse what it would let through (a length that is not a multiple of 4,
// padding anywhere but the end).
std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  const std::size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  if (text.find('=') < text.size() - padding) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0 || static_cast<std::size_t>(n) != out.size()) return std::nullopt;
  out.resize(out.size() - padding);
  return out;
}

}  // namespace

std::expected<std::unique_ptr<TiktokenTokenizer>, std::string> TiktokenTokenizer::load(
    const std::filesystem::path& ranks_file, std::string_view pattern,
    std::span<const SpecialToken> special_tokens) {
  auto text = tokenizer_detail::file_read(ranks_file);
  if (!text) return std::unexpected(std::move(text.error()));
  return parse(*text, ranks_file.string(), pattern, special_tokens);
}

std::expected<std::unique_ptr<TiktokenTokenizer>, std::string> TiktokenTokenizer::parse(
    std::string_view ranks_text, std::string_view ranks_name, std::string_view pattern,
    std::span<const SpecialToken> special_tokens) {
  std::unique_ptr<TiktokenTokenizer> tok(new TiktokenTokenizer());
  auto pretokenizer = BpePretokenizer::compile(pattern);
  if (!pretokenizer) return std::unexpected("tokenizer pattern: " + pretokenizer.error());
  tok->pretokenizer_ = std::move(*pretokenizer);
  if (auto ok = tok->read_ranks(ranks_text, std::string(ranks_name)); !ok)
    return std::unexpected(ok.error());
  if (auto ok = tok->add_specials(special_tokens); !ok) return std::unexpected(ok.error());
  return tok;
}

std::expected<void, std::string> TiktokenTokenizer::read_ranks(std::string_view text,
                                                               const std::string& where) {
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) continue;

    const std::string at = where + ":" + std::to_string(line_no);
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      return std::unexpected(at + ": expected \"<base64 token> <rank>\"");
    auto bytes = base64_decode(line.substr(0, space));
    if (!bytes || bytes->empty())
      return std::unexpected(at + ": the token is not padded base64 of one or more bytes");
    const std::string_view rank_text = line.substr(space + 1);
    long long rank = -1;
    const auto [end, ec] =
        std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size())
      return std::unexpected(at + ": the rank is not an integer");
    // Ids are ranks, so they must come 0, 1, 2, ...: a gap would leave an id
    // no text maps to, a repeat two tokens one id.
    if (rank != static_cast<long long>(bytes_of_rank_.size()))
      return std::unexpected(at + ": rank " + std::to_string(rank) + " where rank " +
                             std::to_string(bytes_of_rank_.size()) + " comes next");
    if (rank >= (1 << 24))
      return std::unexpected(at + ": more than 2^24 ranks, beyond any vocabulary served here");
    if (!rank_by_bytes_.emplace(*bytes, static_cast<int>(rank)).second)
      return std::unexpected(at + ": the same bytes as rank " +
                             std::to_string(rank_by_bytes_.find(*bytes)->second));
    bytes_of_rank_.push_back(std::move(*bytes));
  }
  for (int b = 0; b < 256; ++b) {
    if (rank_of(std::string(1, static_cast<char>(b))) < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return std::unexpected(where + ": no token for byte " + hex +
                             "; byte-level BPE needs all 256");
    }
  }
  vocab_size_ = rank_count();
  return {};
}

std::expected<void, std::string> TiktokenTokenizer::add_specials(
    std::span<const SpecialToken> special_tokens) {
  for (const SpecialToken& special : special_tokens) {
    const std::string what = "special token \"" + special.text + "\"";
    if (special.text.empty()) return std::unexpected("a special token with no text");
    if (special.id < rank_count() || special.id >= (1 << 24))
      return std::unexpected(what + ": id " + std::to_string(special.id) +
                             " is not past the ranks (" + std::to_string(rank_count()) +
                             ") and below 2^24");
    for (const SpecialToken& other : specials_) {
      if (other.id == special.id || other.text == special.text)
        return std::unexpected(what + " (id " + std::to_string(special.id) + ") repeats \"" +
                               other.text + "\" (id " + std::to_string(other.id) + ")");
    }
    specials_.push_back(special);
    vocab_size_ = std::max(vocab_size_, special.id + 1);
  }
  end_of_text_ = special_token("<|endoftext|>");
  if (!end_of_text_) end_of_text_ = special_token("<|bos|>");
  return {};
}

std::optional<int> TiktokenTokenizer::special_token(std::string_view text) const {
  return special_token_id(specials_, text);
}

int TiktokenTokenizer::rank_of(std::string_view bytes) const {
  const auto it = rank_by_bytes_.find(bytes);
  return it == rank_by_bytes_.end() ? -1 : it->second;
}

void TiktokenTokenizer::merge_piece(std::string_view piece, std::vector<int>& out) const {
  if (const int whole = rank_of(piece); whole >= 0) {
    out.push_back(whole);
    return;
  }
  // A pair's rank is the rank of the token its bytes make, which is also
  // that token's id. Every byte is a token (checked at load).
  bpe_merge(
      piece,
      [this](unsigned char byte) {
        return rank_of(std::string_view(reinterpret_cast<const char*>(&byte), 1));
      },
      [this](const PartView& pair) -> std::optional<PartJoin> {
        const int rank = rank_of(pair.bytes());
        if (rank < 0) return std::nullopt;
        return PartJoin{rank, rank};
      },
      out);
}

std::expected<std::vector<int>, std::string> TiktokenTokenizer::encode(
    std::string_view text) const {
  return cache_.encode(*pretokenizer_, text, [this](std::string_view piece, std::vector<int>& out) {
    merge_piece(piece, out);
  });
}

std::string TiktokenTokenizer::decode(std::span<const int> tokens) const {
  std::string out;
  out.reserve(tokens.size() * 4);
  for (const int id : tokens) {
    if (id >= 0 && id < rank_count()) {
      out += bytes_of_rank_[id];
      continue;
    }
    for (const SpecialToken& special : specials_)
      if (special.id == id) out += special.text;
  }
  return out;
}

}  // namespace kvtier
