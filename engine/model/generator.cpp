#include "engine/model/generator.h"

#include <algorithm>
#include <optional>

#include "engine/model/tool_use.h"

namespace kvtier {

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContext:
      return "context";
  }
  return "unknown";
}

std::expected<void, std::string> validate_request(const ModelConfig& config,
                                                  const Tokenizer* tokenizer,
                                                  std::span<const int> prompt, int max_tokens,
                                                  const SamplingParams& sampling,
                                                  const std::vector<std::string>& stop,
                                                  std::span<const int> stop_token_ids) {
  if (prompt.empty()) return std::unexpected("the prompt is empty");
  if (static_cast<long>(prompt.size()) > config.block_size)
    return std::unexpected("the prompt has " + std::to_string(prompt.size()) +
                           " tokens but the model's context is " +
                           std::to_string(config.block_size));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= config.vocab_size)
      return std::unexpected("prompt token " + std::to_string(i) + " is " +
                             std::to_string(prompt[i]) + ", outside the vocabulary of " +
                             std::to_string(config.vocab_size));
  if (max_tokens < 1) return std::unexpected("max_tokens must be at least 1");
  if (auto ok = sampling.validate(); !ok) return ok;
  if (!stop.empty()) {
    if (tokenizer == nullptr) return std::unexpected("stop strings need a tokenizer");
    if (auto ok = validate_stop_strings(stop); !ok) return ok;
  }
  for (const int id : stop_token_ids)
    if (id < 0 || id >= config.vocab_size)
      return std::unexpected("stop token " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(config.vocab_size));
  return {};
}

bool is_stop_token(int token, const Tokenizer* tokenizer, bool ignore_eos,
                   std::span<const int> stop_token_ids) {
  if (tokenizer != nullptr && !ignore_eos && token == tokenizer->end_of_text()) return true;
  return std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end();
}

std::expected<Generation, std::string> generate(
    Model& model, tiers::BlockPool& pool, const Tokenizer* tokenizer, std::span<const int> prompt,
    const GenerateOptions& options, const std::function<void(std::string_view)>& on_text) {
  if (auto ok = validate_request(model.config(), tokenizer, prompt, options.max_tokens,
                                 options.sampling, options.stop, options.stop_token_ids);
      !ok)
    return std::unexpected(ok.error());
  if (options.prefill_chunk < 0) return std::unexpected("prefill_chunk must not be negative");
  if (options.page_size < 1) return std::unexpected("page_size must be at least 1");
  if (auto ok = options.eviction.validate(options.page_size); !ok)
    return std::unexpected(ok.error());
  if (auto ok = options.eviction.check_rotation(model.config()); !ok)
    return std::unexpected(ok.error());
  const KeyRotation rotation{model.rotary(), model.kv_layout(options.page_size)};

  const int context = model.config().block_size;
  const int V = model.config().vocab_size;
  SequenceKv kv(options.page_size);
  KvEvictor evictor(options.eviction, context, static_cast<int>(prompt.size()));
  Sampler sampler(options.sampling);
  std::optional<ToolUse> tools;
  if (options.tools && tokenizer != nullptr) tools = ToolUse::of(model.config().tokenizer);
  StopMatcher stops(options.stop);
  Generation out;
  std::size_t emitted = 0;  // bytes of out.text already given to on_text
  std::string error;

  // Feeds `tokens` through the model; leaves the last row's logits in `last`.
  std::span<const float> last;
  int previous = -1;  // the token fed last (Model::Chunk::previous_token)
  auto step = [&](std::span<const int> tokens) {
    if (!kv.reserve(pool, kv.length() + static_cast<int>(tokens.size()))) {
      error = "the KV pool has no free block for this sequence";
      return false;
    }
    out.peak_kv_blocks = std::max(out.peak_kv_blocks, kv.resident_blocks());
    const Model::Chunk chunk{&kv,
                             tokens,
                             false,
                             evictor.scores(),
                             previous,
                             evictor.scores_from(),
                             evictor.rotary_offset(kv)};
    auto logits = model.forward(std::span(&chunk, 1), pool);
    if (!logits) {
      error = logits.error();
      return false;
    }
    last = logits->subspan(logits->size() - V);
    previous = tokens.back();
    // No eviction inside the prompt: whole and chunked prefill stay equal.
    if (kv.length() >= static_cast<int>(prompt.size()))
      out.evicted_blocks += evictor.evict(kv, pool, &rotation);
    return true;
  };

  const int chunk = options.prefill_chunk > 0 ? options.prefill_chunk : context;
  bool ok = true;
  for (std::size_t begin = 0; ok && begin < prompt.size(); begin += chunk)
    ok = step(prompt.subspan(begin, std::min<std::size_t>(chunk, prompt.size() - begin)));

  // Hands on_text the bytes that can no longer turn into a stop string.
  auto flush = [&](std::size_t upto) {
    if (on_text && upto > emitted)
      on_text(std::string_view(out.text).substr(emitted, upto - emitted));
    emitted = std::max(emitted, upto);
  };

  while (ok) {
    std::optional<int> forced;
    if (tools) forced = tools->take_forced();
    const int token = forced ? *forced : sampler.sample(last);
    if (tools) tools->observe(token, *tokenizer);
    out.tokens.push_back(token);
    if (is_stop_token(token, tokenizer, options.ignore_eos, options.stop_token_ids)) {
      out.finish = FinishReason::kStop;  // the end of the text, which writes none
      break;
    }
    if (tokenizer != nullptr) {
      const std::string piece = tokenizer->decode(std::span(&token, 1));
      out.text += piece;
      if (auto at = stops.feed(piece)) {
        out.text.resize(*at);
        out.finish = FinishReason::kStop;
        break;
      }
      flush(out.text.size() - stops.pending_bytes());
    }
    if (static_cast<int>(out.tokens.size()) == options.max_tokens) {
      out.finish = FinishReason::kLength;
      break;
    }
    if (kv.length() == context) {  // the next token would have no position
      out.finish = FinishReason::kContext;
      break;
    }
    ok = step(std::span(&out.tokens.back(), 1));
  }
  if (ok) flush(out.text.size());
  kv.release(pool);
  if (!error.empty()) return std::unexpected(error);
  return out;
}

}  // namespace kvtier
