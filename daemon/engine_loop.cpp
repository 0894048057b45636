#include "daemon/engine_loop.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "wire/log.h"

namespace kvtier::daemon {

using wire::cancel_allowed;
using wire::log_error;
using wire::log_info;
using wire::log_number;
using wire::log_warning;
using wire::Prompt;
using wire::request_params;
using wire::RequestOwner;

namespace {

std::string micros(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f us", seconds * 1e6);
  return buf;
}

// A duration in milliseconds as people write it: "33.1 ms", "1.24 s".
std::string duration_text(double ms) {
  return ms < 1000 ? log_number(ms) + " ms" : log_number(ms / 1e3) + " s";
}

// The info line of a finished request: who asked, what it cost, where its
// prompt came from, how long it took and why it stopped.
std::string finished_line(RequestId id, const RequestOwner& owner, const GenerateResult& r) {
  std::size_t generated = 0;
  for (const SampleResult& s : r.samples) generated += s.tokens.size();
  std::string cached;
  for (int t = 0; t < kNumTiers; ++t) {
    if (r.cached_tokens[t] == 0) continue;
    cached += (cached.empty() ? "" : ", ") + std::string(to_string(static_cast<Tier>(t))) + " " +
              std::to_string(r.cached_tokens[t]);
  }
  return "request " + std::to_string(id) + " " + r.finish_reason + ": " +
         (owner.uid ? "uid " + std::to_string(*owner.uid)
                    : "connection " + std::to_string(owner.connection)) +
         ", " + std::to_string(r.prompt_tokens) +
         " prompt tokens (cached: " + (cached.empty() ? "none" : cached) + "), " +
         std::to_string(generated) + " generated" +
         (r.samples.size() > 1 ? " in " + std::to_string(r.samples.size()) + " samples" : "") +
         ", TTFT " + (r.ttft_ms > 0 ? duration_text(r.ttft_ms) : "-") + ", total " +
         duration_text(r.total_ms);
}

// Start-up with the prefix cache: what the tiers are, what is wrong with
// them (the daemon runs on what works), and what loading costs against
// recomputing, which decides whether a short prefix is worth a load.
void cache_start(Scheduler& scheduler) {
  KvCache* cache = scheduler.cache();
  if (!cache) return;
  for (const std::string& w : cache->warnings()) log_warning("prefix cache: " + w);
  // Said here too, whatever the cache's own words: an operator who asked for
  // a tier must learn that it is not there.
  const CacheStats before = cache->stats();
  std::string tiers;
  for (int t = 0; t < kNumTiers; ++t) {
    const Tier tier = static_cast<Tier>(t);
    if (!cache->where(tier).empty() && !before.tier[t].available)
      log_warning(std::string("prefix cache: ") + label(tier) + " at " + cache->where(tier) +
                  " is not available; running without it (see `kvtierctl tiers`)");
    tiers += std::string(t == 0 ? "" : ", ") + label(tier) + " " + cache->describe(tier);
  }
  log_info("prefix cache on: " + tiers + "; preemption " +
           std::string(to_string(scheduler.config().preemption)));
  scheduler.calibrate_tier_costs();
  const TierCosts k = cache->stats().costs;
  std::string line = "tier costs: prefill passes " + prefill_curve_text(k.prefill);
  for (int t = 1; t < kNumTiers; ++t) {
    const LoadCost& load = k.load[t];
    line += std::string("; ") + label(static_cast<Tier>(t)) + " load " + micros(load.latency_s) +
            " + " + micros(load.per_block_s) + " per block (" + std::to_string(load.samples) +
            " samples)";
  }
  log_info(line + "; medians, the prefill figure keeps learning");
}

// The device's lines go to the log: which one runs and why, what it could
// not make, and its int8 codec's failures later (from any thread: log_write
// is thread-safe).
DeviceOptions device_options(const EngineLoopOptions& options) {
  DeviceOptions d;
  d.kind = options.device;
  d.on_info = [](const std::string& line) { log_info(line); };
  d.on_warning = [](const std::string& line) { log_warning(line); };
  d.on_error = [](const std::string& line) { log_error(line); };
  return d;
}

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int prompt_source(const TierCounts& cached, int prompt_tokens) {
  int best = 0;
  for (int t = 1; t < kNumTiers; ++t)
    if (cached[t] > cached[best]) best = t;
  return prompt_tokens - cached.total() > cached[best] ? RequestMetrics::kComputed : best;
}

const char* prompt_source_name(int source) {
  return source == RequestMetrics::kComputed ? "computed" : kTierNames[source].name;
}

std::expected<std::unique_ptr<EngineLoop>, std::string> EngineLoop::create(
    const std::string& model_dir, const EngineLoopOptions& options) {
  if (options.max_pending < 1) return std::unexpected(std::string("max_pending must be >= 1"));
  auto model = Model::load(model_dir);
  if (!model) return std::unexpected("cannot load model from " + model_dir + ": " + model.error());
  std::unique_ptr<Model> owned_model = std::move(*model);
  auto tokenizer = Tokenizer::load(owned_model->config().tokenizer);
  if (!tokenizer) return std::unexpected(tokenizer.error());
  auto device = open_device(*owned_model, options.scheduler, device_options(options));
  if (!device) return std::unexpected(device.error());
  auto scheduler = Scheduler::create(*owned_model, tokenizer->get(), options.scheduler,
                                     device->l1.get(), device->forward);
  if (!scheduler) return std::unexpected(scheduler.error());
  cache_start(**scheduler);  // no thread runs yet: this one may use the scheduler
  const BudgetChoice& budgets = (*scheduler)->budget_choice();
  log_info(std::string(budgets.automatic ? "chosen for this device: " : "") + budgets.why);
  return std::unique_ptr<EngineLoop>(new EngineLoop(std::move(owned_model), std::move(*device),
                                                    std::move(*tokenizer), std::move(*scheduler),
                                                    options));
}

EngineLoop::EngineLoop(std::unique_ptr<Model> model, Device device,
                       std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<Scheduler> scheduler,
                       EngineLoopOptions options)
    : model_(std::move(model)),
      device_(std::move(device)),
      tokenizer_(std::move(tokenizer)),
      scheduler_(std::move(scheduler)),
      sweep_(scheduler_->pass_sweep()),
      options_(std::move(options)),
      max_pending_(options_.max_pending) {}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::expected<RequestId, EngineLoop::SubmitError> EngineLoop::submit(Prompt prompt,
                                                                     RequestOptions options,
                                                                     EventSink sink,
                                                                     RequestOwner owner) {
  RequestId id;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || draining_) return std::unexpected(SubmitError::kStopping);
    if (static_cast<int>(active_.size()) >= max_pending_) {
      return std::unexpected(SubmitError::kTooManyPending);
    }
    id = next_id_++;
    ++submitted_;
    active_.emplace(id, std::move(owner));
    inbox_.push_back(
        SubmitCommand{id, std::move(prompt), std::move(options), std::move(sink), Clock::now()});
  }
  cv_.notify_one();
  return id;
}

