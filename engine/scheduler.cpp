#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <functional>
#include <new>
#include <utility>

#include "engine/block_hash.h"
#include "tiers/align.h"
#include "tiers/byte_size.h"
#include "tiers/host_memory.h"

namespace kvtier {
namespace {

constexpr std::string_view kNoScores =
    "eviction 'h2o' ranks keys by attention scores, which this forward (the GPU's) does not "
    "gather; use 'window' or 'sinks', or run on the CPU";

// An event about r, for its group's client: the fields the caller sets
// say what happened.
RequestEvent event_for(const Request& r) {
  RequestEvent event;
  event.id = r.group();
  event.sample = r.sample_index();
  return event;
}

// Refuses pools the machine cannot hold, with what it has: allocating them
// would throw, or, lazily touched, get the daemon killed once they fill up;
// L2 is locked into memory at once. `l1_host` is 0 when L1 is not host
// memory (a GPU's).
std::expected<void, std::string> host_memory_check(std::uint64_t l1_host, std::uint64_t l2) {
  const auto memory = tiers::host_memory();
  if (!memory || l1_host + l2 <= memory->available) return {};
  using tiers::bytes_text;
  return std::unexpected("the KV pools need " + bytes_text(l1_host + l2) + " of host memory (L1 " +
                         bytes_text(l1_host) + ", L2 " + bytes_text(l2) + ") but " +
                         bytes_text(memory->available) + " is available (" +
                         bytes_text(memory->total) +
                         " in all); lower max_kv_tokens, l1_bytes or l2_bytes");
}

}  // namespace

std::string_view to_string(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kFcfs:
      return "fcfs";
    case SchedulingPolicy::kPriority:
      return "priority";
  }
  return "unknown";
}

std::string_view to_string(PreemptionMode mode) {
  switch (mode) {
    case PreemptionMode::kRecompute:
      return "recompute";
    case PreemptionMode::kSwap:
      return "swap";
  }
  return "unknown";
}

std::expected<SchedulingPolicy, std::string> parse_policy(std::string_view name) {
  if (name == "fcfs") return SchedulingPolicy::kFcfs;
  if (name == "priority") return SchedulingPolicy::kPriority;
  return std::unexpected("unknown policy '" + std::string(name) + "' (expected fcfs or priority)");
}

std::expected<PreemptionMode, std::string> parse_preemption(std::string_view name) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  return std::unexpected("unknown preemption mode '" + std::string(name) +
                         "' (expected recompute or swap)");
}

std::expected<void, std::string> SchedulerConfig::validate() const {
  if (page_size < 1)
    return std::unexpected("page_size must be at least 1, got " + std::to_string(page_size));
  if (max_kv_tokens < page_size)
    return std::unexpected("max_kv_tokens (" + std::to_string(max_kv_tokens) +
                           ") is smaller than one KV block (page_size " +
                           std::to_string(page_size) + ")");
  if (max_batch_size < 1)
    return std::unexpected("max_batch_size must be at least 1, got " +
                           std::to_string(max_batch_size));
  if (token_budget < 1)
    return std::unexpected("token_budget must be at least 1, got " + std::to_string(token_budget));
  if (token_budget < max_batch_size)
    return std::unexpected("token_budget (" + std::to_string(token_budget) +
                           ") must be at least max_batch_size (" + std::to_string(max_batch_size) +
                           ") so that every running request decodes each step");
  if (preemption == PreemptionMode::kSwap && !prefix_cache)
    return std::unexpected(
        "preemption 'swap' moves KV through the prefix cache; turn prefix_cache on or use "
        "'recompute'");
  if (!prefix_cache && (cache.l2_bytes > 0 || !cache.l3_path.empty()))
    return std::unexpected("l2_bytes and l3_path need prefix_cache on");
  if (!cache.l3_path.empty() && cache.l3_bytes == 0)
    return std::unexpected("l3_path is set but l3_bytes is 0");
  if (prefix_cache)
    if (auto ok = cache.validate(); !ok) return ok;
  return {};
}

