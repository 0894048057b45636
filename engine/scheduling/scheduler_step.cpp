// One engine step: the batch's forward pass and what comes of it.
#include <algorithm>
#include <cassert>
#include <chrono>
#include <functional>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

void Scheduler::sample_and_append(Request& r, std::span<const float> logits, RequestEvent& event) {
  std::optional<int> forced;
  if (r.tools_) forced = r.tools_->take_forced();
  const int token = forced ? *forced : r.sampler_.sample(logits);
  if (r.tools_) r.tools_->observe(token, *tokenizer_);
  r.tokens_.push_back(token);
  event.tokens.push_back(token);
  if (r.logprobs_top_ >= 0) {
    r.logprobs_.push_back(token_logprobs(logits, token, r.logprobs_top_));
    event.logprobs.push_back(r.logprobs_.back());
  }
  std::optional<FinishReason> finish;
  bool stopped = false;
  if (is_stop_token(token, tokenizer_, r.ignore_eos_, r.stop_token_ids_)) {
    // The end of the text: a stop, whose token writes no text.
    finish = FinishReason::kStop;
    stopped = true;
  } else if (tokenizer_ != nullptr) {
    const std::string piece = tokenizer_->decode(std::span(&token, 1));
    r.text_ += piece;
    if (auto at = r.stop_matcher_.feed(piece)) {
      r.text_.resize(*at);
      finish = FinishReason::kStop;
      stopped = true;
    }
  }
  // generate()'s order: stop string, then max_tokens, then the context end.
  if (!stopped && r.num_generated() == r.max_tokens_) finish = FinishReason::kLength;
  if (!finish && r.kv_.length() == context_) finish = FinishReason::kContext;

  // Hand out the text that can no longer turn into a stop string.
  const std::size_t final_bytes =
      finish ? r.text_.size() : r.text_.size() - r.stop_matcher_.pending_bytes();
  if (final_bytes > r.text_emitted_) {
    event.text = r.text_.substr(r.text_emitted_, final_bytes - r.text_emitted_);
    r.text_emitted_ = final_bytes;
  }
  if (finish) {
    r.finish_ = finish;
    event.finish = finish;
  }
}

StepOutput Scheduler::step() {
  StepOutput out;
  ++steps_;
  if (cache_) cache_->poll();
  admit(out);
  resume_splits();
  reserve_decode_pages(out);
  Batch batch = build_batch(out);
  if (batch.chunks.empty()) {
    // Nothing to compute: whoever is waiting waits for blocks on their way
    // up. Sleep until a transfer completes instead of spinning.
    if (cache_) cache_->wait(std::chrono::milliseconds(2));
    return out;
  }

  // The prefill may be of a request whose prefix is landing by layer: each
  // layer waits for its piece of those blocks (but a split's front, which
  // reads none of them).
  Request* loading = nullptr;
  if (out.prefill_tokens > 0 && layer_loads_.contains(batch.rows.back()) &&
      batch.rows.back()->split_resume_ == 0)
    loading = batch.rows.back();
  std::function<void(int)> await_layer;
  if (loading != nullptr) {
    await_layer = [this, lease = &layer_loads_.at(loading)](int layer) {
      cache_->await_layer(lease->load(), layer);
    };
  }
  const auto pass_start = std::chrono::steady_clock::now();
  auto logits = forward_.run(batch.chunks, *pool_, await_layer);
  // A pass that is mostly prefill is a sample of what recomputing a prefix
  // costs; a layer-by-layer load's waits are not compute, so its pass is
  // not one.
  if (cache_ && logits && !loading && out.prefill_tokens >= std::max(8, out.decode_tokens)) {
    cache_->cost_model().add_prefill(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count(),
        out.prefill_tokens + out.decode_tokens);
  }
  // A failed forward computed nothing: the request fails with the batch, its
  // load unsettled.
  if (loading != nullptr && logits && settle_layer_load(*loading)) loading = nullptr;
  if (!logits) {
    // forward() changes nothing when it fails; the batch's requests cannot
    // go on, the others can.
    for (Request* r : batch.rows) {
      r->error_ = logits.error();
      retire(*r, RequestStatus::kFailed);
      RequestEvent event = event_for(*r);
      event.error = logits.error();
      out.events.push_back(std::move(event));
    }
    return out;
  }
  finish_pass(batch.rows, *logits, loading, out);
  return out;
}

void Scheduler::reserve_decode_pages(StepOutput& out) {
  // Pages for this step's decodes, most urgent first, so that when pages run
  // short the least urgent requests are the ones that give theirs up.
  sort_admitted_by_urgency();
  for (std::size_t i = 0; i < admitted_.size();) {
    Request& r = *admitted_[i];
    if (r.status_ != RequestStatus::kRunning || reserve(r, r.kv_.length() + 1)) {
      ++i;
      continue;
    }
    // The victim is never more urgent than r (r is a candidate), so it sits
    // at or after i and the requests already given pages keep them.
    Request* victim = choose_victim();
    assert(std::find(admitted_.begin() + static_cast<long>(i), admitted_.end(), victim) !=
           admitted_.end());
    preempt(*victim, out);
  }
}

