// The engine thread: the only owner of the Model, the Tokenizer and the
// Scheduler (DESIGN.md, "Threads").
//
// Sessions, on the Asio thread, hand it work through a mutex-protected inbox
// and a condition variable; the thread drains the inbox, then runs
// Scheduler::step() for as long as any request has work, and reports what
// happened to each request through that request's EventSink. Nothing outside
// this thread touches engine state, so the scheduler needs no locks.
//
// Samples (RequestParams::n > 1) are one request here: one id, progress
// events tagged with their sample index, one final event carrying every
// sample's result once the last one ends.
//
// Request ids are the scheduler's (RequestId): submit() picks the next one,
// 1, 2, 3, ..., on the caller's thread and hands it to Scheduler::submit with
// the request, so a client learns its id before the engine runs it and one
// id names the request in its events, in cancel() and in the log.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/device.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "engine/scheduling/request.h"
#include "engine/scheduling/scheduler.h"
#include "wire/access.h"
#include "wire/prompt.h"

namespace kvtier::daemon {

// A token's logprob (token_logprobs, sampler.h) with the token's text, as
// an answer shows it. The text is the token's bytes: part of a UTF-8
// character for some BPE tokens.
struct LogprobText {
  int token = 0;
  std::string text;
  float logprob = 0;
};
struct TokenLogprobs {
  LogprobText chosen;
  std::vector<LogprobText> top;  // the most likely alternatives, most likely first
};

// What one sample of a finished request produced.
struct SampleResult {
  std::vector<int> tokens;              // generated ids, the prompt excluded
  std::string text;                     // cut before a stop string
  std::string finish_reason;            // "length" | "stop" | "context" | "cancelled"
  std::vector<TokenLogprobs> logprobs;  // one per token, when RequestParams::logprobs asked
};

// What a finished request produced.
struct GenerateResult {
  // RequestParams::n entries in sample order. Sample 0 is what the same
  // request with n = 1 produces. A sample the engine never started (the
  // request was cancelled before its prompt was prefilled) is empty and
  // "cancelled".
  std::vector<SampleResult> samples;
  // "cancelled" when the request was cancelled, else sample 0's.
  std::string finish_reason;
  int prompt_tokens = 0;
  // The request's seed (sample 0's; sample i's is sample_seed(seed, i)):
  // given, or drawn for it (fields::random_seed).
  std::uint64_t seed = 0;
  // Prompt tokens served from the prefix cache, by the tier they were found
  // in (L1, L2, L3): Request::cached_tokens() of sample 0.
  TierCounts cached_tokens;
  double queue_ms = 0;  // submit -> admitted by the scheduler
  double ttft_ms = 0;   // submit -> first generated token (0 if none)
  double total_ms = 0;  // submit -> finished
};

// One report about one request. Every request gets exactly one event with
// `final` set (its last): a result, or an error.
struct EngineEvent {
  RequestId id = 0;
  int sample = 0;                       // which sample the tokens and text belong to
  std::vector<int> tokens;              // sampled since the last event
  std::vector<TokenLogprobs> logprobs;  // theirs, when RequestParams::logprobs asked
  std::string text;                     // text that became final since the last event
  bool final = false;
  std::optional<GenerateResult> result;  // final and succeeded (or was cancelled)
  // final and refused or failed: invalid_params says whether the request
  // itself was at fault (the engine's validation message) or the engine.
  std::string error;
  bool invalid_params = false;
};

// Called ON THE ENGINE THREAD; it must only hand the event on (post it to the
// session's executor) and must not block or call back into the EngineLoop.
using EventSink = std::function<void(EngineEvent)>;

// What the engine measured of the requests it finished (a request with n
// samples is one), over the daemon's life: for /metrics.
struct RequestMetrics {
  util::LatencyHistogram queue;        // submit -> admitted by the scheduler
  util::LatencyHistogram ttft;         // submit -> first generated token
  util::LatencyHistogram inter_token;  // between consecutive tokens of a sample
  util::LatencyHistogram e2e;          // submit -> final
  // By GenerateResult::finish_reason: length, stop, context, cancelled.
  std::map<std::string, long> finished;
  long prompt_tokens = 0;       // of the requests finished
  PerTier<long> cached_tokens;  // of those, served from each tier
  // TTFT by where most of the prompt came from (prompt_source): a tier's
  // index, or kComputed when prefilling served more of it than any tier.
  static constexpr int kComputed = kNumTiers;
  std::array<util::LatencyHistogram, kNumTiers + 1> ttft_by_source;
};

// Where most of a prompt of `prompt_tokens` came from, `cached` by tier: the
// tier that served the most of it, unless more of it was computed (ties go
// to the faster tier, then to the tier over computing).
int prompt_source(const TierCounts& cached, int prompt_tokens);
// The source's name: a tier's (l1, l2, l3, remote) or "computed".
const char* prompt_source_name(int source);

struct EngineStats {
  SchedulerStats scheduler;
  int pending = 0;  // submitted and not yet final
  long submitted = 0;
  long completed = 0;
  long cancelled = 0;
  long failed = 0;                  // refused by validation or failed by the engine
  long tokens_generated = 0;        // over every request and sample since start
  std::optional<CacheStats> cache;  // null when the prefix cache is off
  RequestMetrics requests;
};

// What a task run on the engine thread (EngineLoop::call) may use. Valid
// only during the call.
struct EngineAccess {
  Scheduler& scheduler;
  const Tokenizer& tokenizer;
  const ModelConfig& model;
};

struct EngineLoopOptions {
  SchedulerConfig scheduler;
  // Requests submitted and not yet final, over all clients; submit() refuses
  // more so a flood of requests cannot grow the queue without bound.
  int max_pending = 256;
  // Where the forward runs: "cpu", "cuda" (fails without a usable device or
  // a CUDA build) or "auto" (cuda when it can be, else cpu): open_device's
  // kind (engine/device.h), which says what each picks.
  std::string device = "cpu";
};

class EngineLoop {
 public:
  enum class SubmitError { kTooManyPending, kStopping };