std::expected<std::unique_ptr<Scheduler>, std::string> Scheduler::create(
    Model& model, const Tokenizer* tokenizer, const SchedulerConfig& config, tiers::BlockPool* pool,
    ForwardPass forward) {
  if (auto ok = config.validate(); !ok) return std::unexpected(ok.error());
  if (config.eviction.needs_scores() && !forward.gathers_scores)
    return std::unexpected(std::string(kNoScores));
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
      return std::unexpected("cannot allocate L1: " + tiers::bytes_text(l1_host) +
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
    const std::uint64_t fingerprint =
        model_fingerprint(model.config(), model.weights(), config.page_size) ^ forward.kv_tag;
    std::expected<std::unique_ptr<KvCache>, std::string> created;
    try {
      created = KvCache::create(layout, fingerprint, *pool, config.cache, forward.kv_codec);
    } catch (const std::bad_alloc&) {
      return std::unexpected("cannot allocate the prefix cache's pools (L2 " +
                             tiers::bytes_text(l2_bytes) + "): host memory was refused");
    }
    if (!created) return std::unexpected(created.error());
    cache = std::move(*created);
  }
  if (!forward.run)
    forward.run = [&model](std::span<const Model::Chunk> chunks, tiers::BlockPool& p,
                           const std::function<void(int)>& before_attention) {
      return model.forward(chunks, p, before_attention);
    };
  return std::unique_ptr<Scheduler>(new Scheduler(model, tokenizer, config, std::move(owned), pool,
                                                  max_blocks, std::move(cache),
                                                  std::move(forward)));
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
  fixed.max_batch_size = config_.max_batch_size;
  fixed.policy = config_.policy;
  if (fixed.max_kv_tokens != config_.max_kv_tokens || fixed.page_size != config_.page_size ||
      fixed.preemption != config_.preemption)
    return std::unexpected(
        "only token_budget, max_batch_size and policy can change while the engine runs");
  for (const auto& [id, r] : requests_) {
    if (!is_terminal(r->status_) && r->num_samples_ > config.max_batch_size)
      return std::unexpected("request " + std::to_string(id) +
                             " has n = " + std::to_string(r->num_samples_) +
                             ", more than max_batch_size " + std::to_string(config.max_batch_size));
  }
  std::vector<RequestId> queued;
  for (const QueueKey& key : waiting_) queued.push_back(key.id);
  config_ = config;
  waiting_.clear();
  for (RequestId id : queued) waiting_.insert(queue_key(*requests_.at(id)));
  return {};
}

