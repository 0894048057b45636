// The scheduler on the bundled model: admission order under fcfs and
// priority, preemption under a tight KV budget, page-granular accounting,
// cancellation in every state, refused configs and submits, and — the core
// contract — every request's tokens equal to running it alone with
// generate(), whatever the token budget, batch size or preemptions.
// check_invariants() runs after every step of every test.
#include "engine/scheduling/scheduler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "scheduler_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

using test_util::contains;

using test_util::alone;
using test_util::greedy;
using test_util::make_scheduler;
using test_util::sampled;

// What a run of the scheduler did, as seen from its step outputs.
struct Trace {
  std::vector<RequestId> submitted;
  std::vector<RequestId> admitted;       // first time each request left the queue
  std::vector<RequestId> finished;       // in the order their finish events came
  std::vector<RequestId> prefill_order;  // whose prefill chunk each step ran
  std::vector<RequestId> preempted;      // one entry per preemption event
  std::map<RequestId, std::vector<int>> streamed_tokens;
  std::map<RequestId, std::string> streamed_text;
  int steps = 0;
};

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = &test_util::bundled_model().model;
    tokenizer_ = test_util::bundled_model().tokenizer.get();
  }

  std::vector<int> encode(std::string_view text) {
    auto ids = tokenizer_->encode(text);
    EXPECT_TRUE(ids.has_value()) << ids.error();
    return ids.value_or(std::vector<int>{});
  }

  // With the priority and stop strings this suite varies.
  RequestParams params(std::string_view prompt, int max_tokens, int priority = 0,
                       SamplingParams sampling = greedy(), std::vector<std::string> stop = {}) {
    RequestParams p = test_util::request_params(prompt, max_tokens, sampling);
    p.priority = priority;
    p.stop = std::move(stop);
    return p;
  }

  RequestId submit(Scheduler& s, Trace& trace, RequestParams p) {
    auto id = s.submit(std::move(p));
    EXPECT_TRUE(id.has_value()) << id.error();
    trace.submitted.push_back(id.value_or(0));
    return id.value_or(0);
  }

  // One step, its events folded into the trace, then the invariants.
  ::testing::AssertionResult step(Scheduler& s, Trace& trace) {
    const StepOutput out = s.step();
    ++trace.steps;
    if (out.prefill_request) trace.prefill_order.push_back(*out.prefill_request);
    for (const RequestEvent& e : out.events) {
      auto& tokens = trace.streamed_tokens[e.id];
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      trace.streamed_text[e.id] += e.text;
      if (e.finish) trace.finished.push_back(e.id);
      if (e.preempted) trace.preempted.push_back(e.id);
      if (!e.error.empty())
        return ::testing::AssertionFailure() << "request " << e.id << " failed: " << e.error;
    }
    for (RequestId id : trace.submitted) {
      const auto status = s.status(id);
      if (status && *status != RequestStatus::kWaiting && *status != RequestStatus::kCancelled &&
          std::find(trace.admitted.begin(), trace.admitted.end(), id) == trace.admitted.end())
        trace.admitted.push_back(id);
    }
    if (auto ok = s.check_invariants(); !ok)
      return ::testing::AssertionFailure() << "after step " << trace.steps << ": " << ok.error();
    return ::testing::AssertionSuccess();
  }

  // Steps until no work is left; checks that what was streamed is what each
  // request ended with, and that every block went back.
  ::testing::AssertionResult drain(Scheduler& s, Trace& trace) {
    for (int guard = 0; s.has_work(); ++guard) {
      if (guard == 20000) return ::testing::AssertionFailure() << "no end after 20000 steps";
      if (auto ok = step(s, trace); !ok) return ok;
    }
    for (RequestId id : trace.submitted) {
      const Request* r = s.find(id);
      if (r == nullptr || r->status() == RequestStatus::kCancelled) continue;
      const std::vector<int> generated(r->generated().begin(), r->generated().end());
      if (trace.streamed_tokens[id] != generated)
        return ::testing::AssertionFailure() << "request " << id << ": streamed tokens differ";
      if (trace.streamed_text[id] != r->text())
        return ::testing::AssertionFailure()
               << "request " << id << ": streamed \"" << trace.streamed_text[id] << "\" but text \""
               << r->text() << "\"";
    }
    const SchedulerStats st = s.stats();
    if (st.blocks_used != 0 || st.waiting + st.prefilling + st.running != 0)
      return ::testing::AssertionFailure() << "work or blocks left after the run";
    return ::testing::AssertionSuccess();
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
};

Model* SchedulerTest::model_ = nullptr;
Tokenizer* SchedulerTest::tokenizer_ = nullptr;

std::vector<int> as_vector(std::span<const int> s) { return {s.begin(), s.end()}; }

// Seed 003, test 1: with one policy-blind queue, requests are admitted,
// prefilled and finished in arrival order, whatever their priorities say.
TEST_F(SchedulerTest, FcfsAdmitsPrefillsAndFinishesInArrivalOrder) {
  for (int batch : {1, 8}) {
    SchedulerConfig c;
    c.policy = SchedulingPolicy::kFcfs;
    c.max_batch_size = batch;
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    Trace t;
    // Priorities against arrival order, which fcfs must ignore.
    const RequestId a = submit(*s, t, params("O Romeo, ", 10, 2));
    const RequestId b = submit(*s, t, params("To be or ", 10, 1));
    const RequestId d = submit(*s, t, params("KING HENRY:\n", 10, 0));
    ASSERT_TRUE(drain(*s, t));
    const std::vector<RequestId> order{a, b, d};
    EXPECT_EQ(t.admitted, order) << "batch " << batch;
    EXPECT_EQ(t.finished, order) << "batch " << batch;
    EXPECT_EQ(t.prefill_order, order) << "batch " << batch;  // each prompt fits one chunk
    for (RequestId id : order) {
      const Request* r = s->find(id);
      EXPECT_EQ(r->status(), RequestStatus::kDone);
      EXPECT_EQ(r->num_generated(), 10);
      EXPECT_EQ(r->finish_reason(), FinishReason::kLength);
      EXPECT_EQ(r->text(), tokenizer_->decode(r->generated()));
    }
    if (batch == 8) {
      // All three fit at once: later requests were decoding while earlier
      // ones still ran, i.e. the batch really was continuous.
      EXPECT_EQ(t.steps, 3 + 9);
    }
  }
}