  // Loads the model and its tokenizer and builds the scheduler; the thread
  // starts with start(). Errors name the file or option at fault. With the
  // prefix cache on it also logs the cache's warnings (an L3 that cannot be
  // used is one: the daemon then runs on L1 + L2) and measures the tiers'
  // load costs against prefill (Scheduler::calibrate_tier_costs), logging
  // them, before any request can arrive.
  static std::expected<std::unique_ptr<EngineLoop>, std::string> create(
      const std::string& model_dir, const EngineLoopOptions& options);

  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;
  // Stops the thread if it still runs.
  ~EngineLoop();

  void start();
  // Cancels every live request (each sink gets its final event), then joins
  // the thread. Idempotent; later submit() calls fail with kStopping. The
  // final events come from the engine thread: on a loop never start()ed
  // there is none, and what was submitted is dropped with its sink uncalled
  // (kvtierd starts the loop before it accepts a connection).
  void stop();

  // Thread-safe. The first half of a graceful stop: from now on submit()
  // fails with kStopping, while requests already submitted run on.
  // `on_drained` is called once, on the engine thread, when none is left
  // (at once, from the engine thread, if none is running); it must only post
  // elsewhere. Dropped uncalled if stop() comes first. Call once.
  void drain(std::function<void()> on_drained);

  // Thread-safe. Applies the scheduler's runtime tunables
  // (Scheduler::reconfigure: token_budget, max_batch_size, policy) and
  // max_pending between two steps. `reply` gets the scheduler's refusal, in
  // which case nothing changed; it is called on the engine thread and
  // dropped uncalled after stop().
  void reconfigure(SchedulerConfig scheduler, int max_pending,
                   std::function<void(std::expected<void, std::string>)> reply);

  // Thread-safe. Queues a generation: the one way every front door asks for
  // one. On the engine thread, request_params (wire/prompt.h) joins `prompt` (text
  // or token ids) to `options` and Scheduler::submit validates the request;
  // a refusal comes back as a final error event. `sink` receives every event
  // of the request. `owner` decides who may cancel it (cancel_allowed,
  // wire/access.h).
  std::expected<RequestId, SubmitError> submit(wire::Prompt prompt, RequestOptions options,
                                               EventSink sink, wire::RequestOwner owner);

  // Thread-safe. Asks for the request to be cancelled on behalf of `caller`;
  // its sink gets a final event with finish_reason "cancelled" (unless it
  // finishes first). kUnknown for an id that is unknown or already final,
  // kNotAllowed when cancel_allowed says no (nothing happens then).
  enum class CancelResult { kCancelling, kUnknown, kNotAllowed };
  CancelResult cancel(RequestId id, const wire::RequestOwner& caller, bool caller_privileged);

  // Thread-safe. `reply` is called on the engine thread with a snapshot;
  // after stop() it is dropped uncalled.
  void stats(std::function<void(EngineStats)> reply);

  // Thread-safe. Runs `task` on the engine thread between two steps, with
  // the scheduler and the tokenizer: the one way a session reaches the
  // prefix cache. `task` must not block on other threads nor call back into
  // the EngineLoop; it answers by posting elsewhere. Dropped uncalled after
  // stop().
  void call(std::function<void(EngineAccess&)> task);

  // The prefix cache's contents as a stream (engine/cache/block_event.h),
  // for a router in front of a fleet. A subscriber first gets a snapshot:
  // every block stored now and where, as of batch `seq`; then every batch
  // after it, numbered seq + 1, seq + 2, ... with nothing skipped, each the
  // events of one engine step in order. A subscriber that misses a batch
  // (its connection dropped) subscribes again for a fresh snapshot.
  struct CacheSnapshot {
    bool enabled = false;  // false: no prefix cache, no events will come
    std::uint64_t seq = 0;
    // What a block key is made from (block_hash.h): root_key(fingerprint,
    // salt), then chain_key over each page_size tokens.
    std::uint64_t fingerprint = 0;
    int page_size = 0;
    std::vector<BlockEvent> blocks;  // each `stored`
  };
  struct CacheEvents {
    std::uint64_t seq = 0;
    std::shared_ptr<const std::vector<BlockEvent>> events;  // shared by every subscriber
  };
  // Called ON THE ENGINE THREAD with each batch; it must only post the batch
  // elsewhere. Returns false once its subscriber is gone, which unsubscribes
  // it.
  using CacheEventSink = std::function<bool(const CacheEvents&)>;
  // Thread-safe. Subscribes `sink`; `reply` gets the snapshot, on the engine
  // thread, before `sink` gets any batch. Both are dropped uncalled after
  // stop().
  void subscribe_cache(CacheEventSink sink, std::function<void(CacheSnapshot)> reply);