void Scheduler::calibrate_tier_costs() {
  if (!cache_) return;
  const int n = std::min({64, context_ - 1, max_blocks_ * config_.page_size});
  if (n > 0 && pool_->num_free() * config_.page_size >= n) {
    const std::vector<int> tokens(static_cast<std::size_t>(n), 0);
    calibrate_prefill(cache_->cost_model(), n, 5, [&] {
      SequenceKv kv(config_.page_size);
      if (!kv.reserve(*pool_, n)) return false;
      const Model::Chunk chunk{&kv, tokens, false};
      const bool ok = forward_.run(std::span(&chunk, 1), *pool_, {}).has_value();
      kv.release(*pool_);
      return ok;
    });
  }
  (void)cache_->calibrate();
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
  // The same rules as generate(), so a request the daemon accepts is one
  // generate() would have run.
  if (auto ok = validate_request(model_->config(), tokenizer_, params.prompt, params.max_tokens,
                                 params.sampling, params.stop);
      !ok)
    return std::unexpected(ok.error());
  const long prompt_len = static_cast<long>(params.prompt.size());
  if (params.priority < 0)
    return std::unexpected("priority must be 0 (most urgent) or more, got " +
                           std::to_string(params.priority));
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
  // The KV never holds the last sampled token, and generation ends at the
  // context, so this is the most the request can ever hold (with an eviction
  // policy, the most it keeps at once: seed 000's effective KV tokens). If
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

  const RequestId id = next_id_++;
  const std::string salt = params.cache_salt;
  auto request = std::make_unique<Request>(id, next_arrival_++, std::move(params),
                                           config_.page_size, context_);
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

int Scheduler::blocks_to_admit(const Request& r) const {
  if (r.eviction().evicts() && r.swap_ && r.swap_->stashed() > 0) return r.swap_->stashed() + 1;
  return blocks_for(static_cast<long>(r.tokens_.size()));
}

void Scheduler::admit(StepOutput& out) {
  // In queue order, except that a request whose cached blocks are still
  // coming up from L2 or L3 keeps its place without holding back the ones
  // behind it (vLLM's waiting-for-KV state): a read of milliseconds must not
  // stall requests that need none. Order never changes a request's tokens.
  // Blocks that the requests passed over for their loading KV will need once
  // it has landed: a request behind them goes only if it fits beside them.
  // (Without this, two loading requests took turns: the promotions of one
  // pushed the other's landed blocks back down, round after round.)
  int landing = 0;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Request& r = *requests_.at(it->id);
    if (used_batch_slots() + batch_slots(r) > config_.max_batch_size) break;
    // Keep the pages (and copies of shared blocks) the running requests need
    // for this step's decode, so an admission never forces a preemption in
    // the same step.
    int growth = 0;
    for (const Request* a : admitted_) {
      if (a->status_ == RequestStatus::kRunning)
        growth += a->kv_.blocks_needed(*pool_, a->kv_.length() + 1);
    }
    const int tokens = static_cast<int>(r.tokens_.size());
    const int need = blocks_to_admit(r);
    if (need > max_blocks_) {
      // submit() saw to it that the request fits while its policy evicts;
      // only a re-prefill after a recompute preemption (which evicts nothing
      // before its pass ends) can need more. It never will fit: waiting at
      // the head of the queue, it would hold back every request behind it.
      const int P = config_.page_size;
      r.error_ = "preempted at " + std::to_string(tokens) +
                 " tokens, which its re-prefill would hold at once (" + std::to_string(need) +
                 " pages of " + std::to_string(P) + ") but max_kv_tokens allows " +
                 std::to_string(max_blocks_ * P) +
                 "; preemption swap (with an L2) keeps such a request";
      it = waiting_.erase(it);
      r.swap_.reset();
      r.status_ = RequestStatus::kFailed;
      RequestEvent event = event_for(r);
      event.error = r.error_;
      out.events.push_back(std::move(event));
      continue;
    }
    if (used_blocks() + growth + landing + need > max_blocks_) break;
    if (cache_) {
      const Restore restored = restore_from_cache(r, need);
      if (restored == Restore::kNoRoom) break;
      if (restored == Restore::kLoading) {
        landing += need;
        ++it;
        continue;
      }
    }
    // A swapped request whose whole KV came back decodes at once.
    const bool resumes = r.num_generated() > 0 && r.kv_.length() == tokens - 1;
    if (!resumes && !reserve(r, tokens)) {
      // Only when cached blocks could not be demoted in time (L3 writes in
      // flight): give back what the cache lent and try again next step.
      r.computed_before_ = std::max(r.computed_before_, r.kv_.length());
      r.kv_.release(*pool_);
      layer_loads_.erase(&r);
      break;
    }
    it = waiting_.erase(it);
    if (r.status_ == RequestStatus::kSwapped) {
      r.swap_.reset();
      ++swapped_in_;
    }
    r.status_ = resumes ? RequestStatus::kRunning : RequestStatus::kPrefilling;
    admitted_.push_back(&r);
  }
}

