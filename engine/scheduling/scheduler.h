// Continuous batching over paged KV: many requests, one Model::forward per
// step, with chunked prefill, two admission policies and preemption.
//
// One step (Scheduler::step()):
//  1. Admission. Waiting requests are taken in queue order — (priority,
//     arrival) for the `priority` policy, arrival alone for `fcfs` — while the
//     head of the queue fits: the batch (prefilling + running) is below
//     max_batch_size and its pages fit max_kv_tokens beside what the admitted
//     requests hold and the pages the running ones need for this step's decode.
//     The queue is strict: a head that does not fit blocks the ones behind it
//     (no small request overtakes a big one, so none starves). One exception:
//     with the prefix cache, a request whose cached blocks are still coming
//     up from L2 or L3 keeps its place but lets the next ones in meanwhile.
//  2. Pages for this step: every running request needs room for one more
//     position. A request that cannot get its next page triggers preemption of
//     a victim (choose_victim: the least urgent, most recently arrived admitted
//     request, which may be the requester itself), until it fits or is itself
//     the victim.
//  3. One forward batch: the decode token of every running request plus at
//     most one prefill chunk — of the most urgent prefilling request — of up to
//     token_budget minus the decode tokens.
//  4. Sampling for every decode row and for a prefill chunk that ends its
//     prompt; then stop strings, max_tokens and the context end are checked in
//     generate()'s order, and finished requests give their blocks back at once.
//
// Samples (RequestParams::n > 1): the prompt is prefilled once, by the head
// (sample 0); the step whose prefill chunk ends the prompt forks samples
// 1..n-1 (request.h), which share the prompt's blocks, and samples every
// sample's first token from the same logits row. A head that has not forked
// yet takes n slots of max_batch_size, so the fork never overfills the batch.
// Each sample then decodes, is preempted and finishes on its own; before a
// sample first writes into the shared partial last block it gets its own copy
// (SequenceKv::reserve, copy-on-write), and full prompt blocks stay shared
// until every sample has released them.
//
// KV accounting is page-granular: a request holding n positions is charged
// ceil(n / page_size) whole pages, which is what the pool really hands out
// (17 positions at page_size 16 cost 32 tokens of max_kv_tokens). A request's
// prefill pages are all reserved when it is admitted, so a prefill never
// stalls halfway; decode pages are reserved one at a time as it grows. A block
// shared by several samples is counted once: the budget is in pool blocks.
//
// Determinism: a request's tokens depend only on its prompt, sampling
// parameters and seed — not on the batch, the token budget, the prefill
// chunking, preemption or its sibling samples — because Model::forward is batch-invariant and each
// request owns its Sampler. Re-prefilling prompt + generated after a
// preemption yields the same last-row logits that decoding the last token
// would have; tests compare every token with generate().
//
// Thread-safety: none; one engine thread owns the Scheduler, the Model and the
// pool. The Model and pool must outlive the Scheduler, and the Scheduler must
// be the pool's only user (check_invariants() counts its free blocks).
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/cache/kv_cache.h"
#include "engine/model/generator.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "engine/scheduling/budget_choice.h"
#include "engine/scheduling/request.h"
#include "tiers/block_pool.h"

namespace kvtier {

enum class SchedulingPolicy {
  kFcfs,      // arrival order; priorities are ignored
  kPriority,  // (priority, arrival): lower priority values first, ties by arrival
};

enum class PreemptionMode {
  kRecompute,  // free the victim's blocks; re-prefill prompt + generated when re-admitted
  kSwap,       // move the victim's blocks down a tier and back (needs the prefix cache)
};

std::string_view to_string(SchedulingPolicy policy);
std::string_view to_string(PreemptionMode mode);
// "fcfs" | "priority"; anything else is refused with the accepted names.
std::expected<SchedulingPolicy, std::string> parse_policy(std::string_view name);
// "recompute" | "swap"; anything else is refused with the accepted names.
std::expected<PreemptionMode, std::string> parse_preemption(std::string_view name);

// Options, with the seeds' names. None can change after create().
struct SchedulerConfig {
  // KV positions that may be resident at once, over all admitted requests,
  // counted in whole pages and rounded down to a multiple of page_size. Larger
  // admits more concurrent requests and preempts less; smaller bounds memory
  // (block bytes = model.kv_layout(page_size).block_bytes()). It must hold at
  // least one page, and a request whose longest possible sequence cannot fit
  // it alone is refused at submit().
  int max_kv_tokens = 256;

