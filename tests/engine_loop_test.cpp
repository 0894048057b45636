// Unit tests of daemon/engine_loop.h: an EngineLoop over the bundled model,
// built in-process and driven through its public API alone (no socket, no
// kvtierd). A Recorder gathers each request's events as its sink sees them,
// and every wait is on a condition variable or a future with a generous
// bound, so a loop that hangs fails the test instead of hanging the suite.
//
// Where a test needs the engine at a known point, it gets there by order,
// never by timing:
//  * Before start() no thread runs: what is submitted (and cancelled) then
//    reaches the engine together, in order, before its first step.
//  * A Recorder made with kHoldAtFirstToken holds the engine thread inside
//    the sink at the request's first token until the test lets go. Real
//    sinks must not block (it stalls every request); here the stall is the
//    point: while it lasts the request has a token and is not finished, and
//    what the test queues meanwhile reaches the engine before its next step.
#include "daemon/engine_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "engine/model/generator.h"
#include "engine/scheduling/request.h"
#include "test_util.h"
#include "tiers/block_pool.h"

namespace kvtier::daemon {
namespace {

using namespace std::chrono_literals;

// The bound of every wait: far beyond what any test here takes, even under
// the sanitizers, so only a hang reaches it.
constexpr auto kWait = 60s;

const wire::RequestOwner kOwner{.connection = 1, .uid = 1000};

std::string model_dir() {
  return (std::filesystem::path(KVTIER_SOURCE_DIR) / "models/fortunes-char").string();
}

std::unique_ptr<EngineLoop> make_loop(const EngineLoopOptions& options) {
  auto loop = EngineLoop::create(model_dir(), options);
  if (!loop) {
    ADD_FAILURE() << "EngineLoop::create: " << loop.error();
    return nullptr;
  }
  return std::move(*loop);
}

// With the default options: the CPU, no prefix cache.
std::unique_ptr<EngineLoop> make_loop() {
  const EngineLoopOptions options;
  return make_loop(options);
}

RequestParams greedy(int max_tokens) {
  RequestParams p;
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

RequestParams sampled(int max_tokens, std::uint64_t seed, int n = 1) {
  RequestParams p;
  p.sampling.temperature = 0.9f;
  p.sampling.seed = seed;
  p.max_tokens = max_tokens;
  p.n = n;
  return p;
}

std::vector<int> encode(const std::string& text) {
  auto tokens = test_util::bundled_model().tokenizer->encode(text);
  EXPECT_TRUE(tokens.has_value()) << text;
  return tokens.value_or(std::vector<int>{});
}

// What generate() makes of the same request: what the loop must give.
Generation reference(const std::string& prompt, const RequestParams& params) {
  test_util::BundledModel& bundled = test_util::bundled_model();
  const int page_size = 16;
  tiers::BlockPool pool(bundled.model.kv_layout(page_size).block_bytes(),
                        bundled.model.config().block_size / page_size + 1);
  GenerateOptions options;
  options.sampling = params.sampling;
  options.max_tokens = params.max_tokens;
  options.stop = params.stop;
  options.page_size = page_size;
  const std::vector<int> tokens = encode(prompt);
  auto out = generate(bundled.model, pool, bundled.tokenizer.get(), tokens, options);
  EXPECT_TRUE(out.has_value()) << (out ? "" : out.error());
  return out.value_or(Generation{});
}

// One request's events, in the order its sink was called. Thread-safe: the
// sink runs on the engine thread, the test reads on its own.
class Recorder {
 public:
  enum Mode { kPassThrough, kHoldAtFirstToken };
  explicit Recorder(Mode mode = kPassThrough) : state_(std::make_shared<State>()) {
    state_->hold = mode == kHoldAtFirstToken;
  }
  ~Recorder() { release(); }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  EventSink sink() const {
    return [state = state_](EngineEvent event) { state->on_event(std::move(event)); };
  }

  // Waits for the final event; false if none came within kWait.
  bool wait_final() const {
    std::unique_lock lock(state_->mu);
    return state_->cv.wait_for(lock, kWait, [&] { return state_->finals > 0; });
  }
  // kHoldAtFirstToken: waits until the sink holds the engine thread.
  bool wait_held() const {
    std::unique_lock lock(state_->mu);
    return state_->cv.wait_for(lock, kWait, [&] { return state_->held; });
  }
  // Lets a held engine thread go on (and any later hold pass at once).
  void release() const {
    {
      std::lock_guard lock(state_->mu);
      state_->released = true;
    }
    state_->cv.notify_all();
  }

  std::vector<EngineEvent> events() const {
    std::lock_guard lock(state_->mu);
    return state_->events;
  }
  int finals() const {
    std::lock_guard lock(state_->mu);
    return state_->finals;
  }
  // The final event's result; an empty one (and a failure) if there is none.
  GenerateResult result() const {
    std::lock_guard lock(state_->mu);
    for (const EngineEvent& e : state_->events) {
      if (e.final && e.result) return *e.result;
    }
    ADD_FAILURE() << "no final event with a result";
    return GenerateResult{};
  }
  // The threads the sink was called on.
  std::set<std::thread::id> threads() const {
    std::lock_guard lock(state_->mu);
    return state_->threads;
  }
  // Whether any copy of the sink is still held (by the loop): while none is,
  // no event can come.
  bool sink_held() const { return state_.use_count() > 1; }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<EngineEvent> events;
    std::set<std::thread::id> threads;
    int finals = 0;
    bool hold = false;
    bool held = false;
    bool released = false;

    void on_event(EngineEvent event) {
      std::unique_lock lock(mu);
      threads.insert(std::this_thread::get_id());
      const bool hold_here = hold && !held && !event.final && !event.tokens.empty();
      finals += event.final ? 1 : 0;
      events.push_back(std::move(event));
      held = held || hold_here;
      cv.notify_all();
      if (hold_here) cv.wait_for(lock, kWait, [&] { return released; });
    }
  };
  std::shared_ptr<State> state_;
};

// What the header promises of one request's stream: every event names `id`;
// exactly one is final, and it is the last; progress events carry no result
// or error and name a sample the result has; and per sample, the progress
// tokens and text put together are that sample's result, in order.
::testing::AssertionResult stream_is_whole(const std::vector<EngineEvent>& events, RequestId id) {
  if (events.empty()) return ::testing::AssertionFailure() << "no events";
  int finals = 0;
  for (const EngineEvent& e : events) {
    if (e.id != id) return ::testing::AssertionFailure() << "an event of " << e.id << " for " << id;
    finals += e.final ? 1 : 0;
  }
  if (finals != 1) return ::testing::AssertionFailure() << finals << " final events";
  const EngineEvent& last = events.back();
  if (!last.final) return ::testing::AssertionFailure() << "the final event is not the last";
  if (!last.result)
    return ::testing::AssertionFailure() << "final without a result: " << last.error;
  const std::vector<SampleResult>& samples = last.result->samples;
  std::vector<std::vector<int>> tokens(samples.size());
  std::vector<std::string> text(samples.size());
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const EngineEvent& e = events[i];
    if (e.result || !e.error.empty())
      return ::testing::AssertionFailure() << "progress event " << i << " has a result or error";
    if (e.sample < 0 || e.sample >= static_cast<int>(samples.size()))
      return ::testing::AssertionFailure()
             << "progress event " << i << " names sample " << e.sample;
    tokens[e.sample].insert(tokens[e.sample].end(), e.tokens.begin(), e.tokens.end());
    text[e.sample] += e.text;
  }
  for (std::size_t s = 0; s < samples.size(); ++s) {
    if (tokens[s] != samples[s].tokens)
      return ::testing::AssertionFailure()
             << "sample " << s << ": " << tokens[s].size() << " tokens streamed, "
             << samples[s].tokens.size() << " in the result";
    if (text[s] != samples[s].text)
      return ::testing::AssertionFailure() << "sample " << s << ": streamed \"" << text[s]
                                           << "\", result \"" << samples[s].text << "\"";
  }
  return ::testing::AssertionSuccess();
}

// A reply from the engine thread: the callback to hand the loop, and a
// bounded wait for what it was called with.
template <typename T>
class Reply {
 public:
  Reply() : promise_(std::make_shared<std::promise<T>>()), future_(promise_->get_future()) {}
  std::function<void(T)> callback() const {
    return [promise = promise_](T value) { promise->set_value(std::move(value)); };
  }
  // What the callback got; nullopt (and a failure) if it was not called
  // within kWait.
  std::optional<T> wait() {
    if (future_.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << "no reply from the engine thread";
      return std::nullopt;
    }
    return future_.get();
  }