Scheduler::Restore Scheduler::restore_from_cache(Request& r, int budget_blocks) {
  const int tokens = static_cast<int>(r.tokens_.size());
  const int P = config_.page_size;
  // A swapped request comes back only when L1 can take all of it now: a
  // restore cut short, or a reserve that fails after it, would drop blocks
  // swap kept and recompute them. Blocks still in transit cannot make room;
  // the requests running will, so it waits for them (with none running,
  // everything but transfers is free or demotable, and it goes).
  const bool stashed = r.swap_ && r.swap_->stashed() > 0;
  const bool swapped = r.num_generated() > 0 || stashed;
  if (swapped && !admitted_.empty() && pool_->num_free() + cache_->demotable_l1() < budget_blocks)
    return Restore::kNoRoom;
  PrefixLease lease;
  if (!r.eviction().evicts()) {
    // At least the last token is always fed: its logits pick the next token.
    // A fresh request may start while the last of its prefix is still
    // landing from L3, a layer at a time; a swapped one waits for its
    // blocks (they return beside the blocks it owns).
    auto leased = cache_->acquire_prefix(r.cache_root_, r.tokens_, (tokens - 1) / P, budget_blocks,
                                         /*by_layer=*/!swapped);
    if (!leased) return Restore::kLoading;
    lease = std::move(*leased);
    if (!r.cached_counted_) {
      for (int t = 0; t < kNumTiers; ++t) r.cached_tokens_[t] = lease.served().blocks[t] * P;
      r.cached_counted_ = true;
    }
  }
  int length = static_cast<int>(lease.blocks().size()) * P;
  // A swapped request's own blocks come back when the shared part reaches
  // them: its partial block after its full ones, or (with an eviction
  // policy) its whole table, holes included. Without room for them, the
  // lease gives back what it lent.
  const bool own_table = r.eviction().evicts();
  std::vector<std::pair<int, int>> restored;
  if (stashed && (own_table || length == r.swap_->length() / P * P)) {
    auto back = cache_->swap_in(*r.swap_);
    if (!back) return Restore::kNoRoom;
    restored = std::move(*back);
    length = r.swap_->length();
  }
  std::vector<int> blocks = lease.take_blocks();
  if (own_table && !restored.empty())
    blocks.assign(static_cast<std::size_t>(r.swap_->table_size()), SequenceKv::kEvictedBlock);
  for (const auto& [index, block] : restored) {
    if (own_table)
      blocks[static_cast<std::size_t>(index)] = block;
    else
      blocks.push_back(block);
  }
  if (lease.loading()) layer_loads_[&r] = std::move(lease);
  r.kv_ = SequenceKv::adopt(P, std::move(blocks), length);
  return Restore::kDone;
}

std::vector<CacheNode*> Scheduler::insert_into_cache(const Request& r) {
  // KV computed with pages evicted is not what the full cache holds: never
  // shared.
  if (r.eviction().evicts()) return {};
  int full = r.kv_.length() / config_.page_size;
  // A prefix still landing by layer came from the cache and is there already,
  // except a block whose move failed: the cache let go of it because its
  // bytes are unknown, and taking it back from the request would serve them.
  // Only the blocks before the load are offered (a touch, for them).
  if (const auto it = layer_loads_.find(&r); it != layer_loads_.end()) {
    const auto table = r.kv_.block_ids().first(static_cast<std::size_t>(full));
    full = static_cast<int>(
        std::find(table.begin(), table.end(), it->second.load().blocks.front()) - table.begin());
  }
  const auto tokens =
      std::span(r.tokens_).first(static_cast<std::size_t>(full) * config_.page_size);
  return cache_->insert(r.cache_root_, tokens, r.kv_.block_ids().first(full));
}

bool Scheduler::reserve(Request& r, int n) {
  const int more = r.kv_.blocks_needed(*pool_, n);
  if (more == 0) return true;
  if (used_blocks() + more > max_blocks_) return false;
  // Cached blocks no request holds make way (demoted down the tiers).
  if (cache_) cache_->make_free_l1(more);
  return r.kv_.reserve(*pool_, n);
}

Request* Scheduler::choose_victim() {
  // Least urgent first, then most recently arrived: the largest queue key.
  // Prefilling requests are candidates too, since they hold pages.
  auto it = std::max_element(
      admitted_.begin(), admitted_.end(),
      [this](const Request* a, const Request* b) { return queue_key(*a) < queue_key(*b); });
  return it == admitted_.end() ? nullptr : *it;
}

void Scheduler::preempt(Request& victim, StepOutput& out) {
  switch (config_.preemption) {
    case PreemptionMode::kRecompute:
      preempt_recompute(victim);
      break;
    case PreemptionMode::kSwap:
      preempt_swap(victim);
      break;
  }
  // Its blocks keep landing for the cache; a re-admission finds them there.
  layer_loads_.erase(&victim);
  ++victim.preemptions_;
  ++preemptions_;
  RequestEvent event = event_for(victim);
  event.preempted = true;
  out.events.push_back(std::move(event));
}

void Scheduler::preempt_recompute(Request& victim) {
  // Everything the KV held will be computed again. The generated tokens, the
  // Sampler and the StopMatcher are kept: the re-prefill covers prompt +
  // generated, and its last row's logits are those the next decode would have
  // produced, so the request continues exactly where it stopped.
  // With an eviction policy the re-prefill lets every position see the whole
  // context, which the original decode steps did not: the tokens after a
  // recompute preemption can differ from an uninterrupted run (swap keeps
  // them exact).
  victim.computed_before_ = std::max(victim.computed_before_, victim.kv_.length());
  victim.kv_.release(*pool_);
  victim.evictor_.reset();
  std::erase(admitted_, &victim);
  victim.status_ = RequestStatus::kWaiting;
  // Its original arrival puts it ahead of everything that came after it.
  waiting_.insert(queue_key(victim));
}

