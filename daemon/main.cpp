// kvtierd: serves text generation from a GPT-2 family model on a Unix socket
// (docs/protocol.md). With --prompt it instead generates once, prints the
// text and exits (oneshot.h).
//
// Every setting is a flag and may also come from a TOML or INI file given
// with --config, whose keys are the long flag names without the dashes in
// front (`max-kv-tokens = 8192`); flags on the command line override the
// file. Unknown keys and bad values are errors, as they are for flags.
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "daemon/access.h"
#include "daemon/engine_loop.h"
#include "daemon/log.h"
#include "daemon/oneshot.h"
#include "daemon/server.h"
#include "daemon/systemd_notify.h"

namespace {

using namespace kvtier::daemon;

// $XDG_RUNTIME_DIR/kvtier/kvtierd.sock for a user session, else the system
// path systemd's RuntimeDirectory=kvtier provides.
std::string default_socket_path() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime && *runtime) return std::string(runtime) + "/kvtier/kvtierd.sock";
  return "/run/kvtier/kvtierd.sock";
}

// The bundled model: installed next to the binary (`cmake --install` puts it
// in PREFIX/share/kvtier/models), else the source tree the binary was built
// from.
std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed =
        (exe.parent_path() / "../share/kvtier/models/fortunes-char").lexically_normal();
    if (fs::exists(installed / "config.json", ec)) return installed.string();
  }
  return KVTIER_DEFAULT_MODEL_DIR;
}

struct ServeOptions {
  std::string socket_path = default_socket_path();
  // A service holds many sequences at once: 16 full contexts of the bundled
  // model (16 MiB of KV for it) rather than the engine's single-context default.
  kvtier::SchedulerConfig scheduler{.max_kv_tokens = 4096};
  std::string policy = "fcfs";
  std::size_t max_line_bytes = 1 << 20;
  std::size_t max_output_bytes = 8 << 20;
  int max_pending = 256;
  int max_connections = 64;
  std::string log_level = "info";
  std::string socket_group;  // empty: the daemon's own group
  bool allow_any_uid = false;
};