// Seed 003, test 2: a long low-priority request and a short urgent one
// arriving together. Priority admits and finishes the urgent one first; fcfs
// keeps arrival order.
TEST_F(SchedulerTest, PriorityJumpsTheQueueAndFcfsDoesNot) {
  std::string long_prompt;
  for (int i = 0; i < 15; ++i) long_prompt += "A ";
  for (auto policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    for (int batch : {1, 2}) {
      SchedulerConfig c;
      c.policy = policy;
      c.max_batch_size = batch;
      c.token_budget = 16;
      auto s = make_scheduler(c);
      ASSERT_NE(s, nullptr);
      Trace t;
      const RequestId slow = submit(*s, t, params(long_prompt, 3, 2));
      const RequestId urgent = submit(*s, t, params("B B B ", 3, 0));
      ASSERT_TRUE(drain(*s, t));
      const std::vector<RequestId> expected = policy == SchedulingPolicy::kPriority
                                                  ? std::vector<RequestId>{urgent, slow}
                                                  : std::vector<RequestId>{slow, urgent};
      const std::string what = std::string(to_string(policy)) + " batch " + std::to_string(batch);
      EXPECT_EQ(t.finished, expected) << what;
      ASSERT_FALSE(t.prefill_order.empty());
      EXPECT_EQ(t.prefill_order.front(), expected.front()) << what;
      if (batch == 1) {
        EXPECT_EQ(t.admitted, expected) << what;
      }
      EXPECT_EQ(s->find(slow)->num_generated(), 3);
      EXPECT_EQ(s->find(urgent)->num_generated(), 3);
    }
  }
}

// A priority request arriving while a less urgent one is still prefilling
// takes the next prefill chunk; an earlier but less urgent arrival waits for
// both.
TEST_F(SchedulerTest, UrgentLateArrivalTakesTheNextPrefillChunk) {
  SchedulerConfig c;
  c.policy = SchedulingPolicy::kPriority;
  c.token_budget = 8;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestId first = submit(*s, t, params("Fortune: ", 6, 1));
  ASSERT_TRUE(step(*s, t));  // first chunk of `first` (9 tokens, 2 chunks)
  const RequestId meh = submit(*s, t, params("Later, less urgent ", 6, 3));
  const RequestId urgent = submit(*s, t, params("Now! ", 6, 0));
  ASSERT_TRUE(drain(*s, t));
  ASSERT_GE(t.prefill_order.size(), 4u);
  EXPECT_EQ(t.prefill_order[0], first);
  EXPECT_EQ(t.prefill_order[1], urgent);
  EXPECT_EQ(t.prefill_order[2], first);
  EXPECT_EQ(t.prefill_order[3], meh);
  EXPECT_EQ(t.finished.front(), urgent);
}

// The backlog a router weighs a daemon by: the rows still to prefill of
// the waiting and prefilling requests, and a decode row per running one.
TEST_F(SchedulerTest, BacklogRowsAreWhatIsLeftToPrefillAndOneRowPerDecode) {
  SchedulerConfig c;
  c.token_budget = 8;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestId first = submit(*s, t, params("Fortune: ", 6));           // 9 tokens
  const RequestId second = submit(*s, t, params("seventeen chars!!", 6));  // 17
  EXPECT_EQ(s->stats().backlog_rows, 9 + 17);
  ASSERT_TRUE(step(*s, t));  // 8 of the first's 9
  EXPECT_EQ(s->stats().backlog_rows, 1 + 17);
  while (s->status(first) != RequestStatus::kRunning) ASSERT_TRUE(step(*s, t));
  if (s->status(second) == RequestStatus::kPrefilling) {
    const int left =
        static_cast<int>(s->find(second)->tokens().size()) - s->find(second)->prefill_cursor();
    EXPECT_GT(left, 0);
    EXPECT_EQ(s->stats().backlog_rows, 1 + left);
  }
  ASSERT_TRUE(drain(*s, t));
  EXPECT_EQ(s->stats().backlog_rows, 0);
}

// Seed 003's setting for tests 3 and 4: a KV budget of 24 tokens (six pages
// of 4), too small for a long low-priority request and an urgent one at once.
SchedulerConfig tight_priority_budget() {
  SchedulerConfig c;
  c.policy = SchedulingPolicy::kPriority;
  c.page_size = 4;
  c.max_kv_tokens = 24;
  c.token_budget = 16;
  return c;
}

// Seed 003, test 3.
TEST_F(SchedulerTest, TightBudgetPreemptsTheLowPriorityRequestAndBothFinish) {
  auto s = make_scheduler(tight_priority_budget());
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestId low = submit(*s, t, params("A A A A A ", 10, 2));
  const RequestId high = submit(*s, t, params("B B B B B ", 5, 0));
  bool both_admitted = false;
  while (s->has_work()) {
    ASSERT_TRUE(step(*s, t));
    const SchedulerStats st = s->stats();
    both_admitted |= st.prefilling + st.running == 2;
    EXPECT_LE(st.blocks_used, 6);
    ASSERT_LT(t.steps, 1000);
  }
  EXPECT_TRUE(both_admitted);
  ASSERT_FALSE(t.preempted.empty()) << "no preemption: the budget is not tight";
  for (RequestId id : t.preempted) EXPECT_EQ(id, low);
  EXPECT_EQ(s->stats().preemptions, static_cast<long>(t.preempted.size()));
  EXPECT_GE(s->find(low)->preemptions(), 1);
  EXPECT_EQ(s->find(high)->preemptions(), 0);
  EXPECT_EQ(s->find(low)->status(), RequestStatus::kDone);
  EXPECT_EQ(s->find(high)->status(), RequestStatus::kDone);
  EXPECT_EQ(s->find(low)->num_generated(), 10);
  EXPECT_EQ(s->find(high)->num_generated(), 5);
  EXPECT_EQ(t.finished.front(), high);
}

