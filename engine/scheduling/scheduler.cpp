#include "engine/scheduling/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <functional>
#include <new>
#include <utility>

#include "engine/cache/block_hash.h"
#include "tiers/align.h"
#include "tiers/host_memory.h"
#include "util/byte_size.h"

namespace kvtier {
namespace {

constexpr std::string_view kNoScores =
    "eviction 'h2o' ranks keys by attention scores, which the GPU forward does not gather; "
    "use 'window' or 'sinks', or the CPU (--device cpu)";

}  // namespace

std::expected<void, std::string> Scheduler::host_memory_check(std::uint64_t l1_host,
                                                              std::uint64_t l2) {
  const auto memory = tiers::host_memory();
  if (!memory || l1_host + l2 <= memory->available) return {};
  using util::bytes_text;
  return std::unexpected("the KV pools need " + bytes_text(l1_host + l2) + " of host memory (L1 " +
                         bytes_text(l1_host) + ", L2 " + bytes_text(l2) + ") but " +
                         bytes_text(memory->available) + " is available (" +
                         bytes_text(memory->total) +
                         " in all); lower max_kv_tokens, l1_bytes or l2_bytes");
}

RequestEvent Scheduler::event_for(const Request& r) {
  RequestEvent event;
  event.id = r.group();
  event.sample = r.sample_index();
  return event;
}

std::expected<std::unique_ptr<Scheduler>, std::string> Scheduler::create(
    Model& model, const Tokenizer* tokenizer, const SchedulerConfig& config, tiers::BlockPool* pool,
    ForwardPass forward) {
  if (auto ok = config.validate(); !ok) return std::unexpected(ok.error());
  if (config.eviction.needs_scores() && !forward.gathers_scores)
    return std::unexpected(std::string(kNoScores));
  if (auto ok = config.eviction.check_rotation(model.config()); !ok)
    return std::unexpected(ok.error());
  const KvLayout layout = model.kv_layout(config.page_size);
  const L1Shape l1 = l1_shape(layout, config);
  const std::size_t block_bytes = l1.block_bytes;
  int max_blocks = config.max_kv_tokens / config.page_size;
  const std::uint64_t l2_bytes = config.prefix_cache ? config.cache.l2_bytes : 0;
  const std::uint64_t l1_host = pool == nullptr ? static_cast<std::uint64_t>(block_bytes) *
                                                      static_cast<std::uint64_t>(l1.blocks)
                                                : 0;
  if (auto ok = host_memory_check(l1_host, l2_bytes); !ok) return std::unexpected(ok.error());
  std::unique_ptr<tiers::BlockPool> owned;
  if (pool == nullptr) {
    try {
      owned = std::make_unique<tiers::BlockPool>(
          block_bytes, l1.blocks,
          config.prefix_cache ? tiers::Memory::kPageAligned : tiers::Memory::kPageable);
    } catch (const std::bad_alloc&) {
      return std::unexpected("cannot allocate L1: " + util::bytes_text(l1_host) +
                             " of host memory were refused");
    }
    pool = owned.get();
  } else {
    if (pool->block_bytes() < block_bytes)
      return std::unexpected("the pool's blocks have " + std::to_string(pool->block_bytes()) +
                             " bytes but page_size " + std::to_string(config.page_size) +
                             " needs " + std::to_string(block_bytes));
    if (pool->num_free() != pool->num_blocks())
      return std::unexpected("the pool must be the scheduler's alone, but " +
                             std::to_string(pool->num_blocks() - pool->num_free()) +
                             " of its blocks are in use");
    max_blocks = std::min(max_blocks, pool->num_blocks());
  }
  std::unique_ptr<KvCache> cache;
  if (config.prefix_cache) {
    const std::uint64_t fingerprint = model.fingerprint(config.page_size) ^ forward.kv_tag;
    std::expected<std::unique_ptr<KvCache>, std::string> created;
    try {
      created = KvCache::create(layout, fingerprint, *pool, config.cache, forward.kv_codec);
    } catch (const std::bad_alloc&) {
      return std::unexpected("cannot allocate the prefix cache's pools (L2 " +
                             util::bytes_text(l2_bytes) + "): host memory was refused");
    }
    if (!created) return std::unexpected(created.error());
    cache = std::move(*created);
  }
  if (!forward.run)
    forward.run = [&model](std::span<const Model::Chunk> chunks, tiers::BlockPool& p,
                           const std::function<void(int)>& before_attention) {
      return model.forward(chunks, p, before_attention);
    };
  std::unique_ptr<Scheduler> s(new Scheduler(model, tokenizer, config, std::move(owned), pool,
                                             max_blocks, std::move(cache), std::move(forward)));
  if (config.token_budget == SchedulerConfig::kAuto) s->measure_pass_sizes();
  s->apply_budgets(config);
  return s;
}

Scheduler::L1Shape Scheduler::l1_shape(const KvLayout& layout, const SchedulerConfig& config) {
  std::size_t block_bytes = layout.block_bytes();
  // O_DIRECT reads and writes go straight to and from L1 blocks.
  if (config.prefix_cache) block_bytes = tiers::round_up(block_bytes, 4096);
  const int blocks = std::max<int>(config.max_kv_tokens / config.page_size,
                                   static_cast<int>(config.l1_bytes / block_bytes));
  return {block_bytes, blocks};
}

Scheduler::Scheduler(Model& model, const Tokenizer* tokenizer, const SchedulerConfig& config,
                     std::unique_ptr<tiers::BlockPool> owned_pool, tiers::BlockPool* pool,
                     int max_blocks, std::unique_ptr<KvCache> cache, ForwardPass forward)
    : model_(&model),
      forward_(std::move(forward)),
      tokenizer_(tokenizer),
      tools_(ToolUse::of(model.config().tokenizer)),
      config_(config),
      owned_pool_(std::move(owned_pool)),
      pool_(pool),
      cache_(std::move(cache)),
      max_blocks_(max_blocks),
      context_(model.config().block_size),
      vocab_size_(model.config().vocab_size) {}

std::expected<void, std::string> Scheduler::reconfigure(const SchedulerConfig& config) {
  if (auto ok = config.validate(); !ok) return std::unexpected(ok.error());
  SchedulerConfig fixed = config;
  fixed.token_budget = config_.token_budget;
  fixed.mixed_prefill_tokens = config_.mixed_prefill_tokens;
  fixed.max_batch_size = config_.max_batch_size;
  fixed.policy = config_.policy;
  if (fixed.max_kv_tokens != config_.max_kv_tokens || fixed.page_size != config_.page_size ||
      fixed.preemption != config_.preemption)
    return std::unexpected(
        "only token_budget, mixed_prefill_tokens, max_batch_size and policy can change while "
        "the engine runs");
  for (const auto& [id, r] : requests_) {
    if (!is_terminal(r->status_) && r->num_samples_ > config.max_batch_size)
      return std::unexpected("request " + std::to_string(id) +
                             " has n = " + std::to_string(r->num_samples_) +
                             ", more than max_batch_size " + std::to_string(config.max_batch_size));
  }
  std::vector<RequestId> queued;
  for (const QueueKey& key : waiting_) queued.push_back(key.id);
  apply_budgets(config);
  waiting_.clear();
  for (RequestId id : queued) waiting_.insert(queue_key(*requests_.at(id)));
  return {};
}

Scheduler::~Scheduler() {
  // Requests' swap tickets give their stashes back to the cache as the
  // requests go (requests_ goes before cache_).
  for (Request* r : admitted_) r->kv_.release(*pool_);
}

int Scheduler::blocks_for(long positions) const {
  return static_cast<int>((positions + config_.page_size - 1) / config_.page_size);
}

Scheduler::QueueKey Scheduler::queue_key(const Request& r) const {
  const int priority = config_.policy == SchedulingPolicy::kPriority ? r.priority_ : 0;
  return {priority, r.arrival_, r.id_};
}

int Scheduler::used_blocks() const {
  // Distinct blocks: samples of one request share their prompt's blocks, and
  // the pool hands each out once.
  seen_.assign(static_cast<std::size_t>(pool_->num_blocks()), 0);
  int used = 0;
  for (const Request* r : admitted_) {
    for (int block : r->kv_.block_ids()) {
      if (block == SequenceKv::kEvictedBlock || seen_[block] != 0) continue;
      seen_[block] = 1;
      ++used;
    }
  }
  return used;
}

int Scheduler::batch_slots(const Request& r) const {
  return r.sample_index_ == 0 && !r.forked_ ? r.num_samples_ : 1;
}

int Scheduler::used_batch_slots() const {
  int slots = 0;
  for (const Request* r : admitted_) slots += batch_slots(*r);
  return slots;
}

std::vector<Request*> Scheduler::group_of(RequestId id) const {
  // The map owns the requests; const here only means the map is not changed.
  Request* r = requests_.at(id).get();
  std::vector<Request*> group = {r};
  if (r->sample_index_ != 0) return group;
  for (RequestId sample_id : r->sample_ids_) {
    auto it = requests_.find(sample_id);
    if (it != requests_.end()) group.push_back(it->second.get());
  }
  return group;
}

std::expected<RequestId, std::string> Scheduler::submit(RequestParams params) {
  return submit(std::move(params), next_id_);
}

std::expected<RequestId, std::string> Scheduler::submit(RequestParams params, RequestId id) {
  if (id == 0 || id >= kFirstSampleId)
    return std::unexpected("request id " + std::to_string(id) + " is outside [1, 2^63)");
  if (requests_.contains(id))
    return std::unexpected("request id " + std::to_string(id) + " is in use");
  // The same rules as generate(), so a request the daemon accepts is one
  // generate() would have run.
  if (auto ok = validate_request(model_->config(), tokenizer_, params.prompt, params.max_tokens,
                                 params.sampling, params.stop, params.stop_token_ids);
      !ok)
    return std::unexpected(ok.error());
  const long prompt_len = static_cast<long>(params.prompt.size());
  if (params.priority < 0)
    return std::unexpected("priority must be 0 (most urgent) or more, got " +
                           std::to_string(params.priority));
  if (params.logprobs < -1 || params.logprobs > kMaxLogprobs)
    return std::unexpected("logprobs must be in [0, " + std::to_string(kMaxLogprobs) +
                           "] alternatives (or -1: none), got " + std::to_string(params.logprobs));
  if (params.n < 1 || params.n > kMaxSamples)
    return std::unexpected("n (samples) must be in [1, " + std::to_string(kMaxSamples) + "], got " +
                           std::to_string(params.n));
  if (params.n > config_.max_batch_size)
    return std::unexpected("n (samples) is " + std::to_string(params.n) +
                           " but max_batch_size allows " + std::to_string(config_.max_batch_size) +
                           " sequences at once");
  if (!params.eviction) params.eviction = config_.eviction;
  if (auto ok = params.eviction->validate(config_.page_size); !ok)
    return std::unexpected(ok.error());
  if (params.eviction->needs_scores() && !forward_.gathers_scores)
    return std::unexpected(std::string(kNoScores));
  if (auto ok = params.eviction->check_rotation(model_->config()); !ok)
    return std::unexpected(ok.error());
  // Samples share the prompt's pages, and each would turn them its own way.
  if (params.eviction->rotate && params.n > 1)
    return std::unexpected("eviction policy '" + params.eviction->to_string() +
                           "': rotate=on rewrites the keys of the pages a request keeps, which " +
                           std::to_string(params.n) +
                           " samples would share; ask for n=1 or drop rotate=on");
  // The KV never holds the last sampled token, and generation ends at the
  // context, so this is the most the request can ever hold (with an eviction
  // policy, the most it keeps at once: its effective KV tokens). If
  // that cannot fit the whole budget, admitting it would end in preempting it
  // forever.
  const long longest = std::min<long>(prompt_len + params.max_tokens - 1, context_);
  const int effective = effective_kv_tokens(*params.eviction, static_cast<int>(prompt_len),
                                            static_cast<int>(longest), config_.page_size);
  if (blocks_for(effective) > max_blocks_)
    return std::unexpected("the request may need " + std::to_string(effective) + " KV tokens (" +
                           std::to_string(blocks_for(effective)) + " pages of " +
                           std::to_string(config_.page_size) + ") but max_kv_tokens allows " +
                           std::to_string(max_blocks_ * config_.page_size) +
                           "; shorten the prompt or max_tokens");

  next_id_ = std::max(next_id_, id + 1);
  const std::string salt = params.cache_salt;
  const bool tools = params.tools.value_or(config_.tools) && tools_ && tokenizer_ != nullptr;
  auto request = std::make_unique<Request>(id, next_arrival_++, std::move(params),
                                           config_.page_size, context_);
  if (tools) request->tools_ = tools_;
  if (cache_) request->cache_root_ = cache_->root(salt);
  waiting_.insert(queue_key(*request));
  requests_.emplace(id, std::move(request));
  return id;
}

std::expected<void, std::string> Scheduler::cancel(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::unexpected("no request with id " + std::to_string(id));
  Request& r = *it->second;
  const std::vector<Request*> group = group_of(id);
  if (std::all_of(group.begin(), group.end(),
                  [](const Request* m) { return is_terminal(m->status_); }))
    return std::unexpected("request " + std::to_string(id) + " already finished (" +
                           std::string(to_string(r.status_)) + ")");
  for (Request* m : group) {
    if (is_terminal(m->status_)) continue;
    if (m->status_ == RequestStatus::kWaiting || m->status_ == RequestStatus::kSwapped) {
      waiting_.erase(queue_key(*m));
      m->swap_.reset();
      m->status_ = RequestStatus::kCancelled;
    } else {
      retire(*m, RequestStatus::kCancelled);
    }
  }
  return {};
}

void Scheduler::retire(Request& r, RequestStatus status) {
  // Done or cancelled, the KV it computed is right and may serve a later
  // request; a failed forward() wrote nothing, so the same holds.
  if (cache_) insert_into_cache(r);
  r.kv_.release(*pool_);
  r.status_ = status;
  std::erase(admitted_, &r);
  layer_loads_.erase(&r);
}

void Scheduler::sort_admitted_by_urgency() {
  std::sort(admitted_.begin(), admitted_.end(),
            [this](const Request* a, const Request* b) { return queue_key(*a) < queue_key(*b); });
}

bool Scheduler::has_work() const { return !waiting_.empty() || !admitted_.empty(); }

bool Scheduler::cache_busy() const { return cache_ && cache_->transfers_in_flight() > 0; }

void Scheduler::tend_cache() {
  if (!cache_) return;
  cache_->poll();
  cache_->wait(std::chrono::milliseconds(2));
}

const Request* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::optional<RequestStatus> Scheduler::status(RequestId id) const {
  const Request* r = find(id);
  if (r == nullptr) return std::nullopt;
  return r->status_;
}

std::vector<const Request*> Scheduler::samples(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  auto head = requests_.find(it->second->group_);
  if (head == requests_.end()) return {};
  const std::vector<Request*> group = group_of(head->first);
  return {group.begin(), group.end()};
}

bool Scheduler::forget(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->sample_index_ != 0) return false;
  const std::vector<Request*> group = group_of(id);
  if (!std::all_of(group.begin(), group.end(),
                   [](const Request* m) { return is_terminal(m->status_); }))
    return false;
  for (Request* m : group) requests_.erase(m->id_);
  return true;
}

}  // namespace kvtier