 private:
  std::shared_ptr<std::promise<T>> promise_;
  std::future<T> future_;
};

// The loop's stats, from the engine thread.
std::optional<EngineStats> stats_of(EngineLoop& loop) {
  Reply<EngineStats> reply;
  loop.stats(reply.callback());
  return reply.wait();
}

RequestId submit(EngineLoop& loop, const Recorder& recorder, wire::Prompt prompt,
                 RequestParams params, const wire::RequestOwner& owner = kOwner) {
  auto id = loop.submit(std::move(prompt), std::move(params), recorder.sink(), owner);
  EXPECT_TRUE(id.has_value()) << "submit refused";
  return id.value_or(0);
}

// The source a request's TTFT is counted under: the tier that served the
// most of its prompt, unless prefilling served more; ties to the tier.
TEST(EngineLoopTest, APromptsSourceIsWhereMostOfItCameFrom) {
  const auto counts = [](int l1, int l2, int l3, int remote) {
    TierCounts c;
    c[0] = l1, c[1] = l2, c[2] = l3, c[3] = remote;
    return c;
  };
  EXPECT_STREQ(prompt_source_name(prompt_source(counts(0, 0, 0, 0), 5)), "computed");
  EXPECT_STREQ(prompt_source_name(prompt_source(counts(32, 0, 0, 0), 40)), "l1");
  EXPECT_STREQ(prompt_source_name(prompt_source(counts(0, 16, 0, 0), 40)), "computed");
  EXPECT_STREQ(prompt_source_name(prompt_source(counts(0, 16, 16, 0), 40)), "l2");
  EXPECT_STREQ(prompt_source_name(prompt_source(counts(0, 0, 16, 32), 49)), "remote");
  EXPECT_STREQ(prompt_source_name(prompt_source(counts(16, 0, 0, 0), 32)), "l1");  // a tie
}

TEST(EngineLoopTest, CreateSaysWhatItCannotUse) {
  EngineLoopOptions options;
  auto missing = EngineLoop::create(
      (std::filesystem::path(KVTIER_SOURCE_DIR) / "no-such-model").string(), options);
  ASSERT_FALSE(missing.has_value());
  EXPECT_TRUE(test_util::contains(missing.error(), "no-such-model"));

  options.max_pending = 0;
  auto no_pending = EngineLoop::create(model_dir(), options);
  ASSERT_FALSE(no_pending.has_value());
  EXPECT_TRUE(test_util::contains(no_pending.error(), "max_pending"));

  options.max_pending = 1;
  options.scheduler.token_budget = options.scheduler.max_batch_size - 1;
  auto bad_budget = EngineLoop::create(model_dir(), options);
  ASSERT_FALSE(bad_budget.has_value());
  EXPECT_TRUE(test_util::contains(bad_budget.error(), "token_budget"));

  auto loop = make_loop();
  ASSERT_TRUE(loop);
  EXPECT_EQ(loop->device(), "cpu");
  EXPECT_EQ(loop->model_config().vocab_size, test_util::bundled_model().model.config().vocab_size);
}

TEST(EngineLoopTest, EventsStreamInOrderAndEndInOneFinalThatMatchesGenerate) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  struct Case {
    std::string prompt;
    bool as_tokens;  // submitted as token ids rather than text
    int max_tokens;
  };
  const std::vector<Case> cases = {
      {"The fool", false, 8}, {"A wise man", true, 12}, {"Ask", false, 5}};
  std::vector<std::unique_ptr<Recorder>> recorders;
  std::vector<RequestId> ids;
  // Submitted before the thread starts: the ids are the daemon's own, known
  // before the engine has seen the requests.
  for (const Case& c : cases) {
    recorders.push_back(std::make_unique<Recorder>());
    wire::Prompt prompt = c.prompt;
    if (c.as_tokens) prompt = encode(c.prompt);
    ids.push_back(submit(*loop, *recorders.back(), std::move(prompt), greedy(c.max_tokens)));
  }
  EXPECT_EQ(std::set<RequestId>(ids.begin(), ids.end()).size(), cases.size());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), RequestId{0}), 0);
  loop->start();

  long tokens = 0;
  std::set<std::thread::id> threads;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].prompt);
    ASSERT_TRUE(recorders[i]->wait_final());
    EXPECT_TRUE(stream_is_whole(recorders[i]->events(), ids[i]));
    const GenerateResult r = recorders[i]->result();
    const Generation want = reference(cases[i].prompt, greedy(cases[i].max_tokens));
    ASSERT_EQ(r.samples.size(), 1u);
    EXPECT_EQ(r.samples[0].tokens, want.tokens);
    EXPECT_EQ(r.samples[0].text, want.text);
    EXPECT_EQ(r.samples[0].tokens.size(), static_cast<std::size_t>(cases[i].max_tokens));
    EXPECT_EQ(r.samples[0].finish_reason, "length");
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.prompt_tokens, static_cast<int>(cases[i].prompt.size()));
    EXPECT_EQ(r.cached_tokens.total(), 0);  // the prefix cache is off
    // Admitted, then a first token, then finished: in that order. The wait
    // ends as the admitting step begins, so the first prefill is never
    // counted as queueing (it was, ending queue_ms with that step).
    EXPECT_LT(r.queue_ms, r.ttft_ms);
    EXPECT_LE(r.ttft_ms, r.total_ms);
    EXPECT_GT(r.ttft_ms, 0);
    tokens += static_cast<long>(r.samples[0].tokens.size());
    const auto t = recorders[i]->threads();
    threads.insert(t.begin(), t.end());
  }
  // Every sink was called on the one engine thread.
  EXPECT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);

  const auto stats = stats_of(*loop);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->submitted, 3);
  EXPECT_EQ(stats->completed, 3);
  EXPECT_EQ(stats->pending, 0);
  EXPECT_EQ(stats->cancelled, 0);
  EXPECT_EQ(stats->failed, 0);
  EXPECT_EQ(stats->tokens_generated, tokens);
  EXPECT_FALSE(stats->cache.has_value());
}