// Seed 003, test 4: after its preemption and re-prefill, the low-priority
// request's KV holds exactly prompt + generated - 1 positions whenever it
// runs, its output equals the uninterrupted run (with seeded sampling, so the
// Sampler's stream must have survived too), and the recomputed work is what
// its KV held when it was preempted.
TEST_F(SchedulerTest, PreemptedRequestResumesWithConsistentKvAndOutput) {
  auto s = make_scheduler(tight_priority_budget());
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestParams low_p = params("A A A A A ", 10, 2, sampled(11));
  const RequestParams high_p = params("B B B B B ", 5, 0, sampled(12));
  const RequestId low = submit(*s, t, low_p);
  const RequestId high = submit(*s, t, high_p);
  const Request* r = s->find(low);
  long expected_recompute = 0;
  int running_checks_after_preemption = 0;
  while (s->has_work()) {
    const int kv_before = r->kv().length();
    const std::size_t preempted_before = t.preempted.size();
    ASSERT_TRUE(step(*s, t));
    if (t.preempted.size() > preempted_before) {
      expected_recompute += kv_before;
      EXPECT_EQ(r->status(), RequestStatus::kWaiting);
      EXPECT_TRUE(r->kv().block_ids().empty());
      EXPECT_EQ(r->kv().length(), 0);
    }
    if (r->status() == RequestStatus::kRunning) {
      EXPECT_EQ(r->kv().length(), static_cast<int>(r->prompt().size()) + r->num_generated() - 1);
      if (r->preemptions() > 0) ++running_checks_after_preemption;
    }
    ASSERT_LT(t.steps, 1000);
  }
  ASSERT_EQ(r->preemptions(), 1);
  EXPECT_GT(running_checks_after_preemption, 0);
  EXPECT_GT(expected_recompute, 0);
  EXPECT_EQ(r->recomputed_tokens(), expected_recompute);
  EXPECT_EQ(s->stats().recomputed_tokens, expected_recompute);
  EXPECT_EQ(as_vector(r->generated()), alone(low_p).tokens);
  EXPECT_EQ(as_vector(s->find(high)->generated()), alone(high_p).tokens);
  EXPECT_EQ(r->text(), alone(low_p).text);
}

// The core contract: every request's tokens, text and finish reason equal
// its solo run with generate(), for greedy and seeded sampling, any token
// budget (so any prefill chunking), batch sizes, both policies, and budgets
// tight enough to preempt.
TEST_F(SchedulerTest, TokensMatchGenerateAloneForAnyBudgetBatchAndPreemption) {
  struct Spec {
    const char* prompt;
    int max_tokens;
    int priority;
    std::vector<std::string> stop;
  };
  const std::vector<Spec> specs = {
      {"Q: What is the difference between", 12, 1, {}},
      {"A", 20, 0, {}},
      {"The fortune you seek is in another cookie.", 8, 2, {"he", "ee"}},
      {"Love is", 16, 1, {"nd a", "he"}},
      {"It is a truth universally acknowledged, that a single man in possession", 6, 0, {}},
  };
  const std::vector<std::pair<int, std::vector<int>>> budgets = {
      {1, {1}}, {3, {1, 2, 3}}, {16, {1, 4, 8}}, {64, {2, 8}}, {1000, {3, 8}}};
  long tight_preemptions = 0;
  int stops = 0;
  for (bool greedy_mode : {true, false}) {
    std::vector<RequestParams> reqs;
    std::vector<Generation> expected;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      reqs.push_back(params(specs[i].prompt, specs[i].max_tokens, specs[i].priority,
                            greedy_mode ? greedy() : sampled(100 + i), specs[i].stop));
      expected.push_back(alone(reqs.back()));
      stops += expected.back().finish == FinishReason::kStop;
    }
    for (const auto& [budget, batches] : budgets) {
      for (int batch : batches) {
        for (bool tight : {false, true}) {
          SchedulerConfig c;
          c.token_budget = budget;
          c.max_batch_size = batch;
          // Alternate the policies so that both orders of service are covered.
          c.policy = (budget + batch) % 2 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
          // Tight: the longest request (71 + 6 - 1 positions) just fits alone.
          c.page_size = tight ? 8 : 16;
          c.max_kv_tokens = tight ? 80 : 4096;
          auto s = make_scheduler(c);
          ASSERT_NE(s, nullptr);
          Trace t;
          std::vector<RequestId> ids;
          for (const RequestParams& p : reqs) ids.push_back(submit(*s, t, p));
          const std::string what = std::string(greedy_mode ? "greedy" : "sampled") + " budget " +
                                   std::to_string(budget) + " batch " + std::to_string(batch) +
                                   (tight ? " tight" : " ample");
          ASSERT_TRUE(drain(*s, t)) << what;
          for (std::size_t i = 0; i < ids.size(); ++i) {
            const Request* r = s->find(ids[i]);
            EXPECT_EQ(as_vector(r->generated()), expected[i].tokens) << what << " request " << i;
            EXPECT_EQ(r->text(), expected[i].text) << what << " request " << i;
            EXPECT_EQ(r->finish_reason(), expected[i].finish) << what << " request " << i;
          }
          if (tight) tight_preemptions += s->stats().preemptions;
          if (!tight) {
            EXPECT_EQ(s->stats().preemptions, 0) << what;
          }
        }
      }
    }
  }
  EXPECT_GT(tight_preemptions, 0) << "the tight budgets never preempted";
  EXPECT_GT(stops, 0) << "no request ended on its stop string";
}

// Generation ends at the context as in generate(): a prompt as long as the
// context yields one token; a near-full one stops after the few that fit,
// also when it is preempted on the way.
TEST_F(SchedulerTest, ContextEndFinishesLikeGenerate) {
  const int context = model_->config().block_size;
  std::string near_full, full;
  for (int i = 0; i < context - 6; ++i) near_full += static_cast<char>('a' + i % 26);
  for (int i = 0; i < context; ++i) full += static_cast<char>('a' + i % 26);
  const RequestParams near_p = params(near_full, 20, 1);
  const RequestParams full_p = params(full, 20, 0);
  const Generation near_g = alone(near_p), full_g = alone(full_p);
  ASSERT_EQ(near_g.finish, FinishReason::kContext);
  ASSERT_EQ(full_g.tokens.size(), 1u);
  for (int budget : {7, 300}) {
    SchedulerConfig c;
    c.policy = SchedulingPolicy::kPriority;
    c.token_budget = budget;
    c.max_batch_size = 2;
    c.max_kv_tokens = 512;
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    Trace t;
    const RequestId near_id = submit(*s, t, near_p);
    const RequestId full_id = submit(*s, t, full_p);
    ASSERT_TRUE(drain(*s, t));
    EXPECT_EQ(as_vector(s->find(near_id)->generated()), near_g.tokens);
    EXPECT_EQ(s->find(near_id)->finish_reason(), FinishReason::kContext);
    EXPECT_EQ(as_vector(s->find(full_id)->generated()), full_g.tokens);
    EXPECT_EQ(s->find(full_id)->finish_reason(), FinishReason::kContext);
  }
}