EngineLoop::CancelResult EngineLoop::cancel(RequestId id, const RequestOwner& caller,
                                            bool caller_privileged) {
  {
    std::lock_guard lock(mu_);
    auto it = active_.find(id);
    if (it == active_.end() || stopping_) return CancelResult::kUnknown;
    if (!cancel_allowed(it->second, caller, caller_privileged)) return CancelResult::kNotAllowed;
    inbox_.push_back(CancelCommand{id});
  }
  cv_.notify_one();
  return CancelResult::kCancelling;
}

void EngineLoop::stats(std::function<void(EngineStats)> reply) {
  {
    std::lock_guard lock(mu_);
    // After stop() nothing drains the inbox; a reply left there would
    // outlive the sessions' io_context. The caller is stopping too.
    if (stopping_) return;
    inbox_.push_back(StatsCommand{std::move(reply)});
  }
  cv_.notify_one();
}

void EngineLoop::drain(std::function<void()> on_drained) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    draining_ = true;
    inbox_.push_back(DrainCommand{std::move(on_drained)});
  }
  cv_.notify_one();
}

void EngineLoop::reconfigure(SchedulerConfig scheduler, int max_pending,
                             std::function<void(std::expected<void, std::string>)> reply) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    inbox_.push_back(ReconfigureCommand{scheduler, max_pending, std::move(reply)});
  }
  cv_.notify_one();
}

void EngineLoop::call(std::function<void(EngineAccess&)> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;  // as in stats(): nothing would run it
    inbox_.push_back(CallCommand{std::move(task)});
  }
  cv_.notify_one();
}

void EngineLoop::subscribe_cache(CacheEventSink sink, std::function<void(CacheSnapshot)> reply) {
  call([this, sink = std::move(sink), reply = std::move(reply)](EngineAccess& e) mutable {
    KvCache* cache = e.scheduler.cache();
    if (cache == nullptr) return reply(CacheSnapshot{});
    // What happened before the snapshot goes to those who subscribed before.
    publish_cache_events();
    if (cache_subscribers_.empty())
      cache->watch([this](const BlockEvent& event) { cache_events_.push_back(event); });
    cache_subscribers_.push_back(std::move(sink));
    reply({true, cache_seq_, cache->fingerprint(), e.scheduler.config().page_size,
           cache->stored_blocks()});
  });
}