TEST(EngineLoopTest, TheSameGreedyRequestGivesTheSameTokensSideBySideAndLater) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  Recorder a, b, c;
  const RequestId ida = submit(*loop, a, "Never", greedy(20));
  const RequestId idb = submit(*loop, b, "Never", greedy(20));
  ASSERT_TRUE(a.wait_final());
  ASSERT_TRUE(b.wait_final());
  const RequestId idc = submit(*loop, c, "Never", greedy(20));
  ASSERT_TRUE(c.wait_final());
  EXPECT_TRUE(stream_is_whole(a.events(), ida));
  EXPECT_TRUE(stream_is_whole(b.events(), idb));
  EXPECT_TRUE(stream_is_whole(c.events(), idc));
  EXPECT_EQ(a.result().samples.at(0).tokens.size(), 20u);
  EXPECT_EQ(b.result().samples.at(0).tokens, a.result().samples.at(0).tokens);
  EXPECT_EQ(c.result().samples.at(0).tokens, a.result().samples.at(0).tokens);
  EXPECT_EQ(c.result().samples.at(0).text, a.result().samples.at(0).text);
}

TEST(EngineLoopTest, SamplesEndInOneFinalEventAndEachIsItsSingleRequest) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  const std::uint64_t seed = 11;
  Recorder group, first, third;
  const RequestId id = submit(*loop, group, "Love", sampled(12, seed, 3));
  const RequestId id0 = submit(*loop, first, "Love", sampled(12, seed));
  // Sample i draws with sample_seed(seed, i) (request.h).
  const RequestId id2 = submit(*loop, third, "Love", sampled(12, sample_seed(seed, 2)));
  ASSERT_TRUE(group.wait_final());
  ASSERT_TRUE(first.wait_final());
  ASSERT_TRUE(third.wait_final());

  const std::vector<EngineEvent> events = group.events();
  EXPECT_TRUE(stream_is_whole(events, id));
  EXPECT_TRUE(stream_is_whole(first.events(), id0));
  EXPECT_TRUE(stream_is_whole(third.events(), id2));
  std::set<int> streamed;
  for (const EngineEvent& e : events) {
    if (!e.final) streamed.insert(e.sample);
  }
  EXPECT_EQ(streamed, (std::set<int>{0, 1, 2}));

  const GenerateResult r = group.result();
  ASSERT_EQ(r.samples.size(), 3u);
  for (const SampleResult& s : r.samples) {
    EXPECT_EQ(s.tokens.size(), 12u);
    EXPECT_EQ(s.finish_reason, "length");
  }
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.prompt_tokens, 4);
  EXPECT_EQ(r.samples[0].tokens, first.result().samples.at(0).tokens);
  EXPECT_EQ(r.samples[0].text, first.result().samples.at(0).text);
  EXPECT_EQ(r.samples[2].tokens, third.result().samples.at(0).tokens);
  EXPECT_EQ(r.samples[0].tokens, reference("Love", sampled(12, seed)).tokens);

  const auto stats = stats_of(*loop);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->completed, 3);  // a request with its samples counts once
  EXPECT_EQ(stats->tokens_generated, 5 * 12);
}