  // Requests admitted at once (prefilling + running). Larger raises
  // throughput until the forward pass is compute-bound; smaller cuts latency.
  int max_batch_size = 8;

  // Where create() chooses the value (engine/scheduling/budget_choice.h).
  static constexpr int kAuto = 0;

  // Tokens per forward pass: one per running request plus the prefill chunk.
  // Small budgets waste the device (a pass's rows share one read of the
  // weights); large ones take memory for little more speed. Must be >=
  // max_batch_size so every running request decodes every step and a
  // prefill always gets at least one token (vLLM has the same rule for
  // max_num_batched_tokens). kAuto: the pass of the least cost per row of a
  // full-context prompt, measured at create() (budget_choice.h).
  int token_budget = 16;
  // Prompt tokens a pass takes beside running decodes (chunked prefill):
  // smaller keeps their inter-token latency even while a long prompt
  // prefills, larger prefills it sooner. kAuto: chosen with an automatic
  // token_budget (a pass beside max_batch_size decodes at most 2.5x their step
  // alone), else the token budget's share (no cap).
  int mixed_prefill_tokens = kAuto;

  // Order of admission and of prefill; also decides preemption victims.
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;

  // Positions per KV block, 1 to kMaxPageSize. Smaller wastes less of the
  // last page; larger means fewer blocks to track and move between tiers.
  int page_size = 16;
  static constexpr int kMaxPageSize = 4096;

  // What happens to a preemption victim's KV: kRecompute frees it (it is
  // prefilled again later); kSwap moves it down the tiers and back, with no
  // recomputation (needs the prefix cache).
  PreemptionMode preemption = PreemptionMode::kRecompute;

  // The prefix cache (engine/cache/kv_cache.h): finished and swapped-out requests
  // leave their full blocks in a radix tree, new requests share or promote
  // the blocks their prompt starts with, and blocks no request holds move
  // down L1 -> L2 -> L3 instead of being dropped.
  bool prefix_cache = false;
  // L1 pool size in bytes; 0 means exactly max_kv_tokens. A larger L1 keeps
  // more cached blocks beside the running requests' (the budget for
  // requests stays max_kv_tokens).
  std::size_t l1_bytes = 0;
  CacheConfig cache;  // L2, L3, the write policy, formats (prefix_cache only)

  // The eviction policy of requests that do not name one
  // (RequestParams::eviction). Admission charges a request its effective
  // size under its policy (the effective-KV contract), and the pages a policy
  // evicts go back to the pool at once, so the budget counts exactly the
  // resident pages. Requests with a policy neither share nor leave blocks in
  // the prefix cache: their KV is not the full cache's.
  EvictionPolicy eviction;

  // Whether requests that do not say (RequestParams::tools) run the tool
  // the model calls, where its vocabulary has one (engine/model/tool_use.h).
  bool tools = true;

