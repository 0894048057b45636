#include "wire/prompt.h"

#include <utility>

namespace kvtier::wire {

std::expected<std::vector<int>, std::string> prompt_tokens(const Tokenizer& tokenizer,
                                                           Prompt prompt) {
  if (auto* ids = std::get_if<std::vector<int>>(&prompt)) return std::move(*ids);
  if (auto* rendered = std::get_if<PromptPieces>(&prompt)) {
    std::vector<int> tokens;
    for (const auto& piece : rendered->pieces) {
      if (const int* id = std::get_if<int>(&piece)) {
        tokens.push_back(*id);
        continue;
      }
      auto text = tokenizer.encode(std::get<std::string>(piece));
      if (!text) return std::unexpected("cannot encode the prompt: " + text.error());
      tokens.insert(tokens.end(), text->begin(), text->end());
    }
    return tokens;
  }
  auto tokens = tokenizer.encode(std::get<std::string>(prompt));
  if (!tokens) return std::unexpected("cannot encode the prompt: " + tokens.error());
  if (const auto begin = tokenizer.begin_of_text()) tokens->insert(tokens->begin(), *begin);
  return std::move(*tokens);
}

std::expected<RequestParams, std::string> request_params(const Tokenizer& tokenizer, Prompt prompt,
                                                         RequestOptions options) {
  auto tokens = prompt_tokens(tokenizer, std::move(prompt));
  if (!tokens) return std::unexpected(std::move(tokens.error()));
  return RequestParams{std::move(options), std::move(*tokens)};
}

}  // namespace kvtier::wire