int serve(const std::string& model_dir, ServeOptions o) {
  auto level = log_level_parse(o.log_level);
  if (!level) {
    log_error(level.error());
    return 2;
  }
  log_level_set(*level);
  auto policy = kvtier::parse_policy(o.policy);
  if (!policy) {
    log_error(policy.error());
    return 2;
  }
  o.scheduler.policy = *policy;
  if (auto ok = o.scheduler.validate(); !ok) {
    log_error(ok.error());
    return 2;
  }

  std::optional<gid_t> socket_group;
  if (!o.socket_group.empty()) {
    auto gid = group_id(o.socket_group);
    if (!gid) {
      log_error("--socket-group: " + gid.error());
      return 2;
    }
    socket_group = *gid;
  }

  // A client that vanishes mid-write must cost an EPIPE, not the daemon.
  std::signal(SIGPIPE, SIG_IGN);

  auto activated = activated_socket();
  if (!activated) {
    log_error(activated.error());
    return 1;
  }
  if (!*activated) {
    std::error_code ec;
    const auto dir = std::filesystem::path(o.socket_path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (ec) {
      log_error("cannot create " + dir.string() + ": " + ec.message());
      return 1;
    }
  }

  notify_status("loading the model from " + model_dir);
  auto engine = EngineLoop::create(model_dir, {o.scheduler, o.max_pending});
  if (!engine) {
    log_error(engine.error());
    return 1;
  }
  asio::io_context io(1);  // one Asio thread: sessions need no locks among themselves
  ServerOptions server_options;
  server_options.socket_path = o.socket_path;
  server_options.session = {.max_line_bytes = o.max_line_bytes,
                            .max_output_bytes = o.max_output_bytes,
                            .daemon_uid = ::geteuid(),
                            .allow_any_uid = o.allow_any_uid};
  server_options.max_connections = o.max_connections;
  server_options.socket_group = socket_group;
  server_options.activated_fd = activated->value_or(-1);
  Server server(io, **engine, std::move(server_options));
  if (auto ok = server.listen(); !ok) {
    log_error(ok.error());
    return 1;
  }
  (*engine)->start();
  server.start();
  io.run();
  (*engine)->stop();  // already stopped by the server, unless run() failed early
  log_info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  OneShotOptions one;
  one.model_dir = default_model_dir();
  ServeOptions serve_options;
  int threads = 0;

  CLI::App app{
      "kvtierd: KV-cache tiering inference daemon.\n"
      "Serves JSON-RPC on a Unix socket; with --prompt, generates once and exits."};
  app.set_config("--config", "",
                 "Read settings from this TOML/INI file: keys are the long flag names "
                 "(max-kv-tokens = 8192); command-line flags win");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--model", one.model_dir, "Model folder (config.json, model.safetensors)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--threads", threads, "Compute threads; 0 = OpenMP's default")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--page-size", one.page_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();

  auto* oneshot = app.add_option_group("one-shot", "Generate once from the command line and exit");
  auto* prompt_opt =
      oneshot->add_option("--prompt", one.prompt, "Generate a continuation of this text and exit");
  oneshot->add_option("--max-tokens", one.max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  oneshot->add_option("--temperature", one.temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  oneshot->add_option("--top-k", one.top_k, "Keep the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  oneshot->add_option("--top-p", one.top_p, "Nucleus sampling mass in (0, 1]")
      ->capture_default_str();
  oneshot->add_option("--seed", one.seed, "Seed of this request's random stream")
      ->capture_default_str();
  oneshot->add_option("--stop", one.stop, "Stop when this text appears (repeatable)");
  oneshot
      ->add_option("--prefill-chunk", one.prefill_chunk, "Prompt tokens per prefill step; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  auto* server = app.add_option_group("server", "Serve requests on a Unix socket");
  auto& so = serve_options;
  server->add_option("--socket", so.socket_path, "Unix socket path (its folder is created)")
      ->capture_default_str();
  server->add_option("--max-kv-tokens", so.scheduler.max_kv_tokens, "KV positions resident at once")
      ->capture_default_str();
  server->add_option("--max-batch-size", so.scheduler.max_batch_size, "Requests admitted at once")
      ->capture_default_str();
  server->add_option("--token-budget", so.scheduler.token_budget, "Tokens per forward pass")
      ->capture_default_str();
  server->add_option("--policy", so.policy, "Admission order: fcfs | priority")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  server->add_option("--max-line-bytes", so.max_line_bytes, "Longest request line accepted")
      ->check(CLI::Range(std::size_t{64}, std::size_t{1} << 30))
      ->capture_default_str();
  server
      ->add_option("--max-output-bytes", so.max_output_bytes,
                   "Reply bytes queued for a client before it is dropped")
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 30))
      ->capture_default_str();
  server->add_option("--max-pending", so.max_pending, "Requests queued or running, all clients")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  server->add_option("--max-connections", so.max_connections, "Connections served at once")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  server->add_option("--log-level", so.log_level, "error | warning | info | debug")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}))
      ->capture_default_str();
  server->add_option("--socket-group", so.socket_group,
                     "Group the socket file is given to (mode 0660); default: the daemon's");
  server->add_flag("--allow-any-uid", so.allow_any_uid,
                   "Let every client that can connect make privileged calls (shutdown); "
                   "default: only the daemon's uid and root");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 words an unknown config key as "INI was not able to parse KEY",
    // even for TOML; say what is wrong instead.
    const std::string what = e.what();
    const std::string prefix = "INI was not able to parse ";
    if (what.starts_with(prefix)) {
      std::cerr << "kvtierd: unknown setting '" << what.substr(prefix.size())
                << "' in the config file (its keys are the long flag names: see --help)\n";
      return e.get_exit_code();
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (threads > 0) omp_set_num_threads(threads);
  if (prompt_opt->count() > 0) return oneshot_run(one);
  so.scheduler.page_size = one.page_size;
  return serve(one.model_dir, so);
}