void Scheduler::preempt_swap(Request& victim) {
  // The full blocks join the prefix cache, held so they are dropped only as a
  // last resort; they leave L1 only when someone needs the room (they are
  // demoted like any cached block). The partial last block cannot be shared,
  // so it goes to an L2 slot of its own. Nothing is recomputed unless the
  // tiers run out of room for them.
  // A request with an eviction policy keeps its KV private: every resident
  // block goes to an L2 slot of its own, and if L2 cannot take them all it
  // is recomputed instead.
  const int length = victim.kv_.length();
  const int P = config_.page_size;
  const auto table = victim.kv_.block_ids();
  if (victim.eviction().evicts()) {
    victim.swap_ = cache_->swap_out_private(table, length);
    if (!victim.swap_) {
      preempt_recompute(victim);
      return;
    }
  } else {
    const bool partial = length % P != 0;
    victim.swap_ = cache_->swap_out(insert_into_cache(victim),
                                    partial ? table[static_cast<std::size_t>(length / P)] : -1,
                                    length / P, length, static_cast<int>(table.size()));
  }
  victim.computed_before_ = std::max(victim.computed_before_, length);
  victim.kv_.release(*pool_);
  std::erase(admitted_, &victim);
  victim.status_ = RequestStatus::kSwapped;
  waiting_.insert(queue_key(victim));
  ++swapped_out_;
}

void Scheduler::sample_and_append(Request& r, std::span<const float> logits, RequestEvent& event) {
  const int token = r.sampler_.sample(logits);
  r.tokens_.push_back(token);
  event.tokens.push_back(token);
  std::optional<FinishReason> finish;
  bool stopped = false;
  if (tokenizer_ != nullptr) {
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

  // The forward batch: decodes, then one prefill chunk in the room left.
  std::vector<Model::Chunk> chunks;
  std::vector<Request*> rows;
  for (Request* r : admitted_) {
    if (r->status_ != RequestStatus::kRunning) continue;
    chunks.push_back({&r->kv_, std::span(&r->tokens_.back(), 1), false, r->evictor_.scores()});
    rows.push_back(r);
  }
  out.decode_tokens = static_cast<int>(chunks.size());
  const int room = config_.token_budget - out.decode_tokens;
  for (Request* r : admitted_) {  // in urgency order: the first prefilling one
    if (r->status_ != RequestStatus::kPrefilling || room <= 0) continue;
    const int begin = r->kv_.length();
    const int n = std::min<int>(room, static_cast<int>(r->tokens_.size()) - begin);
    chunks.push_back(
        {&r->kv_, std::span(r->tokens_).subspan(begin, n), false, r->evictor_.scores()});
    rows.push_back(r);
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
  if (chunks.empty()) {
    // Nothing to compute: whoever is waiting waits for blocks on their way
    // up. Sleep until a transfer completes instead of spinning.
    if (cache_) cache_->wait(std::chrono::milliseconds(2));
    return out;
  }

  // The prefill may be of a request whose prefix is landing by layer: each
  // layer waits for its piece of those blocks.
  Request* loading = nullptr;
  if (out.prefill_tokens > 0 && layer_loads_.contains(rows.back())) loading = rows.back();
  std::function<void(int)> await_layer;
  if (loading != nullptr) {
    await_layer = [this, lease = &layer_loads_.at(loading)](int layer) {
      cache_->await_layer(lease->load(), layer);
    };
  }
  const auto pass_start = std::chrono::steady_clock::now();
  auto logits = forward_.run(chunks, *pool_, await_layer);
  // A pass that is mostly prefill is a sample of what recomputing a prefix
  // costs; a layer-by-layer load's waits are not compute, so its pass is
  // not one.
  if (cache_ && logits && !loading && out.prefill_tokens >= std::max(8, out.decode_tokens)) {
    cache_->cost_model().add_prefill(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count(),
        out.prefill_tokens + out.decode_tokens);
  }
  if (loading != nullptr && logits) {
    // Only now are the blocks verified. A bad one is gone from the cache;
    // the request's pass is thrown away and it queues again, to find the
    // prefix without that block and prefill the rest. (A failed forward
    // computed nothing: the request fails with the batch below, its load
    // unsettled.)
    const PrefixLease lease = std::move(layer_loads_.at(loading));
    layer_loads_.erase(loading);
    if (!cache_->settle(lease.load())) {
      ++discarded_passes_;
      // Nothing it was handed is used: it counts what it finds next time.
      loading->cached_tokens_ = {};
      loading->cached_counted_ = false;
      loading->kv_.release(*pool_);
      std::erase(admitted_, loading);
      loading->status_ = RequestStatus::kWaiting;
      waiting_.insert(queue_key(*loading));
    } else {
      loading = nullptr;
    }
  }
  if (!logits) {
    // forward() changes nothing when it fails; the batch's requests cannot
    // go on, the others can.
    for (Request* r : rows) {
      r->error_ = logits.error();
      retire(*r, RequestStatus::kFailed);
      RequestEvent event = event_for(*r);
      event.error = logits.error();
      out.events.push_back(std::move(event));
    }
    return out;
  }

  // Eviction as generate() does it: after the pass that completes the prompt
  // (never inside it, so chunking cannot change it) and after every decode.
  for (Request* r : rows)
    if (r->kv_.length() >= static_cast<int>(r->tokens_.size()))
      evicted_blocks_ += r->evictor_.evict(r->kv_, *pool_);

  const std::size_t V = static_cast<std::size_t>(vocab_size_);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Request& r = *rows[i];
    if (&r == loading) continue;  // computed from a corrupt block: thrown away
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
      sample_and_append(*s, logits->subspan(i * V, V), event);
      if (s->finish_) retire(*s, RequestStatus::kDone);
      out.events.push_back(std::move(event));
    }
  }
  return out;
}