// KV is charged in whole pages: two 17-token prompts need two pages each, so
// a three-page budget (48 tokens) holds one of them at a time although
// 17 + 17 positions would fit in 48.
TEST_F(SchedulerTest, KvIsChargedInWholePages) {
  SchedulerConfig c;
  c.page_size = 16;
  c.max_kv_tokens = 48;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestId a = submit(*s, t, params("seventeen chars!!", 2));
  const RequestId b = submit(*s, t, params("Seventeen chars!!", 2));
  ASSERT_TRUE(step(*s, t));
  SchedulerStats st = s->stats();
  EXPECT_EQ(st.blocks_used, 2);
  EXPECT_EQ(st.blocks_free, 1);
  EXPECT_EQ(st.waiting, 1);
  EXPECT_EQ(s->status(b), RequestStatus::kWaiting);
  ASSERT_TRUE(drain(*s, t));
  EXPECT_EQ(t.admitted, (std::vector<RequestId>{a, b}));
  EXPECT_EQ(s->stats().preemptions, 0);
  // max_kv_tokens is rounded down to whole pages.
  c.max_kv_tokens = 47;
  auto rounded = make_scheduler(c);
  ASSERT_NE(rounded, nullptr);
  EXPECT_EQ(rounded->max_blocks(), 2);
}

// Admission keeps the page a running request needs for this step's decode:
// a newcomer that would take it waits instead of being admitted and then
// preempted at once (it would be the victim, as the latest arrival).
TEST_F(SchedulerTest, AdmissionLeavesRoomForThisStepsDecodes) {
  SchedulerConfig c;
  c.page_size = 4;
  c.max_kv_tokens = 8;
  c.token_budget = 4;
  c.max_batch_size = 2;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestId a = submit(*s, t, params("abcd", 5));
  ASSERT_TRUE(step(*s, t));  // a: 4 positions in its one page, next decode needs a second
  ASSERT_EQ(s->status(a), RequestStatus::kRunning);
  const RequestId b = submit(*s, t, params("wxyz", 2));
  ASSERT_TRUE(step(*s, t));
  EXPECT_EQ(s->status(b), RequestStatus::kWaiting);
  EXPECT_EQ(s->stats().blocks_used, 2);
  ASSERT_TRUE(drain(*s, t));
  EXPECT_EQ(s->stats().preemptions, 0);
  EXPECT_EQ(t.finished, (std::vector<RequestId>{a, b}));
}

// Cancelling a waiting, a prefilling and a running request frees their
// blocks at once, leaves the others untouched, and leaks nothing.
TEST_F(SchedulerTest, CancelFreesBlocksInEveryState) {
  SchedulerConfig c;
  c.token_budget = 4;
  c.max_batch_size = 3;
  c.page_size = 4;
  c.max_kv_tokens = 256;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  Trace t;
  const RequestParams keep_p = params("Keep going", 12, 0, sampled(5));
  const RequestId keep = submit(*s, t, keep_p);
  const RequestId running = submit(*s, t, params("Run", 30));
  const RequestId prefilling = submit(*s, t, params("A long prompt that needs chunks", 5));
  const RequestId waiting = submit(*s, t, params("Wait", 5));
  // Step until `running` decodes while `prefilling` is halfway through.
  while (s->status(running) != RequestStatus::kRunning ||
         s->status(prefilling) != RequestStatus::kPrefilling ||
         s->find(prefilling)->prefill_cursor() == 0) {
    ASSERT_TRUE(step(*s, t));
    ASSERT_LT(t.steps, 100);
  }
  ASSERT_EQ(s->status(waiting), RequestStatus::kWaiting);  // the batch is full

  auto blocks_of = [&](RequestId id) {
    return static_cast<int>(s->find(id)->kv().block_ids().size());
  };
  for (RequestId id : {waiting, prefilling, running}) {
    const int held = blocks_of(id);
    const int used = s->stats().blocks_used;
    EXPECT_EQ(held == 0, id == waiting);
    ASSERT_TRUE(s->cancel(id).has_value());
    EXPECT_EQ(s->status(id), RequestStatus::kCancelled);
    EXPECT_EQ(blocks_of(id), 0);
    EXPECT_EQ(s->stats().blocks_used, used - held);
    ASSERT_TRUE(s->check_invariants().has_value()) << s->check_invariants().error();
  }
  const auto again = s->cancel(running);
  ASSERT_FALSE(again.has_value());
  EXPECT_TRUE(contains(again.error(), "already finished (cancelled)"));
  const auto unknown = s->cancel(12345);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_TRUE(contains(unknown.error(), "no request with id 12345"));

  ASSERT_TRUE(drain(*s, t));
  EXPECT_EQ(as_vector(s->find(keep)->generated()), alone(keep_p).tokens);
  EXPECT_EQ(s->stats().blocks_free, s->max_blocks());
  // Finished requests can be forgotten; live or unknown ones cannot.
  EXPECT_TRUE(s->forget(keep));
  EXPECT_EQ(s->find(keep), nullptr);
  EXPECT_FALSE(s->forget(keep));
}

// Runs the scheduler dry, checking the invariants after every step, and
// returns every (group id, sample) stream of tokens its events carried.
::testing::AssertionResult drain_samples(Scheduler& s,
                                         std::map<std::pair<RequestId, int>, std::vector<int>>& got,
                                         long* preemptions = nullptr) {
  for (int steps = 1; s.has_work(); ++steps) {
    if (steps == 20000) return ::testing::AssertionFailure() << "no end after 20000 steps";
    for (const RequestEvent& e : s.step().events) {
      if (!e.error.empty()) return ::testing::AssertionFailure() << e.error;
      auto& tokens = got[{e.id, e.sample}];
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    }
    if (auto ok = s.check_invariants(); !ok)
      return ::testing::AssertionFailure() << "after step " << steps << ": " << ok.error();
  }
  if (preemptions != nullptr) *preemptions = s.stats().preemptions;
  return ::testing::AssertionSuccess();
}