  // Clear message for: page_size < 1, max_kv_tokens below one page,
  // max_batch_size < 1, token_budget < max_batch_size (but kAuto),
  // mixed_prefill_tokens < 0, swap preemption
  // without the prefix cache, L2/L3 settings without it, tier formats
  // CacheConfig::validate() refuses.
  std::expected<void, std::string> validate() const;
};

// What happened to one request during a step, for a caller to stream.
struct RequestEvent {
  RequestId id = 0;         // the id submit() returned (a sample's group())
  int sample = 0;           // which sample of it (0 unless RequestParams::n > 1)
  std::vector<int> tokens;  // sampled this step (at most one today)
  // Their logprobs, one entry per token, when RequestParams::logprobs asked.
  std::vector<LogprobsEntry> logprobs;
  // Text that became final this step: bytes that might still begin a stop
  // string are held back until they cannot (as generate()'s on_text).
  std::string text;
  std::optional<FinishReason> finish;  // set when the request finished this step
  bool preempted = false;              // sent back to the queue this step
  std::string error;                   // non-empty when the request failed this step
};

struct StepOutput {
  std::vector<RequestEvent> events;          // at most one per request, in forward-batch order
  int decode_tokens = 0;                     // rows of the forward pass that were decode steps
  int prefill_tokens = 0;                    // tokens of the prefill chunk (0 when none)
  std::optional<RequestId> prefill_request;  // whose chunk it was (group id, as in events)
  int prefill_sample = 0;                    // and which of its samples
};

struct SchedulerStats {
  int waiting = 0;
  int prefilling = 0;
  int running = 0;
  // Rows the passes ahead of a request arriving now hold: what the waiting
  // and prefilling requests have still to prefill (a waiting one's whole
  // prompt: what its cached prefix saves is known at admission), and a
  // decode row per running one. What a router weighs a daemon's load by.
  long backlog_rows = 0;
  int blocks_used = 0;  // held by admitted requests, a shared block once
  int blocks_free = 0;  // still available within max_kv_tokens (free, or cached and demotable)
  long steps = 0;
  long preemptions = 0;
  long recomputed_tokens = 0;  // positions whose KV was computed again after a preemption
  long evicted_blocks = 0;     // pages the requests' eviction policies dropped
  long swapped_out = 0;        // swap preemptions
  long swapped_in = 0;         // swapped requests re-admitted
  int swapped = 0;             // requests swapped out now
  // Loads of a prefix thrown away because a block failed its checksum (the
  // request then prefilled without it), with the prefill pass that had run
  // on a load by layer.
  long discarded_passes = 0;
};

// What runs a batch through the model, with Model::forward's contract.
// An empty `run` is `model`'s own forward on the CPU. The GPU forward
// (engine/cuda/) runs over a pool in device memory and gathers
// no attention scores: requests whose eviction policy needs them (H2O) are
// then refused with the reason.
struct ForwardPass {
  std::function<std::expected<std::span<const float>, std::string>(
      std::span<const Model::Chunk>, tiers::BlockPool&, const std::function<void(int layer)>&)>
      run;
  bool gathers_scores = true;  // whether run fills Chunk::scores
  // Mixed into the prefix cache's model fingerprint (block keys, L3 entries):
  // forwards whose KV may differ in the last bits (the CPU's and the GPU's)
  // use different tags, so a restart on the other device never serves KV the
  // first one computed. 0 for the CPU forward.
  std::uint64_t kv_tag = 0;
  // The device's int8 codec for KV in its memory, for int8 tiers under a
  // device L1 (see DeviceKvCodec); empty: the host's.
  DeviceKvCodec kv_codec;
};

class Scheduler {
 public:
  // Checks `config` and builds a scheduler for `model`. `tokenizer` may be
  // null (no text, no stop strings). With `pool` null the scheduler owns a
  // pool of max_kv_tokens / page_size blocks; otherwise it uses `pool`, whose
  // blocks must fit the model's KV layout, and the budget is the smaller of
  // the two. Pools the machine's memory (or the process's cgroup limit)
  // cannot hold are refused with what it has (tiers/host_memory.h), never
  // thrown. `model`, `tokenizer` and `pool` must outlive the scheduler.
  static std::expected<std::unique_ptr<Scheduler>, std::string> create(
      Model& model, const Tokenizer* tokenizer, const SchedulerConfig& config,
      tiers::BlockPool* pool = nullptr, ForwardPass forward = {});

  // The L1 pool create() makes when given none: block size (the layout's,
  // rounded up to whole pages for O_DIRECT with the prefix cache) and count
  // (max_kv_tokens' pages, or more when l1_bytes holds more). For a caller
  // that lays L1 elsewhere (device memory) and passes it in.
  struct L1Shape {
    std::size_t block_bytes;
    int blocks;
  };
  static L1Shape l1_shape(const KvLayout& layout, const SchedulerConfig& config);