std::vector<Request*> Scheduler::fork_samples(Request& head) {
  // The head has fed its prompt and sampled nothing: its KV is the prompt's.
  assert(head.num_generated() == 0 && head.kv_.length() == head.prompt_len_);
  head.forked_ = true;
  std::vector<Request*> forked;
  for (int index = 1; index < head.num_samples_; ++index) {
    const RequestId id = next_id_++;
    auto sample = std::make_unique<Request>(id, head, index, head.kv_.fork(*pool_));
    forked.push_back(sample.get());
    admitted_.push_back(sample.get());
    head.sample_ids_.push_back(id);
    requests_.emplace(id, std::move(sample));
  }
  return forked;
}

bool Scheduler::has_work() const { return !waiting_.empty() || !admitted_.empty(); }

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

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.waiting = static_cast<int>(waiting_.size());
  for (const Request* r : admitted_) {
    if (r->status_ == RequestStatus::kPrefilling) ++s.prefilling;
    if (r->status_ == RequestStatus::kRunning) ++s.running;
  }
  s.blocks_used = used_blocks();
  // Cached blocks no request holds give way on demand, so they count as free.
  s.blocks_free = std::min(max_blocks_ - s.blocks_used,
                           pool_->num_free() + (cache_ ? cache_->demotable_l1() : 0));
  s.steps = steps_;
  s.preemptions = preemptions_;
  s.recomputed_tokens = recomputed_tokens_;
  s.swapped_out = swapped_out_;
  s.evicted_blocks = evicted_blocks_;
  s.swapped_in = swapped_in_;
  s.discarded_passes = discarded_passes_;
  for (const auto& [id, r] : requests_) s.swapped += r->status_ == RequestStatus::kSwapped;
  return s;
}