// Seed 001's "prefill once, expand to num_samples": the prompt is prefilled
// once, its blocks are shared by every sample and counted once, and each
// sample's tokens equal a single-sample run seeded with sample_seed(seed, i) —
// with the prompt ending mid-page (the shared partial block is copied) or on
// a page boundary, and with a budget so tight that samples are preempted.
TEST_F(SchedulerTest, SamplesSharePromptBlocksAndMatchTheirSingleSampleRuns) {
  constexpr int kSamples = 3;
  constexpr std::uint64_t kSeed = 7;
  for (const std::string_view prompt : {"Fortune: ", "Fortune!"}) {  // 9 and 8 characters
    for (const int max_kv_tokens : {256, 48}) {
      SCOPED_TRACE(std::string(prompt) + " max_kv_tokens " + std::to_string(max_kv_tokens));
      SchedulerConfig c;
      c.page_size = 4;
      c.max_kv_tokens = max_kv_tokens;
      c.max_batch_size = 3;
      c.token_budget = 4;
      auto s = make_scheduler(c);
      ASSERT_NE(s, nullptr);
      RequestParams p = params(prompt, 20, 0, sampled(kSeed));
      const int prompt_len = static_cast<int>(p.prompt.size());
      p.n = kSamples;
      const RequestParams single = p;
      auto id = s->submit(std::move(p));
      ASSERT_TRUE(id.has_value()) << id.error();
      // A second request arriving later must wait: the head holds all 3
      // batch slots for its samples before they exist.
      auto other = s->submit(params("Later", 20, 0, sampled(1)));
      ASSERT_TRUE(other.has_value()) << other.error();

      std::map<std::pair<RequestId, int>, std::vector<int>> got;
      long preemptions = 0;
      // Up to the fork: one prefill, every sample sharing its blocks.
      while (s->samples(*id).size() < kSamples) {
        ASSERT_EQ(s->samples(*id).size(), 1u);
        const StepOutput out = s->step();
        for (const RequestEvent& e : out.events) {
          auto& tokens = got[{e.id, e.sample}];
          tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
        }
        ASSERT_TRUE(s->check_invariants().has_value()) << s->check_invariants().error();
        ASSERT_EQ(s->stats().preemptions, 0);
        ASSERT_LT(s->stats().steps, 20);
      }
      const auto samples = s->samples(*id);
      const std::vector<int> prompt_blocks = as_vector(samples[0]->kv().block_ids());
      EXPECT_EQ(static_cast<int>(prompt_blocks.size()), (prompt_len + 3) / 4);
      for (int i = 0; i < kSamples; ++i) {
        EXPECT_EQ(samples[i]->group(), *id);
        EXPECT_EQ(samples[i]->sample_index(), i);
        EXPECT_EQ(samples[i]->kv().length(), prompt_len);
        EXPECT_EQ(as_vector(samples[i]->kv().block_ids()), prompt_blocks);
        EXPECT_EQ(samples[i]->num_generated(), 1);  // all from the one prefill's logits
      }
      // Counted once, not kSamples times; `other` still waits (no slot).
      EXPECT_EQ(s->stats().blocks_used, static_cast<int>(prompt_blocks.size()));
      EXPECT_EQ(s->status(*other), RequestStatus::kWaiting);

      ASSERT_TRUE(drain_samples(*s, got, &preemptions));
      EXPECT_EQ(preemptions > 0, max_kv_tokens == 48);
      std::set<std::vector<int>> distinct;
      for (int i = 0; i < kSamples; ++i) {
        const Request* r = s->samples(*id)[i];
        RequestParams alone_p = single;
        alone_p.sampling.seed = sample_seed(kSeed, i);
        EXPECT_EQ(r->sampling().seed, alone_p.sampling.seed);
        EXPECT_EQ(as_vector(r->generated()), alone(alone_p).tokens) << "sample " << i;
        EXPECT_EQ(got[std::make_pair(*id, i)], as_vector(r->generated())) << "sample " << i;
        distinct.insert(as_vector(r->generated()));
      }
      EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kSamples));  // different seeds
      EXPECT_EQ(as_vector(s->find(*other)->generated()),
                alone(params("Later", 20, 0, sampled(1))).tokens);
      EXPECT_EQ(s->stats().blocks_used, 0);
      EXPECT_EQ(s->stats().blocks_free, s->max_blocks());
      // Samples go with their head.
      EXPECT_FALSE(s->forget(s->samples(*id)[1]->id()));
      const RequestId sample1 = s->samples(*id)[1]->id();
      EXPECT_TRUE(s->forget(*id));
      EXPECT_EQ(s->find(sample1), nullptr);
      EXPECT_TRUE(s->samples(*id).empty());
    }
  }
}

TEST_F(SchedulerTest, CancellingAFannedOutRequestFreesEverySample) {
  SchedulerConfig c;
  c.page_size = 4;
  c.max_kv_tokens = 256;
  c.max_batch_size = 4;
  c.token_budget = 8;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  RequestParams p = params("Fortune: ", 30, 0, sampled(3));
  p.n = 4;
  auto id = s->submit(p);
  ASSERT_TRUE(id.has_value()) << id.error();
  // Before the fork: cancelling the head leaves nothing behind.
  auto early = s->submit(p);
  ASSERT_TRUE(early.has_value());
  ASSERT_TRUE(s->cancel(*early).has_value());
  // Decode a few tokens past the fork, so the samples hold shared and own blocks.
  while (s->samples(*id).size() < 4 || s->samples(*id)[3]->num_generated() < 4) {
    s->step();
    ASSERT_TRUE(s->check_invariants().has_value()) << s->check_invariants().error();
    ASSERT_LT(s->stats().steps, 50);
  }
  const auto samples = s->samples(*id);
  int held = 0;
  for (const Request* r : samples) held += static_cast<int>(r->kv().block_ids().size());
  EXPECT_LT(s->stats().blocks_used, held);  // shared blocks counted once
  EXPECT_GT(s->stats().blocks_used, 0);
  ASSERT_TRUE(s->cancel(*id).has_value());
  for (const Request* r : samples) {
    EXPECT_EQ(r->status(), RequestStatus::kCancelled);
    EXPECT_TRUE(r->kv().block_ids().empty());
  }
  EXPECT_EQ(s->stats().blocks_used, 0);
  EXPECT_EQ(s->stats().blocks_free, s->max_blocks());
  ASSERT_TRUE(s->check_invariants().has_value()) << s->check_invariants().error();
  EXPECT_FALSE(s->has_work());
  const auto again = s->cancel(*id);
  ASSERT_FALSE(again.has_value());
  EXPECT_TRUE(contains(again.error(), "already finished (cancelled)"));
  EXPECT_EQ(s->samples(*early).size(), 1u);  // never forked
  EXPECT_EQ(s->status(*early), RequestStatus::kCancelled);
}