Scheduler::Batch Scheduler::build_batch(StepOutput& out) {
  // Decodes, then one prefill chunk in the room left.
  Batch batch;
  for (Request* r : admitted_) {
    if (r->status_ != RequestStatus::kRunning) continue;
    batch.chunks.push_back({&r->kv_, std::span(&r->tokens_.back(), 1), false, r->evictor_.scores(),
                            r->token_before(r->kv_.length()), r->evictor_.scores_from(),
                            r->evictor_.rotary_offset(r->kv_)});
    batch.rows.push_back(r);
  }
  out.decode_tokens = static_cast<int>(batch.chunks.size());
  const int room = prefill_room(out.decode_tokens);
  for (Request* r : admitted_) {  // in urgency order: the first prefilling one
    if (r->status_ != RequestStatus::kPrefilling || room <= 0 || waiting_for_split(*r)) continue;
    const int begin = r->kv_.length();
    const int end = r->split_resume_ > 0 ? r->split_end_ : static_cast<int>(r->tokens_.size());
    const int n = std::min(room, end - begin);
    batch.chunks.push_back({&r->kv_, std::span(r->tokens_).subspan(begin, n), false,
                            r->evictor_.scores(), r->token_before(begin), r->evictor_.scores_from(),
                            r->evictor_.rotary_offset(r->kv_)});
    batch.rows.push_back(r);
    // Only a head before its fork or a re-prefill after a preemption
    // prefills, and neither shares blocks: the chunk writes its own pages.
    assert(r->kv_.blocks_needed(*pool_, begin + n) == 0);
    out.prefill_tokens = n;
    out.prefill_request = r->group_;
    out.prefill_sample = r->sample_index_;
    const long recomputed = std::max(0, std::min(begin + n, r->computed_before_) - begin);
    r->recomputed_tokens_ += recomputed;
    recomputed_tokens_ += recomputed;
    break;
  }
  return batch;
}

bool Scheduler::settle_layer_load(Request& r) {
  // Only now are the blocks verified. A bad one is gone from the cache; the
  // request's pass is thrown away and it queues again, to find the prefix
  // without that block and prefill the rest. What it computed before the
  // load (a split's front) joins the cache, so it finds that in L1.
  if (cache_->settle(layer_loads_.at(&r).load())) {
    layer_loads_.erase(&r);
    return true;
  }
  ++discarded_passes_;
  insert_into_cache(r);  // cut before the load: only what was computed before it
  layer_loads_.erase(&r);
  r.split_end_ = r.split_resume_ = 0;
  // Nothing it was handed is used: it counts what it finds next time.
  r.cached_tokens_ = {};
  r.cached_counted_ = false;
  r.kv_.release(*pool_);
  std::erase(admitted_, &r);
  r.status_ = RequestStatus::kWaiting;
  waiting_.insert(queue_key(r));
  return false;
}

bool Scheduler::waiting_for_split(const Request& r) const {
  return r.split_resume_ > 0 && r.kv_.length() == r.split_end_;
}

void Scheduler::resume_splits() {
  // A copy: a failed settle queues the request again, out of admitted_.
  const std::vector<Request*> admitted = admitted_;
  for (Request* r : admitted) {
    if (!waiting_for_split(*r)) continue;
    // Loads by layer are awaited layer by layer in the tail's pass, and
    // settled after it; whole blocks are settled before it.
    if (const auto it = layer_loads_.find(r); it != layer_loads_.end()) {
      const LayerLoad& load = it->second.load();
      if (!load.by_layer()) {
        if (!cache_->arrived(load)) continue;
        if (!settle_layer_load(*r)) continue;
      }
    }
    r->kv_.advance(r->split_resume_ - r->split_end_);
    r->split_end_ = r->split_resume_ = 0;
  }
}

void Scheduler::finish_pass(const std::vector<Request*>& rows, std::span<const float> logits,
                            const Request* discarded, StepOutput& out) {
  // Eviction as generate() does it: after the pass that completes the prompt
  // (never inside it, so chunking cannot change it) and after every decode.
  const KeyRotation rotation{model_->rotary(), model_->kv_layout(config_.page_size)};
  for (Request* r : rows)
    if (r->kv_.length() >= static_cast<int>(r->tokens_.size()))
      evicted_blocks_ += r->evictor_.evict(r->kv_, *pool_, &rotation);

  const std::size_t V = static_cast<std::size_t>(vocab_size_);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Request& r = *rows[i];
    if (&r == discarded) continue;  // computed from a corrupt block: thrown away
    if (r.status_ == RequestStatus::kPrefilling) {
      if (r.kv_.length() < static_cast<int>(r.tokens_.size())) continue;  // more chunks to come
      r.status_ = RequestStatus::kRunning;
    }
    // Every sample's first token comes from the one prefill's logits row.
    std::vector<Request*> samplers = {&r};
    if (r.sample_index_ == 0 && r.num_samples_ > 1 && !r.forked_) {
      const std::vector<Request*> forked = fork_samples(r);
      samplers.insert(samplers.end(), forked.begin(), forked.end());
    }
    for (Request* s : samplers) {
      RequestEvent event = event_for(*s);
      sample_and_append(*s, logits.subspan(i * V, V), event);
      if (s->finish_) retire(*s, RequestStatus::kDone);
      out.events.push_back(std::move(event));
    }
  }
}

std::vector<Request*> Scheduler::fork_samples(Request& head) {
  // The head has fed its prompt and sampled nothing: its KV is the prompt's.
  assert(head.num_generated() == 0 && head.kv_.length() == head.prompt_len_);
  head.forked_ = true;
  std::vector<Request*> forked;
  for (int index = 1; index < head.num_samples_; ++index) {
    const RequestId id = next_sample_id_++;
    auto sample = std::make_unique<Request>(id, head, index, head.kv_.fork(*pool_));
    forked.push_back(sample.get());
    admitted_.push_back(sample.get());
    head.sample_ids_.push_back(id);
    requests_.emplace(id, std::move(sample));
  }
  return forked;
}

}  // namespace kvtier
