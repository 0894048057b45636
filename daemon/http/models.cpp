// GET /v1/models: the one model this daemon serves, as OpenAI lists models,
// with its context length as vLLM gives it (max_model_len).
#include "daemon/control.h"
#include "daemon/http/routes.h"
#include "wire/http/openai.h"

namespace kvtier::daemon::http {

using wire::http::dump;
using wire::http::Exchange;
using wire::http::Request;
using wire::http::Response;
using wire::http::served_model_name;
using wire::http::unix_now;

void list_models(const Request&, const std::shared_ptr<Exchange>& exchange, Context& context) {
  static const std::int64_t started = unix_now();
  Response r;
  r.body = dump({{"object", "list"},
                 {"data",
                  {{{"id", served_model_name(context.control.config().model_dir)},
                    {"object", "model"},
                    {"created", started},
                    {"owned_by", "kvtier"},
                    {"max_model_len", context.engine.model_config().block_size}}}}});
  exchange->respond(std::move(r));
}

}  // namespace kvtier::daemon::http
