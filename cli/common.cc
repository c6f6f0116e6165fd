#include "cli/common.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdio>
#include <fstream>

#include "discovery/seconds.h"
#include "initiator/base/log.h"

namespace iser::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return exit_code::kOk;
    case StatusCode::kInvalidArgument:
      return exit_code::kInvalidArgument;
    case StatusCode::kLoginFailed:
      return exit_code::kLogin;
    case StatusCode::kConnectionFailed:
      return exit_code::kLogin;
    case StatusCode::kFatalLogin:
      return exit_code::kFatalLogin;
    case StatusCode::kAuthFailed:
      return exit_code::kAuthFailed;
    case StatusCode::kTimeout:
      return exit_code::kTransportTimeout;
    case StatusCode::kNotFound:
      return exit_code::kNoObjectsFound;
    default:
      return exit_code::kGeneric;
  }
}

int Fail(const Status& status) {
  std::fprintf(stderr, "iser-connect: %s\n", status.ToString().c_str());
  return ExitCodeFor(status);
}

int FailStore(const Status& status) {
  std::fprintf(stderr, "iser-connect: %s\n", status.ToString().c_str());
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return exit_code::kInvalidArgument;
    case StatusCode::kNotFound:
      return exit_code::kNoObjectsFound;
    default:
      return exit_code::kNodeDatabase;
  }
}

void AddGlobalOptions(CLI::App& app, GlobalOptions& g, ShortVerbose v) {
  app.add_option("-i,--initiator-name", g.initiator_name,
                 "initiator IQN (default: $ISER_CONNECT_INITIATOR_NAME or one derived from the "
                 "host)");
  app.add_flag(v == ShortVerbose::kYes ? "-v,--verbose" : "--verbose", g.verbose,
               "log protocol events (same as --log-level debug)");
  app.add_option("--log-level", g.log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}));
  app.add_option("--password-file", g.password_file,
                 "file holding the CHAP secret (else $LIBISCSI_CHAP_PASSWORD)");
  app.add_option("--target-password-file", g.target_password_file,
                 "file holding the mutual CHAP secret (else $LIBISCSI_CHAP_TARGET_PASSWORD)");
  app.add_option("--username", g.username,
                 "CHAP user where the URL names none (else $LIBISCSI_CHAP_USERNAME)");
  app.add_option("--target-username", g.target_username,
                 "mutual CHAP user where the URL names none (else "
                 "$LIBISCSI_CHAP_TARGET_USERNAME)");
  app.add_option("-I,--transport", g.transport,
                 "tcp or iser (default: from the URL; node: only the records of this transport)")
      ->check(CLI::IsMember({"tcp", "iser"}));
  app.add_option("--login-timeout", g.login_timeout, "seconds to connect and log in (default 15)");
  app.add_option("--config-dir", g.config_dir,
                 "node records directory, for discover, login and node (default: "
                 "/etc/iser-connect as root, else $XDG_CONFIG_HOME/iser-connect or "
                 "~/.config/iser-connect)");
}

void AddSessionOptions(CLI::App& cmd, GlobalOptions& g) {
  cmd.add_option_function<std::string>(
      "--replacement-timeout", [&g](const std::string& v) { g.replacement_timeout = v; },
      "seconds I/O waits for a lost connection to be recovered before it fails; recovery goes "
      "on (default: the URL's replacement_timeout=, else 120; 0: fail at once)");
  cmd.add_option_function<std::string>(
      "--command-timeout", [&g](const std::string& v) { g.command_timeout = v; },
      "seconds before an unanswered command is aborted and retried (default: the URL's "
      "command_timeout=, else 30; 0: never)");
}