TEST(EngineLoopTest, ACancelBeforeTheFirstStepLeavesEverySampleEmptyAndCancelled) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  Recorder cancelled, other;
  // Before start(): the cancel reaches the engine right behind its submit.
  const RequestId id = submit(*loop, cancelled, "Stop", sampled(16, 5, 2));
  const RequestId other_id = submit(*loop, other, "Go", greedy(6));
  EXPECT_EQ(loop->cancel(id, kOwner, false), EngineLoop::CancelResult::kCancelling);
  loop->start();
  ASSERT_TRUE(cancelled.wait_final());
  ASSERT_TRUE(other.wait_final());

  EXPECT_EQ(cancelled.events().size(), 1u);  // the final one alone: nothing ran
  EXPECT_TRUE(stream_is_whole(cancelled.events(), id));
  const GenerateResult r = cancelled.result();
  EXPECT_EQ(r.finish_reason, "cancelled");
  ASSERT_EQ(r.samples.size(), 2u);
  for (const SampleResult& s : r.samples) {
    EXPECT_TRUE(s.tokens.empty());
    EXPECT_TRUE(s.text.empty());
    EXPECT_EQ(s.finish_reason, "cancelled");
  }
  EXPECT_EQ(r.prompt_tokens, 4);
  EXPECT_EQ(r.ttft_ms, 0);

  EXPECT_TRUE(stream_is_whole(other.events(), other_id));
  EXPECT_EQ(other.result().finish_reason, "length");
  // Final now: a second cancel finds nothing.
  EXPECT_EQ(loop->cancel(id, kOwner, false), EngineLoop::CancelResult::kUnknown);

  const auto stats = stats_of(*loop);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->cancelled, 1);
  EXPECT_EQ(stats->completed, 1);
  EXPECT_EQ(stats->pending, 0);
}

