// A generation request as the scheduler tracks it: what was asked, where it
// stands in its life, and the per-request state that must survive preemption.
//
// Life of a request (see scheduler.h for who moves it):
//
//   submit -> waiting -> prefilling -> running -> done
//                ^           |            |
//                +-----------+------------+   preempted (recompute): blocks freed,
//                                             back to waiting, re-prefilled later
//                ^                        |
//                +------- swapped <-------+   preempted (swap): full blocks go to the
//                                             prefix cache (held there), the partial
//                                             last one to an L2 slot; back in the queue,
//                                             re-admitted by promoting them, no recompute
//   any live state -> cancelled (blocks freed at once); failed on an engine error.
//
// Invariants (Scheduler::check_invariants() checks them after every step):
//  * tokens() is the prompt followed by the generated tokens;
//  * waiting, swapped, done, cancelled and failed requests hold no L1 blocks;
//  * prefilling: kv().length() < tokens().size() <= kv().capacity() (all the
//    pages the prefill needs are reserved when the request is admitted);
//  * running: kv().length() == tokens().size() - 1 (the last sampled token is
//    the next decode step's input and has no KV yet).
//
// Samples (RequestParams::n > 1, nanochat's "prefill once, expand to
// num_samples"): the request submit() returns is sample 0, the head. Its
// prompt is prefilled once; when the prefill ends, the scheduler forks
// samples 1..n-1 as requests of their own (ids of their own, from
// kFirstSampleId up, group() naming the head) whose KV shares the prompt's
// blocks (SequenceKv::fork), each with its own Sampler seeded with
// sample_seed(seed, index). From then on every sample lives like an ordinary
// request (it is preempted, re-prefilled and finished on its own), so a
// sample's tokens equal those of a single-sample request with its derived
// seed.
//
// Only the Scheduler mutates a Request; everyone else sees it through const
// pointers. Not thread-safe: it lives on the engine thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/cache/cache_handles.h"
#include "engine/cache/tier.h"
#include "engine/model/generator.h"
#include "engine/model/kv_evictor.h"
#include "engine/model/sampler.h"
#include "engine/model/sequence_kv.h"
#include "engine/model/tool_use.h"
#include "engine/scheduling/request_options.h"
#include "tiers/block_key.h"

namespace kvtier {

// Ids are split in two halves. A submitted request (a group's head) has an
// id below this one: the caller's own (Scheduler::submit(params, id)) or the
// scheduler's next. Forked samples count up from it, so they never take an
// id a caller may hand out later, and a caller that numbers its requests
// 1, 2, 3, ... sees no gaps where samples were forked.
inline constexpr RequestId kFirstSampleId = RequestId{1} << 63;

enum class RequestStatus {
  kWaiting,     // queued for admission; holds no KV
  kPrefilling,  // admitted; its prompt (or, after a preemption, prompt + generated) is being fed
  kRunning,     // decoding one token per step
  kSwapped,     // preempted with its KV moved down the tiers; queued for re-admission
  kDone,        // finished; finish_reason() says why
  kCancelled,   // cancelled by the caller
  kFailed,      // the engine failed it; error() says why
};

std::string_view to_string(RequestStatus status);

// True for done, cancelled and failed: the request will never run again.
bool is_terminal(RequestStatus status);

// The seed sample `index` of a request seeded `seed` samples with:
// seed XOR (index * 0x9E3779B97F4A7C15). The multiplier is odd, so index ->
// index * K is a bijection on 64-bit integers, and so is XOR with a fixed
// seed: two samples of one request never share a seed. Sample 0 uses the seed
// itself, so an n = 1 request is exactly what it was before samples existed,
// and sample 0 of any n equals it. (The Sampler expands the seed with
// splitmix64, so seeds that differ in a few bits still give unrelated streams.)
std::uint64_t sample_seed(std::uint64_t seed, int index);

class Request {
 public:
  // REQUIRES: params were validated (Scheduler::submit does it) and their
  // eviction policy is set.
  Request(RequestId id, std::uint64_t arrival, RequestParams params, int page_size, int context);
  // Sample `index` of `head`, forked when the head's prompt prefill ended:
  // the head's prompt and parameters, sampling seeded with
  // sample_seed(head's seed, index), and `kv` (a fork of the head's) as its
  // KV. REQUIRES: head has generated nothing yet; 0 < index < head's n.
  Request(RequestId id, const Request& head, int index, SequenceKv kv);

  RequestId id() const { return id_; }
  // Order of submission, from a counter the scheduler owns (never wall-clock,
  // so runs are reproducible). Kept across preemptions: a preempted request
  // re-enters the queue at its original place.
  std::uint64_t arrival() const { return arrival_; }
  int priority() const { return priority_; }
  int max_tokens() const { return max_tokens_; }
  const SamplingParams& sampling() const { return sampling_; }
  const std::vector<std::string>& stop() const { return stop_; }