  // Refuses pools the machine cannot hold, with what it has: allocating
  // them would throw, or, lazily touched, get the daemon killed once they
  // fill up; L2 is locked into memory at once. `l1_host` is 0 when L1 is not
  // host memory (a GPU's). create() checks; kvtierd --check-config too.
  static std::expected<void, std::string> host_memory_check(std::uint64_t l1_host,
                                                            std::uint64_t l2);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  // Returns the blocks of every live request to the pool.
  ~Scheduler();

  // Queues a request and gives it an id and an arrival number. Refused, with
  // a message naming the problem, for what generate() refuses (empty prompt,
  // prompt longer than the context, max_tokens < 1, bad sampling parameters or
  // stop strings, stop strings without a tokenizer) and also for a token
  // outside the vocabulary, a negative priority, or a request whose longest
  // possible KV (prompt + max_tokens - 1 positions, capped at the context)
  // exceeds max_kv_tokens, so it could never run alone. A prompt as long as
  // the context is accepted: it yields one token and finishes with kContext,
  // as in generate(). n must be in [1, kMaxSamples] and at most
  // max_batch_size (the samples decode side by side).
  std::expected<RequestId, std::string> submit(RequestParams params);
  // As submit(params), under the id the caller chose, for a caller that must
  // hand the id out before it can submit (the daemon's submit() returns it
  // on the client's thread). Refused also for an id of 0, one at or above
  // kFirstSampleId (the samples' half) or one a request not yet forgotten
  // has. Do not mix the two on one scheduler unless the caller's ids stay
  // clear of the ones submit(params) hands out (the next above any seen).
  std::expected<RequestId, std::string> submit(RequestParams params, RequestId id);

  // Cancels a waiting, prefilling or running request; its blocks return to
  // the pool at once (a block shared with a live sample stays until that one
  // lets it go). For a head it cancels every live sample of the group. Fails
  // for an unknown id or a request (group) already finished.
  std::expected<void, std::string> cancel(RequestId id);

  // Runs one engine step (see the top of this file) and reports what happened.
  // A step with nothing to do returns no events.
  StepOutput step();

  // True while any request is waiting, prefilling or running.
  bool has_work() const;
  // True while the prefix cache has moves or store operations in flight. An
  // engine with no request calls tend_cache() meanwhile: it handles their
  // completions (a write-through to a store counts as stored only then) and
  // sleeps until the next one, at most a few milliseconds.
  bool cache_busy() const;
  void tend_cache();

  // The request, or null for an unknown (or forgotten) id. The pointer stays
  // valid until forget(id) or the scheduler's destruction.
  const Request* find(RequestId id) const;
  std::optional<RequestStatus> status(RequestId id) const;
  // The samples of id's group in index order: the head, then those forked so
  // far (none before the prompt prefill ends, nor if it never did). Empty for
  // an unknown id.
  std::vector<const Request*> samples(RequestId id) const;

  // Drops a finished (done, cancelled, failed) request so its memory goes,
  // with all the samples of its group; false if it is unknown, a sample other
  // than the head (samples go with their head), or any sample is still live.
  bool forget(RequestId id);

  SchedulerStats stats() const;

  // An error message if the block accounting is broken: free + referenced
  // blocks differ from the pool size, a block's reference count differs from
  // the number of block tables holding it (so a block is never both free and
  // in a table), a table holds a block twice, the used KV exceeds
  // max_kv_tokens, the batch exceeds
  // max_batch_size, or a request's state contradicts its status (see
  // request.h). Tests call it after every step.
  std::expected<void, std::string> check_invariants() const;