TEST(EngineLoopTest, CancelEndsARunningAndAQueuedRequestWithOneFinalEach) {
  EngineLoopOptions options;
  options.scheduler.max_batch_size = 1;  // the second request waits for the first
  auto loop = make_loop(options);
  ASSERT_TRUE(loop);
  Recorder running(Recorder::kHoldAtFirstToken), queued;
  const RequestId running_id = submit(*loop, running, "Fortune", greedy(64));
  const RequestId queued_id = submit(*loop, queued, "favours", greedy(64));
  loop->start();
  ASSERT_TRUE(running.wait_held());

  // The engine is held inside its first step's events: this reaches it first.
  Reply<EngineStats> before;
  loop->stats(before.callback());
  EXPECT_EQ(loop->cancel(running_id, kOwner, false), EngineLoop::CancelResult::kCancelling);
  // Not final until the engine handles the first: asking twice is allowed
  // and still ends in one final event.
  EXPECT_EQ(loop->cancel(running_id, kOwner, false), EngineLoop::CancelResult::kCancelling);
  EXPECT_EQ(loop->cancel(queued_id, kOwner, false), EngineLoop::CancelResult::kCancelling);
  running.release();
  ASSERT_TRUE(running.wait_final());
  ASSERT_TRUE(queued.wait_final());

  const auto s = before.wait();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->scheduler.running, 1);
  EXPECT_EQ(s->scheduler.waiting, 1);
  EXPECT_EQ(s->pending, 2);

  EXPECT_TRUE(stream_is_whole(running.events(), running_id));
  const GenerateResult r = running.result();
  EXPECT_EQ(r.finish_reason, "cancelled");
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].finish_reason, "cancelled");
  // What it made before the cancel is kept, and is what generate() makes.
  const std::vector<int>& got = r.samples[0].tokens;
  EXPECT_GE(got.size(), 1u);
  EXPECT_LT(got.size(), 64u);
  const Generation want = reference("Fortune", greedy(64));
  ASSERT_LE(got.size(), want.tokens.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.tokens.begin()));
  EXPECT_GT(r.ttft_ms, 0);

  EXPECT_EQ(queued.events().size(), 1u);
  EXPECT_TRUE(stream_is_whole(queued.events(), queued_id));
  EXPECT_EQ(queued.result().finish_reason, "cancelled");
  EXPECT_TRUE(queued.result().samples.at(0).tokens.empty());

  const auto after = stats_of(*loop);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->cancelled, 2);
  EXPECT_EQ(after->completed, 0);
  EXPECT_EQ(after->pending, 0);
  EXPECT_EQ(after->scheduler.running + after->scheduler.waiting, 0);
  EXPECT_EQ(after->scheduler.blocks_used, 0);  // the cancelled request's KV went back
}

TEST(EngineLoopTest, CancelOfAnUnknownOrFinishedIdIsUnknown) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  EXPECT_EQ(loop->cancel(12345, kOwner, true), EngineLoop::CancelResult::kUnknown);
  loop->start();
  Recorder r;
  const RequestId id = submit(*loop, r, "Done", greedy(3));
  EXPECT_EQ(loop->cancel(id + 1, kOwner, true), EngineLoop::CancelResult::kUnknown);
  ASSERT_TRUE(r.wait_final());
  EXPECT_EQ(loop->cancel(id, kOwner, true), EngineLoop::CancelResult::kUnknown);
  EXPECT_EQ(r.result().finish_reason, "length");
  EXPECT_EQ(r.finals(), 1);
}

TEST(EngineLoopTest, OnlyTheSameConnectionTheSameUidOrAPrivilegedCallerMayCancel) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  const wire::RequestOwner no_uid_owner{.connection = 5, .uid = std::nullopt};
  Recorder refused, by_connection, by_uid, by_privileged, refused_no_uid;
  const RequestId refused_id = submit(*loop, refused, "One", greedy(4));
  const RequestId connection_id = submit(*loop, by_connection, "Two", greedy(4));
  const RequestId uid_id = submit(*loop, by_uid, "Three", greedy(4));
  const RequestId privileged_id = submit(*loop, by_privileged, "Four", greedy(4));
  const RequestId no_uid_id = submit(*loop, refused_no_uid, "Five", greedy(4), no_uid_owner);

  using CR = EngineLoop::CancelResult;
  // Another connection and another uid; another connection whose uid the
  // kernel did not tell.
  EXPECT_EQ(loop->cancel(refused_id, {.connection = 2, .uid = 2000}, false), CR::kNotAllowed);
  EXPECT_EQ(loop->cancel(refused_id, {.connection = 2, .uid = std::nullopt}, false),
            CR::kNotAllowed);
  EXPECT_EQ(loop->cancel(connection_id, {.connection = 1, .uid = std::nullopt}, false),
            CR::kCancelling);
  EXPECT_EQ(loop->cancel(uid_id, {.connection = 3, .uid = 1000}, false), CR::kCancelling);
  EXPECT_EQ(loop->cancel(privileged_id, {.connection = 9, .uid = 5}, true), CR::kCancelling);
  // An owner without a uid matches no uid, not even another unknown one.
  EXPECT_EQ(loop->cancel(no_uid_id, {.connection = 6, .uid = std::nullopt}, false),
            CR::kNotAllowed);
  loop->start();

  for (Recorder* r : {&refused, &by_connection, &by_uid, &by_privileged, &refused_no_uid}) {
    ASSERT_TRUE(r->wait_final());
  }
  // A refused cancel changed nothing: those ran to their length.
  EXPECT_EQ(refused.result().finish_reason, "length");
  EXPECT_EQ(refused.result().samples.at(0).tokens.size(), 4u);
  EXPECT_EQ(refused_no_uid.result().finish_reason, "length");
  EXPECT_EQ(by_connection.result().finish_reason, "cancelled");
  EXPECT_EQ(by_uid.result().finish_reason, "cancelled");
  EXPECT_EQ(by_privileged.result().finish_reason, "cancelled");
}

