#include "daemon/http/generation.h"

#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "daemon/http/usage.h"
#include "wire/http/errors.h"
#include "wire/http/openai.h"

namespace kvtier::daemon::http {

using wire::http::dump;
using wire::http::error_object;
using wire::http::error_response;
using wire::http::Exchange;
using wire::http::GenerationSpec;
using wire::http::openai_finish_reason;
using wire::http::Response;
using wire::http::unix_now;

namespace {

using nlohmann::json;

// Drawn once per daemon process and put in every completion id: the
// engine numbers its requests from 1, so without it the daemons of a fleet
// (behind one router, one load balancer) and one daemon across restarts
// hand out the same ids, and a client that logs or keys by them mixes
// answers up. The engine's number stays in the id, for the daemon's logs.
const std::string& instance_tag() {
  static const std::string tag = [] {
    std::random_device device;
    char text[9];
    std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(device()));
    return std::string(text);
  }();
  return tag;
}

class Run : public std::enable_shared_from_this<Run> {
 public:
  Run(GenerationSpec spec, std::shared_ptr<Exchange> exchange, Context& context)
      : spec_(std::move(spec)),
        exchange_(std::move(exchange)),
        context_(context),
        created_(unix_now()),
        results_(spec_.prompts.size()),
        first_sent_(spec_.prompts.size() * spec_.params.n, false),
        offsets_(spec_.prompts.size() * spec_.params.n, 0) {}

  void start() {
    for (std::size_t p = 0; p < spec_.prompts.size(); ++p) {
      auto self = shared_from_this();
      EventSink sink = [self, p](EngineEvent event) {  // on the engine thread
        self->exchange_->post(
            [self, p, event = std::move(event)]() mutable { self->on_event(p, std::move(event)); });
      };
      auto id = context_.engine.submit(spec_.prompts[p], spec_.params, std::move(sink),
                                       exchange_->owner());
      if (!id) {
        cancel_all();
        finished_ = true;
        Response r =
            id.error() == EngineLoop::SubmitError::kTooManyPending
                ? error_response(429, "too many pending requests (max_pending); retry later")
                : error_response(503, "the daemon is shutting down");
        if (id.error() == EngineLoop::SubmitError::kTooManyPending)
          r.headers.emplace_back("Retry-After", "1");
        return exchange_->respond(std::move(r));
      }
      if (p == 0)
        id_ = (spec_.api == wire::http::Api::kChat ? "chatcmpl-" : "cmpl-") + instance_tag() + "-" +
              std::to_string(*id);
      ids_.push_back(*id);
      exchange_->track(*id);
    }
  }

 private:
  void on_event(std::size_t prompt, EngineEvent event) {
    if (finished_) return;
    const int choice = static_cast<int>(prompt) * spec_.params.n + event.sample;
    if (!event.final) {
      // With logprobs every token gets its chunk, text or not (a stop
      // string's first bytes are held back until they cannot be one).
      const bool logprobs = spec_.params.logprobs >= 0 && !event.logprobs.empty();
      if (spec_.stream && (!event.text.empty() || logprobs))
        chunk(choice, event.text, nullptr, event.logprobs);
      return;
    }
    exchange_->untrack(event.id);
    if (!event.result) return fail(event);
    if (spec_.stream) {
      for (std::size_t s = 0; s < event.result->samples.size(); ++s)
        chunk(static_cast<int>(prompt) * spec_.params.n + static_cast<int>(s), "",
              openai_finish_reason(event.result->samples[s].finish_reason), {});
    }
    results_[prompt] = std::move(*event.result);
    if (++done_ < spec_.prompts.size()) return;
    finished_ = true;
    std::vector<GenerateResult> all;
    for (auto& r : results_) all.push_back(std::move(*r));
    if (spec_.stream) {
      if (spec_.include_usage)
        exchange_->stream_event(
            dump(answer("chunk", {{"choices", json::array()}, {"usage", usage_json(all)}})));
      exchange_->stream_event("[DONE]");
      exchange_->stream_end();
      return;
    }
    json choices = json::array();
    for (std::size_t p = 0; p < all.size(); ++p) {
      for (std::size_t s = 0; s < all[p].samples.size(); ++s) {
        const SampleResult& sample = all[p].samples[s];
        const std::string echo = spec_.echo.empty() ? "" : spec_.echo[p];
        std::size_t offset = echo.size();
        json c = {{"index", p * spec_.params.n + s},
                  {"logprobs", logprobs_json(sample.logprobs, offset)},
                  {"finish_reason", openai_finish_reason(sample.finish_reason)}};
        const std::string text = echo + sample.text;
        if (spec_.api == wire::http::Api::kChat)
          c["message"] = {{"role", "assistant"}, {"content", text}};
        else
          c["text"] = text;
        choices.push_back(std::move(c));
      }
    }
    Response r;
    r.body = dump(answer("whole", {{"choices", std::move(choices)}, {"usage", usage_json(all)}}));
    exchange_->respond(std::move(r));
  }