// A caller that hands an id out before it submits (the daemon) chooses it;
// forked samples take theirs from the other half, so the ids the caller
// hands out next stay free.
TEST_F(SchedulerTest, SubmitTakesTheCallersIdAndSamplesKeepClearOfIt) {
  SchedulerConfig c;
  c.page_size = 4;
  c.max_kv_tokens = 256;
  c.max_batch_size = 3;
  c.token_budget = 8;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  RequestParams p = params("Fortune: ", 4, 0, sampled(3));
  p.n = 3;
  auto id = s->submit(p, 1);
  ASSERT_TRUE(id.has_value()) << id.error();
  EXPECT_EQ(*id, 1u);
  while (s->samples(1).size() < 3) {
    s->step();
    ASSERT_TRUE(s->check_invariants().has_value()) << s->check_invariants().error();
    ASSERT_LT(s->stats().steps, 20);
  }
  const auto samples = s->samples(1);
  EXPECT_EQ(samples[0]->id(), 1u);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(samples[i]->id(), kFirstSampleId + static_cast<RequestId>(i - 1));
    EXPECT_EQ(samples[i]->group(), 1u);
  }
  auto next = s->submit(params("Later", 4), 2);
  ASSERT_TRUE(next.has_value()) << next.error();
  EXPECT_EQ(*next, 2u);
  for (const auto& [bad, why] :
       std::vector<std::pair<RequestId, std::string>>{{2, "request id 2 is in use"},
                                                      {0, "request id 0 is outside [1, 2^63)"},
                                                      {kFirstSampleId, "is outside [1, 2^63)"}}) {
    const auto refused = s->submit(params("Hi", 4), bad);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_TRUE(contains(refused.error(), why)) << refused.error();
  }
  // submit(params) goes on above the ids it has seen.
  EXPECT_EQ(s->submit(params("Hi", 4)).value_or(0), 3u);
  while (s->has_work()) {
    s->step();
    ASSERT_TRUE(s->check_invariants().has_value()) << s->check_invariants().error();
    ASSERT_LT(s->stats().steps, 200);
  }
  for (const RequestId done : {RequestId{1}, RequestId{2}, RequestId{3}})
    EXPECT_EQ(s->status(done), RequestStatus::kDone) << done;
}

TEST_F(SchedulerTest, RefusesBadSampleCounts) {
  SchedulerConfig c;
  c.max_batch_size = 4;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  for (const int n : {0, -1, kMaxSamples + 1}) {
    RequestParams p = params("Hi", 4);
    p.n = n;
    const auto id = s->submit(p);
    ASSERT_FALSE(id.has_value()) << n;
    EXPECT_TRUE(contains(id.error(), "n (samples) must be in [1, 16], got " + std::to_string(n)));
  }
  RequestParams p = params("Hi", 4);
  p.n = 5;
  const auto id = s->submit(p);
  ASSERT_FALSE(id.has_value());
  EXPECT_TRUE(contains(id.error(), "max_batch_size allows 4"));
  p.n = 4;
  EXPECT_TRUE(s->submit(p).has_value());
}

// Sample seeds never collide within a request, and sample 0 keeps the seed.
TEST_F(SchedulerTest, LogprobsAreEachRowsOwnWhateverTheBatch) {
  SchedulerConfig c;
  c.max_kv_tokens = 2048;
  c.max_batch_size = 4;
  std::vector<RequestParams> ps;
  for (int i = 0; i < 3; ++i) {
    ps.push_back(params("Q: What is " + std::to_string(i) + "? A:", 12, 0, sampled(i)));
    ps.back().logprobs = 3;
  }
  auto together = make_scheduler(c);
  Trace trace;
  std::vector<RequestId> ids;
  for (const auto& p : ps) ids.push_back(submit(*together, trace, p));
  ASSERT_TRUE(drain(*together, trace));
  for (std::size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Request& r = *together->find(ids[i]);
    ASSERT_EQ(r.logprobs().size(), r.generated().size());
    for (std::size_t t = 0; t < r.logprobs().size(); ++t) {
      EXPECT_EQ(r.logprobs()[t].chosen.token, r.generated()[t]);
      EXPECT_LE(r.logprobs()[t].chosen.logprob, 0.0f);
      ASSERT_EQ(r.logprobs()[t].top.size(), 3u);
      EXPECT_GE(r.logprobs()[t].top[0].logprob, r.logprobs()[t].top[2].logprob);
    }
    auto alone_s = make_scheduler(c);
    Trace t2;
    const RequestId id = submit(*alone_s, t2, ps[i]);
    ASSERT_TRUE(drain(*alone_s, t2));
    const Request& a = *alone_s->find(id);
    ASSERT_EQ(a.logprobs().size(), r.logprobs().size());
    for (std::size_t t = 0; t < a.logprobs().size(); ++t) {  // bit for bit
      EXPECT_EQ(a.logprobs()[t].chosen.logprob, r.logprobs()[t].chosen.logprob);
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(a.logprobs()[t].top[k].token, r.logprobs()[t].top[k].token);
    }
  }
  RequestParams none = params("Q: Why? A:", 4);
  auto s = make_scheduler(c);
  Trace t3;
  const RequestId id = submit(*s, t3, none);
  ASSERT_TRUE(drain(*s, t3));
  EXPECT_TRUE(s->find(id)->logprobs().empty());
  RequestParams too_many = none;
  too_many.logprobs = kMaxLogprobs + 1;
  EXPECT_FALSE(s->submit(too_many).has_value());
}