TEST(EngineLoopTest, SubmitRefusesPastMaxPendingUntilARequestIsFinal) {
  EngineLoopOptions options;
  options.max_pending = 2;
  auto loop = make_loop(options);
  ASSERT_TRUE(loop);
  Recorder a, b, refused, later;
  const RequestId ida = submit(*loop, a, "One", greedy(4));
  submit(*loop, b, "Two", greedy(4));
  auto third = loop->submit(std::string("Three"), greedy(4), refused.sink(), kOwner);
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error(), EngineLoop::SubmitError::kTooManyPending);
  EXPECT_FALSE(refused.sink_held());  // a refused request gets no events
  loop->start();
  ASSERT_TRUE(a.wait_final());
  // Its final event came after it stopped counting as pending.
  const RequestId id = submit(*loop, later, "Four", greedy(4));
  EXPECT_NE(id, ida);
  ASSERT_TRUE(b.wait_final());
  ASSERT_TRUE(later.wait_final());
  EXPECT_EQ(later.result().finish_reason, "length");
  EXPECT_TRUE(refused.events().empty());
}

TEST(EngineLoopTest, AnInvalidRequestEndsInOneFinalErrorBlamingTheRequest) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  RequestParams zero_tokens = greedy(0);
  RequestParams too_many_samples = sampled(4, 1, kMaxSamples + 1);
  Recorder a, b, c, d;
  const std::vector<std::pair<Recorder*, RequestId>> refused = {
      {&a, submit(*loop, a, "Hello", zero_tokens)},
      {&b, submit(*loop, b, "", greedy(4))},
      {&c, submit(*loop, c, std::vector<int>{1, 9999}, greedy(4))},  // outside the vocabulary
      {&d, submit(*loop, d, "Hello", too_many_samples)},
  };
  for (const auto& [r, id] : refused) {
    ASSERT_TRUE(r->wait_final());
    const std::vector<EngineEvent> events = r->events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].id, id);
    EXPECT_TRUE(events[0].final);
    EXPECT_FALSE(events[0].result.has_value());
    EXPECT_FALSE(events[0].error.empty());
    EXPECT_TRUE(events[0].invalid_params) << events[0].error;
  }
  const auto stats = stats_of(*loop);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->failed, 4);
  EXPECT_EQ(stats->pending, 0);
  EXPECT_EQ(stats->completed, 0);
}

TEST(EngineLoopTest, StopStringsCutTheTextAndTheStreamHoldsNothingBackAtTheEnd) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  Recorder free_run;
  submit(*loop, free_run, "The wise", greedy(40));
  ASSERT_TRUE(free_run.wait_final());
  const SampleResult full = free_run.result().samples.at(0);
  ASSERT_GE(full.text.size(), 20u);
  // A stop string the free run's text holds, from its middle.
  const std::string stop = full.text.substr(14, 3);
  const std::size_t at = full.text.find(stop);

  Recorder stopped;
  RequestParams p = greedy(40);
  p.stop = {stop};
  const RequestId id = submit(*loop, stopped, "The wise", p);
  ASSERT_TRUE(stopped.wait_final());
  EXPECT_TRUE(stream_is_whole(stopped.events(), id));
  const GenerateResult r = stopped.result();
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.samples.at(0).text, full.text.substr(0, at)) << "stop \"" << stop << "\"";
  const std::vector<int>& got = r.samples.at(0).tokens;
  ASSERT_LE(got.size(), full.tokens.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), full.tokens.begin()));
}

TEST(EngineLoopTest, ASecondIdenticalRequestIsServedFromL1WithTheSameTokens) {
  EngineLoopOptions options;
  options.scheduler.prefix_cache = true;
  auto loop = make_loop(options);
  ASSERT_TRUE(loop);
  loop->start();
  // Two full pages of 16 and a partial one.
  const std::string prompt = "Fortune favours the bold, they say; fools too.";
  ASSERT_GT(prompt.size(), 32u);
  Recorder first, second;
  submit(*loop, first, prompt, greedy(10));
  ASSERT_TRUE(first.wait_final());
  const RequestId id = submit(*loop, second, prompt, greedy(10));
  ASSERT_TRUE(second.wait_final());
  EXPECT_TRUE(stream_is_whole(second.events(), id));

  const GenerateResult a = first.result();
  const GenerateResult b = second.result();
  EXPECT_EQ(a.cached_tokens.total(), 0);
  EXPECT_GT(b.cached_tokens[Tier::kL1], 0);
  EXPECT_EQ(b.cached_tokens[Tier::kL1] % 16, 0);
  EXPECT_LE(b.cached_tokens[Tier::kL1], static_cast<int>(prompt.size()));
  EXPECT_EQ(b.cached_tokens[Tier::kL2] + b.cached_tokens[Tier::kL3], 0);
  EXPECT_EQ(b.prompt_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(b.samples.at(0).tokens, a.samples.at(0).tokens);
  EXPECT_EQ(b.samples.at(0).text, a.samples.at(0).text);
  EXPECT_EQ(a.samples.at(0).tokens, reference(prompt, greedy(10)).tokens);

  const auto stats = stats_of(*loop);
  ASSERT_TRUE(stats);
  EXPECT_TRUE(stats->cache.has_value());
}

TEST(EngineLoopTest, CallRunsATaskOnTheEngineThreadWithItsScheduler) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  Recorder r;
  submit(*loop, r, "Hi", greedy(2));
  ASSERT_TRUE(r.wait_final());
  struct Seen {
    std::thread::id thread;
    int vocab_size = 0;
    std::size_t encoded = 0;
    bool has_work = true;
  };
  Reply<Seen> reply;
  loop->call([answer = reply.callback()](EngineAccess& access) {
    Seen s;
    s.thread = std::this_thread::get_id();
    s.vocab_size = access.model.vocab_size;
    s.encoded = access.tokenizer.encode("abc").value_or(std::vector<int>{}).size();
    s.has_work = access.scheduler.has_work();
    answer(s);
  });
  const auto s = reply.wait();
  ASSERT_TRUE(s);
  EXPECT_EQ(std::set<std::thread::id>{s->thread}, r.threads());
  EXPECT_EQ(s->vocab_size, loop->model_config().vocab_size);
  EXPECT_EQ(s->encoded, 3u);
  EXPECT_FALSE(s->has_work);
}