  // Thread-safe (immutable after create()).
  const ModelConfig& model_config() const { return model_->config(); }
  // Where the forward runs: "cpu" or "cuda (<device name>)". Fixed at create().
  const std::string& device() const { return device_.name; }
  // Thread-safe (pure over what create() measured). The token budgets
  // `scheduler`'s settings come to on this device, and why: what the
  // scheduler runs with once they are in force (engine/scheduling/budget_choice.h).
  BudgetChoice budgets(const SchedulerConfig& scheduler) const {
    return resolve_budgets(scheduler, sweep_);
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct SubmitCommand {
    RequestId id;
    wire::Prompt prompt;
    RequestOptions options;
    EventSink sink;
    Clock::time_point submitted;
  };
  struct CancelCommand {
    RequestId id;
  };
  struct StatsCommand {
    std::function<void(EngineStats)> reply;
  };
  struct DrainCommand {
    std::function<void()> on_drained;
  };
  struct ReconfigureCommand {
    SchedulerConfig scheduler;
    int max_pending;
    std::function<void(std::expected<void, std::string>)> reply;
  };
  struct CallCommand {
    std::function<void(EngineAccess&)> task;
  };
  using Command = std::variant<SubmitCommand, CancelCommand, StatsCommand, DrainCommand,
                               ReconfigureCommand, CallCommand>;

  // A request the engine thread is running, keyed by its id.
  struct Live {
    EventSink sink;
    Clock::time_point submitted;
    std::optional<Clock::time_point> admitted;
    std::optional<Clock::time_point> first_token;
    int samples = 1;           // RequestParams::n
    int samples_finished = 0;  // the request is final when this reaches `samples`
    // By sample: when its last token came (inter-token latency).
    std::vector<std::optional<Clock::time_point>> last_token;
  };

  EngineLoop(std::unique_ptr<Model> model, Device device, std::unique_ptr<Tokenizer> tokenizer,
             std::unique_ptr<Scheduler> scheduler, EngineLoopOptions options);

  void run();
  void handle(SubmitCommand& c);
  void handle(CancelCommand& c);
  void handle(StatsCommand& c);
  void handle(DrainCommand& c);
  void handle(ReconfigureCommand& c);
  void handle(CallCommand& c);
  void step();
  // Sends the final event of request (group) `id` and forgets it.
  // `cancelled`: every sample not done counts as cancelled.
  void finish(RequestId id, Live& live, bool cancelled);
  void fail(RequestId id, const EventSink& sink, std::string error, bool invalid_params);
  // Logprobs with each token's text.
  std::vector<TokenLogprobs> with_text(std::span<const LogprobsEntry> entries) const;
  void cancel_all();
  // Removes `id` from the set of non-final requests (under mu_); returns
  // who submitted it.
  // Sends the step's cache events to the subscribers as one batch; stops
  // listening to the cache when none is left.
  void publish_cache_events();
  wire::RequestOwner mark_final(RequestId id);

  // Engine-thread state. The Model and Tokenizer live on the heap so the
  // Scheduler's references to them stay valid.
  // The device outlives the scheduler (whose cache hands L1 blocks back) and
  // goes before the model (the GPU forward refers to it).
  std::unique_ptr<Model> model_;
  Device device_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
  PassSweep sweep_;  // the scheduler's pass sweep at create(): immutable
  EngineLoopOptions options_;
  std::unordered_map<RequestId, Live> live_;  // submitted to the scheduler, not final
  long completed_ = 0;
  long cancelled_ = 0;
  long failed_ = 0;
  long tokens_generated_ = 0;
  RequestMetrics metrics_;
  std::function<void()> on_drained_;  // set by drain(), called once live_ is empty
  // cache.subscribe's: the subscribers, the events of the step under way
  // (the cache's listener fills it while anyone subscribes), and the number
  // of the last batch sent.
  std::vector<CacheEventSink> cache_subscribers_;
  std::vector<BlockEvent> cache_events_;
  std::uint64_t cache_seq_ = 0;

  // Shared with submitting threads.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> inbox_;  // guarded by mu_
  // guarded by mu_: submitted, not final, and who submitted each
  std::unordered_map<RequestId, wire::RequestOwner> active_;
  RequestId next_id_ = 1;  // guarded by mu_
  long submitted_ = 0;     // guarded by mu_
  int max_pending_;        // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  bool draining_ = false;  // guarded by mu_: submit() refuses
  std::thread thread_;
};

}  // namespace kvtier::daemon