namespace {

void LibrarySink(LogLevel level, const std::string& message) {
  switch (level) {
    case LogLevel::kDebug:
      spdlog::debug("{}", message);
      break;
    case LogLevel::kInfo:
      spdlog::info("{}", message);
      break;
    case LogLevel::kWarning:
      spdlog::warn("{}", message);
      break;
    case LogLevel::kError:
      spdlog::error("{}", message);
      break;
  }
}

Result<std::string> ReadSecret(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read secret file " + path);
  std::string secret;
  std::getline(in, secret);
  if (secret.empty()) return Status::InvalidArgument("secret file " + path + " is empty");
  return secret;
}

// A duration option that is given only to override the URL's argument.
Status ParseSetting(const char* name, const std::optional<std::string>& text,
                    std::optional<std::chrono::milliseconds>* out) {
  if (!text) return Status::OK();
  Result<std::chrono::milliseconds> t = ParseSeconds(name, *text);
  if (!t.ok()) return t.status();
  *out = *t;
  return Status::OK();
}

}  // namespace

void SetupLogging(const GlobalOptions& g) {
  auto logger = spdlog::stderr_color_mt("iser-connect");
  logger->set_pattern("%^%l%$: %v");
  spdlog::set_default_logger(logger);
  std::string level = g.verbose ? "debug" : g.log_level;
  LogLevel lib = LogLevel::kWarning;
  if (level == "debug") {
    spdlog::set_level(spdlog::level::debug);
    lib = LogLevel::kDebug;
  } else if (level == "info") {
    spdlog::set_level(spdlog::level::info);
    lib = LogLevel::kInfo;
  } else if (level == "error") {
    spdlog::set_level(spdlog::level::err);
    lib = LogLevel::kError;
  } else {
    spdlog::set_level(spdlog::level::warn);
  }
  SetLogSink(&LibrarySink, lib);
}

Result<ConnectOptions> MakeConnectOptions(const GlobalOptions& g) {
  ConnectOptions c;
  c.initiator_name = g.initiator_name;
  c.user = g.username;
  c.target_user = g.target_username;
  c.password_hint = "--password-file FILE";
  c.target_password_hint = "--target-password-file FILE";
  c.user_hint = "--username USER";
  c.target_user_hint = "--target-username USER";
  if (g.transport == "tcp") c.transport = TransportKind::kTcp;
  if (g.transport == "iser") c.transport = TransportKind::kIser;
  if (!g.password_file.empty()) {
    Result<std::string> s = ReadSecret(g.password_file);
    if (!s.ok()) return s.status();
    c.password = *s;
  }
  if (!g.target_password_file.empty()) {
    Result<std::string> s = ReadSecret(g.target_password_file);
    if (!s.ok()) return s.status();
    c.target_password = *s;
  }
  Result<std::chrono::milliseconds> login =
      ParseSeconds("--login-timeout", g.login_timeout, std::chrono::milliseconds(1));
  if (!login.ok()) return login.status();
  c.login_timeout = *login;
  ISER_RETURN_IF_ERROR(
      ParseSetting("--replacement-timeout", g.replacement_timeout, &c.replacement_timeout));
  ISER_RETURN_IF_ERROR(ParseSetting("--command-timeout", g.command_timeout, &c.command_timeout));
  return c;
}

Result<IscsiUrl> ParseUrlOrPortal(const std::string& text) {
  // Meant as a URL, right or wrong ("iscsi:/HOST", "ISCSI://..."): its message says what a URL
  // looks like. A portal has no '/' outside its brackets (a zone may hold one, and ParsePortal
  // names a bad zone).
  const std::string lower = [&] {
    std::string l = text.substr(0, 7);
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return l;
  }();
  if (text.find("://") != std::string::npos || lower.starts_with("iscsi:/") ||
      lower.starts_with("iser:/")) {
    return ParseIscsiUrl(text);
  }
  const size_t close = text.starts_with('[') ? text.find(']') : std::string::npos;
  if (text.find('/', close == std::string::npos ? 0 : close) != std::string::npos) {
    return Status::InvalidArgument(
        "'" + text + "' is neither a portal (HOST[:PORT]) nor a URL: " + std::string(kUrlForm));
  }
  Result<Portal> portal = ParsePortal(text);
  if (!portal.ok()) return portal.status();
  IscsiUrl url;
  url.portal = *portal;
  return url;
}

}  // namespace iser::cli