TEST_F(SchedulerTest, TheEndOfTextTokenStopsARequestAsGenerateStops) {
  RequestParams p = params("Q: Why? A:", 40, 0, sampled(5));
  const Generation free_run = alone(p);
  const int eot = free_run.tokens[10];
  const test_util::WithEndOfText tokenizer(*tokenizer_, eot);
  auto s = Scheduler::create(*model_, &tokenizer, SchedulerConfig{});
  ASSERT_TRUE(s.has_value()) << s.error();
  Trace trace;
  const RequestId id = submit(**s, trace, p);
  RequestParams ignoring = p;
  ignoring.ignore_eos = true;
  const RequestId ignored = submit(**s, trace, ignoring);
  RequestParams by_id = ignoring;  // a chat format's end of turn stops it all the same
  by_id.stop_token_ids = {eot};
  const RequestId stopped_by_id = submit(**s, trace, by_id);
  ASSERT_TRUE(drain(**s, trace));
  tiers::BlockPool pool(model_->kv_layout(16).block_bytes(), 17);
  GenerateOptions o;
  o.sampling = p.sampling;
  o.max_tokens = p.max_tokens;
  const auto want = generate(*model_, pool, &tokenizer, p.prompt, o);
  ASSERT_TRUE(want.has_value());
  const Request& r = *(*s)->find(id);
  EXPECT_EQ(r.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(std::vector<int>(r.generated().begin(), r.generated().end()), want->tokens);
  EXPECT_EQ(r.generated().back(), eot);
  EXPECT_EQ(r.text(), want->text);
  const Request& g = *(*s)->find(ignored);
  EXPECT_EQ(std::vector<int>(g.generated().begin(), g.generated().end()), free_run.tokens);
  const Request& b = *(*s)->find(stopped_by_id);
  EXPECT_EQ(b.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(std::vector<int>(b.generated().begin(), b.generated().end()), want->tokens);
  EXPECT_EQ(b.text(), want->text);
}

TEST(SampleSeedTest, DistinctPerSampleAndIdentityForSampleZero) {
  for (const std::uint64_t seed : {0ull, 7ull, ~0ull}) {
    EXPECT_EQ(sample_seed(seed, 0), seed);
    std::set<std::uint64_t> seeds;
    for (int i = 0; i < kMaxSamples; ++i) seeds.insert(sample_seed(seed, i));
    EXPECT_EQ(seeds.size(), static_cast<std::size_t>(kMaxSamples));
  }
}

TEST_F(SchedulerTest, RefusesBadConfigsWithClearMessages) {
  auto refused = [&](SchedulerConfig c, std::string_view message) {
    auto s = Scheduler::create(*model_, tokenizer_, c);
    ASSERT_FALSE(s.has_value()) << message;
    EXPECT_TRUE(contains(s.error(), message));
  };
  SchedulerConfig c;
  c.max_kv_tokens = 15;
  refused(c, "max_kv_tokens (15) is smaller than one KV block (page_size 16)");
  c = {};
  c.page_size = 0;
  refused(c, "page_size must be 1 to 4096, got 0");
  c = {};
  c.page_size = 8192;
  c.max_kv_tokens = 8192;
  refused(c, "page_size must be 1 to 4096, got 8192");
  c = {};
  c.token_budget = 0;
  c.max_batch_size = 0;
  refused(c, "max_batch_size must be at least 1");
  c = {};
  c.token_budget = -1;
  refused(c, "token_budget must be at least 1 (0: chosen at start), got -1");
  c = {};
  c.mixed_prefill_tokens = -2;
  refused(c, "mixed_prefill_tokens must be at least 1 (0: chosen at start), got -2");
  c = {};
  c.token_budget = 4;
  c.max_batch_size = 8;
  refused(c, "token_budget (4) must be at least max_batch_size (8)");
  c = {};
  c.preemption = PreemptionMode::kSwap;
  refused(c, "preemption 'swap' moves KV through the prefix cache");
  c = {};
  c.cache.l2_bytes = 1 << 20;
  refused(c, "l2_bytes and l3_path need prefix_cache on");
  c = {};
  c.prefix_cache = true;
  c.cache.l3_path = "/nonexistent";
  refused(c, "l3_path is set but l3_bytes is 0");

  EXPECT_EQ(parse_policy("priority"), SchedulingPolicy::kPriority);
  EXPECT_EQ(parse_policy("fcfs"), SchedulingPolicy::kFcfs);
  ASSERT_FALSE(parse_policy("lifo").has_value());
  EXPECT_TRUE(contains(parse_policy("lifo").error(), "unknown policy 'lifo'"));
  EXPECT_EQ(parse_preemption("recompute"), PreemptionMode::kRecompute);
  ASSERT_FALSE(parse_preemption("drop").has_value());
  EXPECT_TRUE(contains(parse_preemption("drop").error(), "expected recompute or swap"));

  // A pool given by the caller must fit the layout and be unused.
  tiers::BlockPool small_blocks(64, 8);
  auto s = Scheduler::create(*model_, tokenizer_, SchedulerConfig{}, &small_blocks);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error(), "the pool's blocks have 64 bytes"));
  tiers::BlockPool busy(model_->kv_layout(16).block_bytes(), 8);
  const int held = *busy.allocate();
  s = Scheduler::create(*model_, tokenizer_, SchedulerConfig{}, &busy);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(contains(s.error(), "1 of its blocks are in use"));
  busy.release(held);
  // A usable one caps the budget at its size.
  s = Scheduler::create(*model_, tokenizer_, SchedulerConfig{}, &busy);
  ASSERT_TRUE(s.has_value()) << s.error();
  EXPECT_EQ((*s)->max_blocks(), 8);
}

