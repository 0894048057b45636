#include "daemon/start_checks.h"

#include <filesystem>

#include "daemon/service_checks.h"
#include "engine/model/kv_layout.h"
#include "engine/model/model_folder.h"
#include "engine/model/tokenizer.h"
#include "engine/scheduling/scheduler.h"
#include "wire/access.h"

namespace kvtier::daemon {

using wire::ChatTemplate;
using wire::group_id;

std::expected<std::optional<gid_t>, std::string> socket_group_of(const DaemonConfig& c) {
  if (c.socket_group.empty()) return std::nullopt;
  auto gid = group_id(c.socket_group);
  if (!gid) return std::unexpected("--socket-group: " + gid.error());
  return *gid;
}

std::expected<StartPlan, std::string> start_checks(const DaemonConfig& c, StartCheck purpose) {
  StartPlan plan;
  auto group = socket_group_of(c);
  if (!group) return std::unexpected(group.error());
  plan.socket_group = *group;
  // A credential the service has not been given says how to give it.
  const std::string& key = c.http_api_key_file;
  const bool credential = key.starts_with(kCredentials);
  if (auto ok = credential_check("http_api_key_file", key, "api-key"); !ok) {
    if (!credential || purpose == StartCheck::kStart) return std::unexpected(ok.error());
  }
  const bool read_key =
      purpose == StartCheck::kStart || !credential || std::filesystem::exists(key);
  auto listen = wire::http::listen_spec(c.http_listen, key, read_key);
  if (!listen) return std::unexpected(listen.error());
  plan.http_listen = std::move(*listen);
  // The model folder, as EngineLoop::create says it when it loads the model.
  const std::string cannot_load = "cannot load model from " + c.model_dir + ": ";
  auto model = read_model_config(c.model_dir);
  if (!model) return std::unexpected(cannot_load + model.error());
  if (auto tokenizer = Tokenizer::load(model->tokenizer); !tokenizer)
    return std::unexpected(cannot_load + tokenizer.error());
  auto chat_template = ChatTemplate::load(c.model_dir, model->tokenizer);
  if (!chat_template) return std::unexpected(chat_template.error());
  plan.chat_template = std::move(*chat_template);
  const SchedulerConfig& s = c.scheduler;
  if (auto ok = s.validate(); !ok) return std::unexpected(ok.error());
  if (auto ok = s.eviction.check_rotation(*model); !ok) return std::unexpected(ok.error());
  const auto l1 = Scheduler::l1_shape(KvLayout::of(*model, s.page_size), s);
  const std::uint64_t l1_host = c.device == "cpu" ? static_cast<std::uint64_t>(l1.block_bytes) *
                                                        static_cast<std::uint64_t>(l1.blocks)
                                                  : 0;
  if (auto ok = Scheduler::host_memory_check(l1_host, s.prefix_cache ? s.cache.l2_bytes : 0); !ok)
    return std::unexpected(ok.error());
  return plan;
}

}  // namespace kvtier::daemon