TEST(EngineLoopTest, ReconfigureAppliesBetweenStepsAndARefusalChangesNothing) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  auto config_now = [&] {
    Reply<SchedulerConfig> reply;
    loop->call([answer = reply.callback()](EngineAccess& a) { answer(a.scheduler.config()); });
    return reply.wait().value_or(SchedulerConfig{});
  };
  auto reconfigure = [&](const SchedulerConfig& c, int max_pending) {
    Reply<std::expected<void, std::string>> reply;
    loop->reconfigure(c, max_pending, reply.callback());
    return reply.wait().value_or(std::unexpected(std::string("no reply")));
  };
  const SchedulerConfig start = config_now();

  SchedulerConfig bad = start;
  bad.token_budget = bad.max_batch_size - 1;  // below the batch: validate() refuses
  auto refused = reconfigure(bad, 1);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(test_util::contains(refused.error(), "token_budget")) << refused.error();
  EXPECT_EQ(config_now().token_budget, start.token_budget);
  {
    // max_pending is still what it was: a second request is accepted while
    // the first is pending (held at its first token).
    Recorder held(Recorder::kHoldAtFirstToken), second;
    submit(*loop, held, "One", greedy(8));
    ASSERT_TRUE(held.wait_held());
    EXPECT_TRUE(loop->submit(std::string("Two"), greedy(8), second.sink(), kOwner).has_value());
    held.release();
    ASSERT_TRUE(held.wait_final());
    ASSERT_TRUE(second.wait_final());
  }

  SchedulerConfig good = start;
  good.token_budget = start.token_budget * 2;
  ASSERT_TRUE(reconfigure(good, 1).has_value());
  EXPECT_EQ(config_now().token_budget, good.token_budget);
  Recorder held(Recorder::kHoldAtFirstToken), refused_request;
  submit(*loop, held, "One", greedy(8));
  ASSERT_TRUE(held.wait_held());
  auto id = loop->submit(std::string("Two"), greedy(8), refused_request.sink(), kOwner);
  ASSERT_FALSE(id.has_value());
  EXPECT_EQ(id.error(), EngineLoop::SubmitError::kTooManyPending);
  held.release();
  ASSERT_TRUE(held.wait_final());
  EXPECT_EQ(held.result().finish_reason, "length");
}

TEST(EngineLoopTest, DrainWithNothingInFlightCallsBackAtOnceOnTheEngineThread) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  Recorder r;
  submit(*loop, r, "Hi", greedy(2));
  ASSERT_TRUE(r.wait_final());

  auto calls = std::make_shared<std::atomic<int>>(0);
  Reply<std::thread::id> drained;
  loop->drain([calls, answer = drained.callback()] {
    if (calls->fetch_add(1) == 0) answer(std::this_thread::get_id());
  });
  const auto thread = drained.wait();
  ASSERT_TRUE(thread);
  EXPECT_EQ(std::set<std::thread::id>{*thread}, r.threads());

  Recorder late;
  auto refused = loop->submit(std::string("Late"), greedy(2), late.sink(), kOwner);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), EngineLoop::SubmitError::kStopping);
  // Draining refuses new work only: the engine still answers.
  EXPECT_TRUE(stats_of(*loop).has_value());
  loop->stop();
  EXPECT_EQ(calls->load(), 1);
}

TEST(EngineLoopTest, DrainLetsRequestsInFlightFinishAndThenCallsBackOnce) {
  // Before the loop: the drain callback reads them on the engine thread, so
  // they must outlive it.
  Recorder a, b, late;
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  const RequestId ida = submit(*loop, a, "Fools", greedy(16));
  const RequestId idb = submit(*loop, b, "Wise", greedy(24));
  struct Drained {
    int calls = 0;
    int finals_seen = 0;  // final events a and b had had when it was called
  };
  auto drained = std::make_shared<Drained>();
  Reply<bool> done;
  loop->drain([drained, answer = done.callback(), &a, &b] {
    drained->finals_seen = a.finals() + b.finals();
    if (drained->calls++ == 0) answer(true);
  });
  auto refused = loop->submit(std::string("Late"), greedy(2), late.sink(), kOwner);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), EngineLoop::SubmitError::kStopping);
  loop->start();
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(drained->finals_seen, 2);
  EXPECT_TRUE(stream_is_whole(a.events(), ida));
  EXPECT_TRUE(stream_is_whole(b.events(), idb));
  EXPECT_EQ(a.result().finish_reason, "length");
  EXPECT_EQ(a.result().samples.at(0).tokens.size(), 16u);
  EXPECT_EQ(b.result().finish_reason, "length");
  EXPECT_EQ(b.result().samples.at(0).tokens.size(), 24u);
  loop->stop();
  EXPECT_EQ(drained->calls, 1);
  EXPECT_TRUE(late.events().empty());
}