  // The settings in force: as given, but for kAuto budgets, which hold what
  // was chosen (budget_choice()).
  const SchedulerConfig& config() const { return config_; }
  // How token_budget and mixed_prefill_tokens were set, and why.
  const BudgetChoice& budget_choice() const { return budget_choice_; }
  // What a pass of each size cost (ascending rows) when the sweep measured
  // them: create()'s, for an automatic token_budget, or
  // calibrate_tier_costs()'s. Empty before either.
  const PassSweep& pass_sweep() const { return sweep_; }
  // Measures what passes of each size cost (unless create() did) and,
  // through the cache, what loading a block from L2 and each store costs,
  // several times each, and adds the samples to the cache's cost model
  // (engine/cache/cost_model.h), which the load-or-recompute decision reads. Call
  // once at start-up, before any request (it borrows free pool blocks);
  // step() then keeps adding the real passes. No-op without the prefix
  // cache.
  void calibrate_tier_costs();

  // The prefix cache, or null when config().prefix_cache is off.
  KvCache* cache() { return cache_.get(); }
  const KvCache* cache() const { return cache_.get(); }

  // Changes the tunables that are safe to change between steps: token_budget,
  // mixed_prefill_tokens, max_batch_size and policy (the waiting queue is
  // re-ordered); kAuto budgets are chosen from pass_sweep(). Any other field
  // of `config` must equal the current one. Refused, changing nothing,
  // when the result fails validate() or a live request's n exceeds the new
  // max_batch_size. Requests already admitted stay admitted; a smaller batch
  // limit only stops new admissions until the batch shrinks.
  std::expected<void, std::string> reconfigure(const SchedulerConfig& config);
  // max_kv_tokens in pages, capped by the pool's size.
  int max_blocks() const { return max_blocks_; }

 private:
  Scheduler(Model& model, const Tokenizer* tokenizer, const SchedulerConfig& config,
            std::unique_ptr<tiers::BlockPool> owned_pool, tiers::BlockPool* pool, int max_blocks,
            std::unique_ptr<KvCache> cache, ForwardPass forward);

  // Queue order; smaller is more urgent. `priority` is 0 for fcfs.
  struct QueueKey {
    int priority;
    std::uint64_t arrival;
    RequestId id;
    auto operator<=>(const QueueKey&) const = default;
  };
  QueueKey queue_key(const Request& r) const;
  // Runs the sweep of pass sizes (budget_choice.h), each pass on fresh
  // pages of the pool, into sweep_ and the cache's cost model.
  void measure_pass_sizes();
  // config with its kAuto budgets chosen from sweep_, into config_.
  void apply_budgets(const SchedulerConfig& config);
  // Prompt tokens the next pass can take beside `decodes` decode rows.
  int prefill_room(int decodes) const;
  // The passes a prompt's prefill would take now, beside the running
  // requests' decodes: what the load-or-recompute plan weighs.
  PrefillShape prefill_shape() const;
  // An event about r, for its group's client: the fields the caller sets say
  // what happened.
  static RequestEvent event_for(const Request& r);