  // An answer ("whole") or a chunk of one: the fields every one starts
  // with, then `rest`.
  json answer(std::string_view kind, json rest) const {
    const bool chat = spec_.api == wire::http::Api::kChat;
    const char* object = !chat             ? "text_completion"
                         : kind == "chunk" ? "chat.completion.chunk"
                                           : "chat.completion";
    json out = {{"id", id_},
                {"object", object},
                {"created", created_},
                {"model", spec_.model},
                {"seed", spec_.params.sampling.seed}};
    out.update(rest);
    return out;
  }

  // Logprobs as the API writes them, null when not asked for. Completions:
  // {"tokens", "token_logprobs", "top_logprobs" ({text: logprob}),
  // "text_offset"}, the offsets counted on from `offset` (the choice's
  // bytes so far); chat: {"content": [{"token", "logprob", "bytes",
  // "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
  json logprobs_json(const std::vector<TokenLogprobs>& entries, std::size_t& offset) const {
    if (spec_.params.logprobs < 0) return nullptr;
    const auto bytes = [](const std::string& text) {
      json b = json::array();
      for (unsigned char c : text) b.push_back(c);
      return b;
    };
    if (spec_.api == wire::http::Api::kChat) {
      json content = json::array();
      for (const TokenLogprobs& t : entries) {
        json top = json::array();
        for (const LogprobText& alt : t.top)
          top.push_back(
              {{"token", alt.text}, {"logprob", alt.logprob}, {"bytes", bytes(alt.text)}});
        content.push_back({{"token", t.chosen.text},
                           {"logprob", t.chosen.logprob},
                           {"bytes", bytes(t.chosen.text)},
                           {"top_logprobs", std::move(top)}});
      }
      return {{"content", std::move(content)}};
    }
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
         offsets = json::array();
    for (const TokenLogprobs& t : entries) {
      tokens.push_back(t.chosen.text);
      token_logprobs.push_back(t.chosen.logprob);
      json alternatives = json::object();
      for (const LogprobText& alt : t.top) alternatives[alt.text] = alt.logprob;
      top.push_back(std::move(alternatives));
      offsets.push_back(offset);
      offset += t.chosen.text.size();
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(token_logprobs)},
            {"top_logprobs", std::move(top)},
            {"text_offset", std::move(offsets)}};
  }

  // One streamed piece of choice `choice`: text (and its tokens' logprobs),
  // or its end (finish_reason).
  void chunk(int choice, const std::string& text, const char* finish_reason,
             const std::vector<TokenLogprobs>& logprobs) {
    if (!began_) {
      exchange_->stream_begin();
      began_ = true;
    }
    const std::size_t prompt_of = static_cast<std::size_t>(choice / spec_.params.n);
    if (!spec_.echo.empty() && !first_sent_[choice])  // offsets count the echoed prompt
      offsets_[choice] = spec_.echo[prompt_of].size();
    json c = {
        {"index", choice},
        {"logprobs", finish_reason ? json(nullptr) : logprobs_json(logprobs, offsets_[choice])},
        {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
    if (spec_.api == wire::http::Api::kChat) {
      json delta = json::object();
      if (!first_sent_[choice]) {  // a choice's first chunk names the role
        delta["role"] = "assistant";
        first_sent_[choice] = true;
      }
      if (!finish_reason) delta["content"] = text;
      c["delta"] = std::move(delta);
    } else {
      const std::size_t prompt = static_cast<std::size_t>(choice / spec_.params.n);
      std::string t = text;
      if (!spec_.echo.empty() && !first_sent_[choice]) {  // echo: the prompt comes first
        t = spec_.echo[prompt] + t;
        first_sent_[choice] = true;
      }
      c["text"] = t;
    }
    exchange_->stream_event(dump(answer("chunk", {{"choices", json::array({c})}})));
  }

  // A request the engine refused or failed: the whole answer is that error.
  void fail(const EngineEvent& event) {
    finished_ = true;
    cancel_all();
    const int status = event.invalid_params ? 400 : 500;
    if (!began_) return exchange_->respond(error_response(status, event.error));
    exchange_->stream_event(dump(error_object(status, event.error)));
    exchange_->stream_event("[DONE]");
    exchange_->stream_end();
  }

  void cancel_all() {
    for (RequestId id : ids_) {
      (void)context_.engine.cancel(id, exchange_->owner(), false);
      exchange_->untrack(id);
    }
  }

  GenerationSpec spec_;
  std::shared_ptr<Exchange> exchange_;
  Context& context_;
  std::int64_t created_;
  std::string id_;
  std::vector<RequestId> ids_;
  std::vector<std::optional<GenerateResult>> results_;  // by prompt
  std::size_t done_ = 0;                                // prompts final
  std::vector<bool> first_sent_;                        // by choice: its first chunk went out
  std::vector<std::size_t> offsets_;  // by choice: its text's bytes so far (text_offset)
  bool began_ = false;                // the stream's header went out
  bool finished_ = false;             // answered (or failed): later events are dropped
};

}  // namespace

void run_generation(GenerationSpec spec, const std::shared_ptr<Exchange>& exchange,
                    Context& context) {
  std::make_shared<Run>(std::move(spec), exchange, context)->start();
}

}  // namespace kvtier::daemon::http