// stop() on another thread while the engine is held: once a cancel of a
// request not yet final answers kUnknown, stop() has begun (cancel refuses
// from then on), so what the engine sees next is the stop.
TEST(EngineLoopTest, StopCancelsWhatRunsAndWhatWaitsAndDropsADrainNotYetCalled) {
  EngineLoopOptions options;
  options.scheduler.max_batch_size = 1;  // everything but the first waits
  auto loop = make_loop(options);
  ASSERT_TRUE(loop);
  Recorder running(Recorder::kHoldAtFirstToken), waiting, probe;
  const RequestId running_id = submit(*loop, running, "Fortune", greedy(64));
  const RequestId waiting_id = submit(*loop, waiting, "favours", greedy(64));
  const RequestId probe_id = submit(*loop, probe, "Probe", greedy(64));
  auto drain_calls = std::make_shared<std::atomic<int>>(0);
  loop->drain([drain_calls] { drain_calls->fetch_add(1); });
  loop->start();
  ASSERT_TRUE(running.wait_held());

  std::thread stopper([&] { loop->stop(); });
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  bool stopping = false;
  while (!stopping && std::chrono::steady_clock::now() < deadline) {
    stopping = loop->cancel(probe_id, kOwner, false) == EngineLoop::CancelResult::kUnknown;
    if (!stopping) std::this_thread::yield();
  }
  running.release();
  stopper.join();
  ASSERT_TRUE(stopping) << "stop() did not begin";

  for (Recorder* r : {&running, &waiting, &probe}) {
    EXPECT_EQ(r->finals(), 1);
    EXPECT_EQ(r->result().finish_reason, "cancelled");
  }
  EXPECT_TRUE(stream_is_whole(running.events(), running_id));
  EXPECT_TRUE(stream_is_whole(waiting.events(), waiting_id));
  EXPECT_GE(running.result().samples.at(0).tokens.size(), 1u);
  EXPECT_LT(running.result().samples.at(0).tokens.size(), 64u);
  EXPECT_TRUE(waiting.result().samples.at(0).tokens.empty());
  EXPECT_EQ(drain_calls->load(), 0);

  loop.reset();
  EXPECT_EQ(drain_calls.use_count(), 1);  // dropped with the loop, never called
  EXPECT_EQ(drain_calls->load(), 0);
  for (Recorder* r : {&running, &waiting, &probe}) EXPECT_FALSE(r->sink_held());
  EXPECT_EQ(running.finals(), 1);
}

TEST(EngineLoopTest, AfterStopNothingIsTakenAndWhatWouldAnswerIsDroppedUncalled) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  Recorder done;
  const RequestId id = submit(*loop, done, "Hi", greedy(2));
  ASSERT_TRUE(done.wait_final());
  loop->stop();
  EXPECT_FALSE(done.sink_held());

  Recorder late;
  auto refused = loop->submit(std::string("Late"), greedy(2), late.sink(), kOwner);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), EngineLoop::SubmitError::kStopping);
  EXPECT_FALSE(late.sink_held());
  EXPECT_EQ(loop->cancel(id, kOwner, true), EngineLoop::CancelResult::kUnknown);
  EXPECT_EQ(loop->cancel(id + 1, kOwner, true), EngineLoop::CancelResult::kUnknown);
  // Dropped at once: no copy of the callbacks is kept to be called later.
  auto answered = std::make_shared<std::atomic<int>>(0);
  loop->stats([answered](EngineStats) { answered->fetch_add(1); });
  loop->call([answered](EngineAccess&) { answered->fetch_add(1); });
  loop->reconfigure(SchedulerConfig{}, 8,
                    [answered](std::expected<void, std::string>) { answered->fetch_add(1); });
  loop->drain([answered] { answered->fetch_add(1); });
  EXPECT_EQ(answered.use_count(), 1);
  loop->stop();  // idempotent
  loop.reset();
  EXPECT_EQ(answered->load(), 0);
  EXPECT_TRUE(late.events().empty());
  EXPECT_EQ(done.finals(), 1);
}

TEST(EngineLoopTest, DestroyingTheLoopEndsARequestInFlightAndKeepsNoSink) {
  auto loop = make_loop();
  ASSERT_TRUE(loop);
  loop->start();
  Recorder r, done;
  submit(*loop, done, "Hi", greedy(2));
  ASSERT_TRUE(done.wait_final());
  const RequestId id = submit(*loop, r, "Fortune", greedy(200));
  loop.reset();  // stops whatever still runs
  // Cancelled or, if it was quick, finished: either way exactly once, and
  // with no copy of its sink left no event can follow.
  EXPECT_EQ(r.finals(), 1);
  EXPECT_TRUE(stream_is_whole(r.events(), id));
  EXPECT_FALSE(r.sink_held());
  EXPECT_FALSE(done.sink_held());
}

}  // namespace
}  // namespace kvtier::daemon
