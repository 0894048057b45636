// Model::load picks the family a folder's config.json names; check_chunks is
// the batch check every family's forward shares.
#include "engine/model/model.h"

#include <unordered_set>

#include "engine/model/gpt2/gpt2_model.h"
#include "engine/model/model_folder.h"
#include "engine/model/nanochat/nanochat_model.h"

namespace kvtier {

std::expected<std::unique_ptr<Model>, std::string> Model::load(const std::filesystem::path& dir) {
  if (is_nanochat(dir / "config.json")) {
    auto model = NanochatModel::load(dir);
    if (!model) return std::unexpected(std::move(model.error()));
    return std::make_unique<NanochatModel>(std::move(*model));
  }
  auto model = Gpt2Model::load(dir);
  if (!model) return std::unexpected(std::move(model.error()));
  return std::make_unique<Gpt2Model>(std::move(*model));
}

std::expected<void, std::string> check_chunks(std::span<const Model::Chunk> chunks,
                                              const tiers::BlockPool& pool, int context,
                                              int vocab_size, bool rotary,
                                              const std::function<KvLayout(int)>& layout) {
  if (chunks.empty()) return std::unexpected("forward: empty batch");
  std::unordered_set<const SequenceKv*> seen;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Model::Chunk& c = chunks[i];
    if (c.kv == nullptr || c.tokens.empty())
      return std::unexpected("forward: chunk " + std::to_string(i) +
                             " has no sequence or no tokens");
    if (!seen.insert(c.kv).second)
      return std::unexpected("forward: chunk " + std::to_string(i) + " repeats a sequence");
    const long end = static_cast<long>(c.kv->length()) + static_cast<long>(c.tokens.size());
    if (end > context)
      return std::unexpected("forward: chunk " + std::to_string(i) + " would reach position " +
                             std::to_string(end) + " but the model's context is " +
                             std::to_string(context) + " tokens");
    if (end > c.kv->capacity())
      return std::unexpected("forward: chunk " + std::to_string(i) + " has pages for " +
                             std::to_string(c.kv->capacity()) + " positions, needs " +
                             std::to_string(end));
    if (c.kv->length() < c.kv->capacity() && c.kv->is_evicted(c.kv->length() / c.kv->page_size()))
      return std::unexpected("forward: chunk " + std::to_string(i) +
                             " would write into an evicted page");
    if (c.rotary_offset != 0 && !rotary)
      return std::unexpected("forward: chunk " + std::to_string(i) +
                             " has a rotary offset but this model's positions are not rotary");
    if (c.rotary_offset < 0 || c.rotary_offset > c.kv->length())
      return std::unexpected("forward: chunk " + std::to_string(i) + " has rotary offset " +
                             std::to_string(c.rotary_offset) + " outside [0, " +
                             std::to_string(c.kv->length()) + "]");
    if (c.kv->page_size() != chunks[0].kv->page_size())
      return std::unexpected("forward: sequences with different page sizes in one batch");
    for (int t : c.tokens)
      if (t < 0 || t >= vocab_size)
        return std::unexpected("forward: token " + std::to_string(t) +
                               " outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
  }
  if (pool.block_bytes() < layout(chunks[0].kv->page_size()).block_bytes())
    return std::unexpected("forward: the pool's blocks are smaller than the KV layout needs");
  return {};
}

}  // namespace kvtier