void EngineLoop::publish_cache_events() {
  if (cache_events_.empty()) return;
  const CacheEvents batch{++cache_seq_, std::make_shared<const std::vector<BlockEvent>>(
                                            std::exchange(cache_events_, {}))};
  std::erase_if(cache_subscribers_, [&](const CacheEventSink& sink) { return !sink(batch); });
  if (cache_subscribers_.empty()) scheduler_->cache()->watch({});
}

RequestOwner EngineLoop::mark_final(RequestId id) {
  std::lock_guard lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return {};
  RequestOwner owner = it->second;
  active_.erase(it);
  return owner;
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Command> commands;
    bool stopping;
    {
      std::unique_lock lock(mu_);
      // Sleep only when idle: with work pending the loop steps without waiting,
      // and with only moves in flight it tends them (tend_cache sleeps on them).
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || scheduler_->has_work() || scheduler_->cache_busy();
      });
      commands.swap(inbox_);
      stopping = stopping_;
    }
    for (Command& c : commands) std::visit([this](auto& cmd) { handle(cmd); }, c);
    if (stopping) {
      cancel_all();
      return;
    }
    if (scheduler_->has_work())
      step();
    else if (scheduler_->cache_busy())
      scheduler_->tend_cache();
    publish_cache_events();
    // Every submit() before drain() was queued ahead of its DrainCommand, so
    // an empty live_ after handling it means nothing is left to finish.
    if (on_drained_ && live_.empty()) std::exchange(on_drained_, nullptr)();
  }
}

void EngineLoop::handle(SubmitCommand& c) {
  auto params = request_params(*tokenizer_, std::move(c.prompt), std::move(c.options));
  if (!params) return fail(c.id, c.sink, std::move(params.error()), true);
  const int samples = params->n;
  // Under the id submit() handed out: unique, as next_id_ only grows.
  if (auto ok = scheduler_->submit(std::move(*params), c.id); !ok)
    return fail(c.id, c.sink, std::move(ok.error()), true);
  live_.emplace(
      c.id, Live{std::move(c.sink), c.submitted, std::nullopt, std::nullopt, samples, 0,
                 std::vector<std::optional<Clock::time_point>>(static_cast<std::size_t>(samples))});
}

void EngineLoop::handle(CancelCommand& c) {
  auto it = live_.find(c.id);
  if (it == live_.end()) return;  // finished (or refused) before the cancel arrived
  if (!scheduler_->cancel(c.id)) return;
  ++cancelled_;
  finish(c.id, it->second, true);
}

void EngineLoop::handle(StatsCommand& c) {
  EngineStats s;
  s.scheduler = scheduler_->stats();
  {
    std::lock_guard lock(mu_);
    s.pending = static_cast<int>(active_.size());
    s.submitted = submitted_;
  }
  s.completed = completed_;
  s.cancelled = cancelled_;
  s.failed = failed_;
  s.tokens_generated = tokens_generated_;
  s.requests = metrics_;
  if (const KvCache* cache = scheduler_->cache()) s.cache = cache->stats();
  c.reply(std::move(s));
}

void EngineLoop::handle(CallCommand& c) {
  EngineAccess access{*scheduler_, *tokenizer_, model_->config()};
  c.task(access);
}

void EngineLoop::handle(DrainCommand& c) { on_drained_ = std::move(c.on_drained); }

void EngineLoop::handle(ReconfigureCommand& c) {
  auto ok = scheduler_->reconfigure(c.scheduler);
  if (ok) {
    options_.scheduler = scheduler_->config();
    std::lock_guard lock(mu_);
    max_pending_ = c.max_pending;
  }
  c.reply(std::move(ok));
}