std::expected<void, std::string> Scheduler::check_invariants() const {
  auto fail = [](const Request& r, const std::string& what) {
    return std::unexpected("request " + std::to_string(r.id_) + " (" +
                           std::string(to_string(r.status_)) + "): " + what);
  };
  // Block tables holding each block, and which request saw it last (to catch
  // a block twice in one table).
  std::vector<int> holders(static_cast<std::size_t>(pool_->num_blocks()), 0);
  std::vector<RequestId> last_holder(static_cast<std::size_t>(pool_->num_blocks()), 0);
  int waiting = 0, admitted = 0;
  for (const auto& [id, ptr] : requests_) {
    const Request& r = *ptr;
    const int length = r.kv_.length();
    const int tokens = static_cast<int>(r.tokens_.size());
    const bool in_batch = std::find(admitted_.begin(), admitted_.end(), &r) != admitted_.end();
    switch (r.status_) {
      case RequestStatus::kPrefilling:
        if (length >= tokens || r.kv_.capacity() < tokens)
          return fail(r, "KV length " + std::to_string(length) + " and capacity " +
                             std::to_string(r.kv_.capacity()) + " for " + std::to_string(tokens) +
                             " tokens to prefill");
        [[fallthrough]];
      case RequestStatus::kRunning:
        if (r.status_ == RequestStatus::kRunning && length != tokens - 1)
          return fail(r, "KV length " + std::to_string(length) + " but " + std::to_string(tokens) +
                             " tokens (expected tokens - 1)");
        if (!in_batch) return fail(r, "admitted but not in the batch");
        ++admitted;
        break;
      case RequestStatus::kWaiting:
      case RequestStatus::kSwapped:
        if (!waiting_.contains(queue_key(r))) return fail(r, "waiting but not in the queue");
        ++waiting;
        [[fallthrough]];
      default:
        if (!r.kv_.block_ids().empty() || length != 0)
          return fail(r, "holds " + std::to_string(r.kv_.block_ids().size()) +
                             " blocks but is not admitted");
        if (in_batch) return fail(r, "in the batch but not admitted");
        break;
    }
    for (int block : r.kv_.block_ids()) {
      if (block == SequenceKv::kEvictedBlock) continue;
      if (block < 0 || block >= pool_->num_blocks())
        return fail(r, "block " + std::to_string(block) + " is outside the pool");
      if (last_holder[block] == r.id_)
        return fail(r, "block " + std::to_string(block) + " is in its table twice");
      if (!pool_->is_allocated(block))
        return fail(r, "block " + std::to_string(block) + " is in its table but free");
      last_holder[block] = r.id_;
      ++holders[block];
    }
  }
  // Every reference the pool counts is a block-table entry or the prefix
  // cache's, and the other way round; the referenced blocks and the free list
  // then partition the pool.
  const std::vector<int> cached =
      cache_ ? cache_->l1_ref_counts() : std::vector<int>(holders.size(), 0);
  int used = 0, referenced = 0;
  for (int block = 0; block < pool_->num_blocks(); ++block) {
    if (holders[block] + cached[block] != pool_->ref_count(block))
      return std::unexpected("block " + std::to_string(block) + " has " +
                             std::to_string(pool_->ref_count(block)) + " references but " +
                             std::to_string(holders[block]) + " block tables and " +
                             std::to_string(cached[block]) + " cache entries hold it");
    if (holders[block] > 0) ++used;
    if (pool_->is_allocated(block)) ++referenced;
  }
  if (waiting != static_cast<int>(waiting_.size()))
    return std::unexpected("the queue holds " + std::to_string(waiting_.size()) + " entries but " +
                           std::to_string(waiting) + " requests are waiting");
  if (admitted != static_cast<int>(admitted_.size()))
    return std::unexpected("the batch holds " + std::to_string(admitted_.size()) +
                           " requests but " + std::to_string(admitted) + " are admitted");
  if (used_batch_slots() > config_.max_batch_size)
    return std::unexpected(std::to_string(used_batch_slots()) +
                           " batch slots taken, over max_batch_size " +
                           std::to_string(config_.max_batch_size));
  if (used != used_blocks())
    return std::unexpected("the budget counts " + std::to_string(used_blocks()) +
                           " blocks but the block tables hold " + std::to_string(used));
  if (used > max_blocks_)
    return std::unexpected("the requests use " + std::to_string(used * config_.page_size) +
                           " KV tokens, over max_kv_tokens (" +
                           std::to_string(max_blocks_ * config_.page_size) + ")");
  if (pool_->num_free() + referenced != pool_->num_blocks())
    return std::unexpected(std::to_string(pool_->num_free()) + " free + " +
                           std::to_string(referenced) + " referenced blocks != pool size " +
                           std::to_string(pool_->num_blocks()));
  if (cache_) return cache_->check_invariants();
  return {};
}

}  // namespace kvtier