// token_budget 0: create() measures passes of each size on this device and
// chooses; an explicit budget replaces the choice at run time, and 0 brings
// the same choice back. Tokens never depend on it.
TEST_F(SchedulerTest, AnAutomaticBudgetIsChosenFromMeasuredPasses) {
  SchedulerConfig c;
  c.token_budget = SchedulerConfig::kAuto;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  const BudgetChoice chosen = s->budget_choice();
  EXPECT_TRUE(chosen.automatic);
  EXPECT_FALSE(chosen.why.empty());
  EXPECT_EQ(s->config().token_budget, chosen.token_budget);
  EXPECT_EQ(s->config().mixed_prefill_tokens, chosen.mixed_prefill_tokens);
  EXPECT_GE(chosen.token_budget, c.max_batch_size);
  EXPECT_GE(chosen.mixed_prefill_tokens, 1);
  EXPECT_LE(chosen.mixed_prefill_tokens, chosen.token_budget);
  const std::vector<PassCost>& sweep = s->pass_sweep().passes;
  EXPECT_EQ(s->pass_sweep().context, model_->config().block_size);
  // A difference of two timings, floored at 0: on a loaded machine the
  // bundled model's deep and fresh passes can time alike, so only its sign
  // is promised here (budget_choice_test stages its use).
  EXPECT_GE(s->pass_sweep().seconds_per_row_key, 0);
  ASSERT_FALSE(sweep.empty());
  EXPECT_EQ(sweep.front().rows, 16);
  for (std::size_t i = 0; i < sweep.size(); ++i) {
    EXPECT_GT(sweep[i].seconds, 0);
    EXPECT_LE(sweep[i].rows, model_->config().block_size);
    if (i > 0) {
      EXPECT_GT(sweep[i].rows, sweep[i - 1].rows);
    }
  }
  EXPECT_EQ(chosen.token_budget, resolve_budgets(c, s->pass_sweep()).token_budget)
      << "the choice is the pure function of the sweep the daemon shows";

  SchedulerConfig set = s->config();
  set.token_budget = 40;
  set.mixed_prefill_tokens = SchedulerConfig::kAuto;
  ASSERT_TRUE(s->reconfigure(set));
  EXPECT_EQ(s->config().token_budget, 40);
  EXPECT_EQ(s->config().mixed_prefill_tokens, 40);
  EXPECT_FALSE(s->budget_choice().automatic);
  ASSERT_TRUE(s->reconfigure(c));
  EXPECT_EQ(s->config().token_budget, chosen.token_budget);

  Trace trace;
  const RequestParams p = params(std::string(150, 'a') + "Q: Why?", 6);
  const RequestId id = submit(*s, trace, p);
  ASSERT_TRUE(drain(*s, trace));
  EXPECT_EQ(as_vector(s->find(id)->generated()), alone(p).tokens);
}

// Beside running decodes a pass takes at most mixed_prefill_tokens of a
// prompt (their inter-token latency stays even); alone it takes the budget.
TEST_F(SchedulerTest, DecodesCapThePrefillChunkBesideThem) {
  SchedulerConfig c;
  c.token_budget = 64;
  c.mixed_prefill_tokens = 8;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  Trace trace;
  const RequestParams running = params("Q: A", 40);
  const RequestId first = submit(*s, trace, running);
  while (s->status(first) != RequestStatus::kRunning) ASSERT_TRUE(step(*s, trace));
  const RequestParams prompt = params(std::string(120, 'b') + " Q: Why?", 4);
  const RequestId second = submit(*s, trace, prompt);
  bool beside = false;
  while (s->has_work()) {
    const bool decoding = s->status(first) == RequestStatus::kRunning;
    const StepOutput out = s->step();
    ++trace.steps;
    for (const RequestEvent& e : out.events) {
      ASSERT_TRUE(e.error.empty()) << e.error;
      trace.streamed_tokens[e.id].insert(trace.streamed_tokens[e.id].end(), e.tokens.begin(),
                                         e.tokens.end());
    }
    ASSERT_TRUE(s->check_invariants());
    if (out.prefill_request == second && decoding) {
      EXPECT_LE(out.prefill_tokens, 8) << "beside a decode";
      beside = true;
    }
  }
  EXPECT_TRUE(beside);
  EXPECT_EQ(trace.streamed_tokens[first], alone(running).tokens);
  EXPECT_EQ(trace.streamed_tokens[second], alone(prompt).tokens);
  // With nothing decoding, the whole budget.
  ASSERT_TRUE(s->submit(prompt));
  EXPECT_EQ(s->step().prefill_tokens, 64);
}

TEST_F(SchedulerTest, RefusesBadSubmitsBeforeTheyReachTheEngine) {
  SchedulerConfig c;
  c.max_kv_tokens = 128;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  auto refused = [&](RequestParams p, std::string_view message) {
    auto id = s->submit(std::move(p));
    ASSERT_FALSE(id.has_value()) << message;
    EXPECT_TRUE(contains(id.error(), message));
  };
  const int context = model_->config().block_size;
  refused(params("", 5), "the prompt is empty");
  RequestParams p = params("x", 5);
  p.prompt.assign(context + 1, 5);
  refused(p, "the prompt has 257 tokens but the model's context is 256");
  p = params("xy", 5);
  p.prompt[1] = model_->config().vocab_size;
  refused(p, "prompt token 1 is 96, outside the vocabulary of 96");
  p.prompt[1] = -1;
  refused(p, "prompt token 1 is -1");
  refused(params("x", 0), "max_tokens must be at least 1");
  refused(params("x", 5, 0, SamplingParams{-1.0f, 0, 1.0f, 0}), "temperature");
  refused(params("x", 5, 0, greedy(), {""}), "stop");
  refused(params("x", 5, -1), "priority must be 0 (most urgent) or more, got -1");
  refused(params("x", 200), "the request may need 208 KV tokens (13 pages of 16)");
  EXPECT_FALSE(s->has_work());
  EXPECT_EQ(s->stats().waiting, 0);

  // max_tokens past the context is fine when the context fits the budget:
  // generation ends there, with kContext, as in generate().
  c.max_kv_tokens = 256;
  auto roomy = make_scheduler(c);
  ASSERT_NE(roomy, nullptr);
  Trace t;
  const RequestId id = submit(*roomy, t, params("x", 1000));
  ASSERT_TRUE(drain(*roomy, t));
  EXPECT_EQ(roomy->find(id)->finish_reason(), FinishReason::kContext);
  EXPECT_EQ(roomy->find(id)->num_generated(), context);

  // Without a tokenizer there is no text and stop strings are refused.
  auto plain = Scheduler::create(*model_, nullptr, c);
  ASSERT_TRUE(plain.has_value());
  auto stop = (*plain)->submit(params("x", 5, 0, greedy(), {"."}));
  ASSERT_FALSE(stop.has_value());
  EXPECT_TRUE(contains(stop.error(), "stop strings need a tokenizer"));
}

}  // namespace
}  // namespace kvtier