void EngineLoop::step() {
  const auto began = Clock::now();
  StepOutput out = scheduler_->step();
  const auto now = Clock::now();
  // Admission is not reported as an event; any request past waiting has been
  // admitted at least once, which is what queue_ms measures. It was admitted
  // as this step began: its wait ends there, and the step's compute (its
  // first prefill) is not queueing.
  for (auto& [id, live] : live_) {
    if (!live.admitted && scheduler_->status(id) != RequestStatus::kWaiting) live.admitted = began;
  }
  for (RequestEvent& e : out.events) {
    auto it = live_.find(e.id);
    if (it == live_.end()) continue;
    Live& live = it->second;
    tokens_generated_ += static_cast<long>(e.tokens.size());
    if (!e.tokens.empty() && !live.first_token) live.first_token = now;
    if (!e.tokens.empty() && e.sample >= 0 && e.sample < static_cast<int>(live.last_token.size())) {
      auto& last = live.last_token[static_cast<std::size_t>(e.sample)];
      // A step that made several tokens of the sample spreads its time.
      if (last) {
        const double gap = std::chrono::duration<double>(now - *last).count() /
                           static_cast<double>(e.tokens.size());
        for (std::size_t t = 0; t < e.tokens.size(); ++t) metrics_.inter_token.observe(gap);
      }
      last = now;
    }
    if (!e.error.empty()) {
      // One failed sample fails the request: its siblings' results would be
      // an incomplete answer.
      EventSink sink = std::move(live.sink);
      (void)scheduler_->cancel(e.id);  // the siblings still running, if any
      live_.erase(it);
      scheduler_->forget(e.id);
      fail(e.id, sink, e.error, false);
      continue;
    }
    // The finishing event's tokens and text are part of the final result;
    // they go out as progress first so a stream is complete.
    if (!e.tokens.empty() || !e.text.empty()) {
      EngineEvent progress;
      progress.id = e.id;
      progress.sample = e.sample;
      progress.logprobs = with_text(e.logprobs);
      progress.tokens = std::move(e.tokens);
      progress.text = std::move(e.text);
      live.sink(std::move(progress));
    }
    if (e.finish && ++live.samples_finished == live.samples) {
      ++completed_;
      finish(e.id, live, false);
    }
  }
}

void EngineLoop::finish(RequestId id, Live& live, bool cancelled) {
  const auto now = Clock::now();
  GenerateResult r;
  r.samples.resize(static_cast<std::size_t>(live.samples), SampleResult{{}, {}, "cancelled", {}});
  for (const Request* req : scheduler_->samples(id)) {
    SampleResult& s = r.samples.at(static_cast<std::size_t>(req->sample_index()));
    s.tokens.assign(req->generated().begin(), req->generated().end());
    s.text = req->text();
    s.logprobs = with_text(req->logprobs());
    if (req->finish_reason()) s.finish_reason = std::string(to_string(*req->finish_reason()));
    r.prompt_tokens = static_cast<int>(req->prompt().size());
    if (req->sample_index() == 0) {
      r.cached_tokens = req->cached_tokens();
      r.seed = req->sampling().seed;
    }
  }
  r.finish_reason = cancelled ? "cancelled" : r.samples.front().finish_reason;
  r.queue_ms =
      live.admitted ? ms_between(live.submitted, *live.admitted) : ms_between(live.submitted, now);
  r.ttft_ms = live.first_token ? ms_between(live.submitted, *live.first_token) : 0;
  r.total_ms = ms_between(live.submitted, now);
  metrics_.queue.observe(r.queue_ms / 1e3);
  if (live.first_token) {
    metrics_.ttft.observe(r.ttft_ms / 1e3);
    metrics_.ttft_by_source[prompt_source(r.cached_tokens, r.prompt_tokens)].observe(r.ttft_ms /
                                                                                     1e3);
  }
  metrics_.e2e.observe(r.total_ms / 1e3);
  ++metrics_.finished[r.finish_reason];
  metrics_.prompt_tokens += r.prompt_tokens;
  for (int t = 0; t < kNumTiers; ++t) metrics_.cached_tokens[t] += r.cached_tokens[t];

  EventSink sink = std::move(live.sink);
  live_.erase(id);
  scheduler_->forget(id);
  log_info(finished_line(id, mark_final(id), r));
  EngineEvent event;
  event.id = id;
  event.final = true;
  event.result = std::move(r);
  sink(std::move(event));
}

std::vector<TokenLogprobs> EngineLoop::with_text(std::span<const LogprobsEntry> entries) const {
  const auto text_of = [this](const TokenLogprob& t) {
    return LogprobText{t.token, tokenizer_->decode(std::span(&t.token, 1)), t.logprob};
  };
  std::vector<TokenLogprobs> out;
  out.reserve(entries.size());
  for (const LogprobsEntry& e : entries) {
    TokenLogprobs t{text_of(e.chosen), {}};
    for (const TokenLogprob& alt : e.top) t.top.push_back(text_of(alt));
    out.push_back(std::move(t));
  }
  return out;
}

void EngineLoop::fail(RequestId id, const EventSink& sink, std::string error, bool invalid_params) {
  ++failed_;
  mark_final(id);
  EngineEvent event;
  event.id = id;
  event.final = true;
  event.error = std::move(error);
  event.invalid_params = invalid_params;
  sink(std::move(event));
}

void EngineLoop::cancel_all() {
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (RequestId id : ids) {
    if (scheduler_->cancel(id)) ++cancelled_;
    finish(id, live_.at(id), true);
  }
}

}  // namespace kvtier::daemon