  // The id submit() returned for this request's group: id() for the head.
  RequestId group() const { return group_; }
  // 0 for the head, 1..num_samples() - 1 for the samples forked from it.
  int sample_index() const { return sample_index_; }
  // RequestParams::n of the group.
  int num_samples() const { return num_samples_; }

  RequestStatus status() const { return status_; }
  // Set once the request is done.
  std::optional<FinishReason> finish_reason() const { return finish_; }
  // Why the request failed; empty unless status() is kFailed.
  const std::string& error() const { return error_; }

  std::span<const int> tokens() const { return tokens_; }  // prompt, then generated
  // The token before position `pos` (Model::Chunk::previous_token), -1 at 0.
  int token_before(int pos) const { return pos > 0 ? tokens_[pos - 1] : -1; }
  std::span<const int> prompt() const { return std::span(tokens_).first(prompt_len_); }
  std::span<const int> generated() const { return std::span(tokens_).subspan(prompt_len_); }
  int num_generated() const { return static_cast<int>(tokens_.size()) - prompt_len_; }
  // The generated text, cut before a stop string (as generate() cuts it);
  // empty without a tokenizer.
  const std::string& text() const { return text_; }
  // The generated tokens' logprobs, one entry per token; empty unless
  // RequestParams::logprobs asked.
  const std::vector<LogprobsEntry>& logprobs() const { return logprobs_; }

  const SequenceKv& kv() const { return kv_; }
  const EvictionPolicy& eviction() const { return evictor_.policy(); }
  // How many of tokens() the KV holds: the prefill's progress while
  // prefilling (the next chunk starts here).
  int prefill_cursor() const { return kv_.length(); }

  // Times this request was preempted, and the positions it had to compute a
  // second (or later) time because of it.
  int preemptions() const { return preemptions_; }
  long recomputed_tokens() const { return recomputed_tokens_; }
  // Prompt tokens the prefix cache served and the request computed from, at
  // its first admission, by the tier they came from (L1 shared at once, L2
  // and L3 promoted). Counted when the blocks are handed over, so blocks
  // recomputed instead (cheaper than loading, or a load that failed its
  // checksum and was thrown away) are not.
  const TierCounts& cached_tokens() const { return cached_tokens_; }

 private:
  friend class Scheduler;

  RequestId id_;
  std::uint64_t arrival_;
  int priority_;
  int max_tokens_;
  SamplingParams sampling_;
  std::vector<std::string> stop_;
  std::vector<int> stop_token_ids_;
  int logprobs_top_ = -1;  // RequestParams::logprobs
  bool ignore_eos_ = false;
  RequestId group_;
  int sample_index_ = 0;
  int num_samples_ = 1;
  // Head only: set once samples 1..n-1 are forked (never again, even if the
  // head is preempted and re-prefilled), and their ids in index order.
  bool forked_ = false;
  std::vector<RequestId> sample_ids_;

  int prompt_len_;
  std::vector<int> tokens_;
  RequestStatus status_ = RequestStatus::kWaiting;
  std::optional<FinishReason> finish_;
  std::string error_;
  std::string text_;
  std::size_t text_emitted_ = 0;  // bytes of text_ already handed out in step events
  std::vector<LogprobsEntry> logprobs_;

  SequenceKv kv_;
  // Both carry their position in the request's random stream and in the text
  // across preemptions, so a re-admitted request continues exactly where it was.
  Sampler sampler_;
  StopMatcher stop_matcher_;
  // The model's tool, when the request runs it: an expression half written
  // and the tokens still to force, kept across preemptions as the two above.
  std::optional<ToolUse> tools_;
  // The eviction policy's state (H2O's accumulated scores); a forked sample
  // starts from a copy of its head's.
  KvEvictor evictor_;

  int preemptions_ = 0;
  long recomputed_tokens_ = 0;
  // Positions [0, computed_before_) had KV once and lost it to a preemption;
  // prefilling them again is recompute.
  int computed_before_ = 0;

  // Prefix cache: the chain root (from the salt), and while swapped out,
  // what the cache keeps for it (its holds and stashed blocks, its length).
  tiers::BlockKey cache_root_;
  std::optional<SwapTicket> swap_;
  // A prefix split between recomputing and loading (PrefixSplit): the
  // prefill computes positions up to split_end_, then the KV jumps to
  // split_resume_ over the loaded blocks once they are in. 0: no split.
  int split_end_ = 0, split_resume_ = 0;
  TierCounts cached_tokens_;
  bool cached_counted_ = false;  // cached_tokens_ holds the first hand-out's count
};

}  // namespace kvtier
