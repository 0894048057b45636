#include "wire/http/openai.h"

#include <filesystem>

namespace kvtier::wire::http {

using nlohmann::json;

std::string served_model_name(const std::string& model_dir) {
  std::filesystem::path dir(model_dir);
  if (!dir.has_filename()) dir = dir.parent_path();  // "models/fortunes-char/"
  const std::string name = dir.filename().string();
  return name.empty() ? std::string("kvtier") : name;
}

const char* openai_finish_reason(const std::string& ours) {
  if (ours == "stop") return "stop";
  if (ours == "cancelled") return "abort";
  return "length";  // "length", "context"
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace kvtier::wire::http