  // Admits waiting requests in queue order while they fit; fails (with an
  // event in out) one that never can.
  void admit(StepOutput& out);
  // The pages admitting r takes at once: a page for every token it holds
  // (its prompt, and what it generated before a recompute preemption), but
  // for a swapped request that keeps its own table (an eviction policy) the
  // pages it kept, and one for its next token.
  int blocks_to_admit(const Request& r) const;
  // Makes room for positions [0, n) of r within max_blocks_; false, changing
  // nothing, when the budget or the pool is short.
  bool reserve(Request& r, int n);
  // The preemption victim among the admitted requests.
  Request* choose_victim();
  // Frees the victim's KV as the preemption mode says and queues it again.
  // This is where swap mode plugs in.
  void preempt(Request& victim, StepOutput& out);
  void preempt_recompute(Request& victim);
  void preempt_swap(Request& victim);
  // Admission's prefix-cache step: gives a request that holds no blocks the
  // cached blocks its tokens start with (and a swapped one its stashed
  // partial block).
  enum class Restore {
    kDone,
    kLoading,  // promotions for it are in flight: ask again in a later step
    kNoRoom,   // L1 has no free block for its stashed block yet
  };
  Restore restore_from_cache(Request& r, int budget_blocks);
  // The cache's share of a finished or swapped request: its full blocks, up
  // to the first of a prefix still landing for it (layer_loads_), and their
  // tokens; none when an eviction policy dropped pages of it.
  struct Shareable {
    std::span<const int> tokens;
    std::span<const int> blocks;
  };
  Shareable shareable(const Request& r) const;
  void insert_into_cache(const Request& r);
  // step()'s parts. The forward batch: the running requests' decodes, then
  // one prefill chunk in the token budget left.
  struct Batch {
    std::vector<Model::Chunk> chunks;
    std::vector<Request*> rows;
  };
  // Gives every running request a page for its next token, preempting the
  // least urgent when pages run short.
  void reserve_decode_pages(StepOutput& out);
  Batch build_batch(StepOutput& out);
  // Settles the load r's pass computed on (or, with whole blocks, is about
  // to): true when every block was right; false, queueing r again, when
  // what was computed from it is thrown away.
  bool settle_layer_load(Request& r);
  // Moves the requests whose split front is computed past their loaded
  // blocks, once those are in (settled first unless they come by layer).
  void resume_splits();
  // Whether r's next chunk must wait: its split front is done, its loaded
  // blocks are not.
  bool waiting_for_split(const Request& r) const;
  // Evicts, samples and emits what the pass's logits give each row (but the
  // discarded one's).
  void finish_pass(const std::vector<Request*>& rows, std::span<const float> logits,
                   const Request* discarded, StepOutput& out);
  // Samples r's next token from `logits` and checks the stop conditions.
  void sample_and_append(Request& r, std::span<const float> logits, RequestEvent& event);
  // Moves a request out of the batch into a terminal state and frees its KV.
  void retire(Request& r, RequestStatus status);
  // Forks samples 1..n-1 of a head whose prompt prefill just ended; they join
  // the batch as running requests. Returns them in index order.
  std::vector<Request*> fork_samples(Request& head);
  // Batch slots a request takes: n for a head that has not forked yet (its
  // samples will join the batch), 1 otherwise.
  int batch_slots(const Request& r) const;
  int used_batch_slots() const;
  // The blocks the admitted requests hold, each shared block once. With no
  // eviction policy it is the number of distinct blocks in their tables; an
  // eviction policy (window, sinks, H2O) will answer its effective size here
  // (the effective-KV contract).
  int used_blocks() const;
  // All samples of the group whose head is `id`, in index order; just the
  // request for a sample other than the head. REQUIRES: id is known.
  std::vector<Request*> group_of(RequestId id) const;
  int blocks_for(long positions) const;
  void sort_admitted_by_urgency();

  Model* model_;
  ForwardPass forward_;  // run is never empty: Model::forward unless the caller gave one
  BudgetChoice budget_choice_;
  PassSweep sweep_;
  const Tokenizer* tokenizer_;
  std::optional<ToolUse> tools_;  // the model's tool, fresh: each request's starts from it
  SchedulerConfig config_;
  std::unique_ptr<tiers::BlockPool> owned_pool_;
  tiers::BlockPool* pool_;
  // After the pool: destroyed first, it gives back the blocks it holds.
  std::unique_ptr<KvCache> cache_;
  int max_blocks_;
  int context_;
  int vocab_size_;

  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  // The waiting queue: a min-ordered set rather than a binary heap because
  // cancel() removes from the middle.
  std::set<QueueKey> waiting_;
  std::vector<Request*> admitted_;  // prefilling + running
  // Admitted requests whose prefix is still landing from L3 a layer at a
  // time: their prefill waits for each layer and is kept only if settle()
  // finds every block intact (see LayerLoad, cache_handles.h).
  std::unordered_map<const Request*, PrefixLease> layer_loads_;
  RequestId next_id_ = 1;  // the next id submit(params) hands out
  RequestId next_sample_id_ = kFirstSampleId;
  std::uint64_t next_arrival_ = 0;
  mutable std::vector<char> seen_;  // used_blocks()'s scratch, one entry per pool block

  long steps_ = 0;
  long preemptions_ = 0;
  long recomputed_tokens_ = 0;
  long discarded_passes_ = 0;
  long swapped_out_ = 0;
  long swapped_in_ = 0;
  long evicted_blocks_ = 0;
};

}  // namespace kvtier
