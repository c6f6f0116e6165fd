// Shared pieces of the iser-connect subcommands: global options, exit codes (iscsiadm's where
// the meaning matches), URL-or-portal arguments, secrets from files, human-readable sizes.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "initiator/base/status.h"

namespace iser::cli {

// iscsiadm's exit codes (open-iscsi include/iscsi_err.h) for the failures they name.
namespace exit_code {
inline constexpr int kOk = 0;
inline constexpr int kGeneric = 1;
inline constexpr int kLogin = 5;
inline constexpr int kNodeDatabase = 6;  // ISCSI_ERR_IDBM: the node record store
inline constexpr int kInvalidArgument = 7;
inline constexpr int kTransportTimeout = 8;
inline constexpr int kSessionExists = 15;
inline constexpr int kFatalLogin = 19;
inline constexpr int kNoObjectsFound = 21;
inline constexpr int kAuthFailed = 24;
inline constexpr int kVerifyFailed = 30;  // ours: bench --verify found bad data
}  // namespace exit_code

int ExitCodeFor(const Status& status);

// The options every subcommand takes (and iser-connect itself, before the subcommand). Each is
// used where it means something and accepted harmlessly elsewhere (cli/iser-connect.pod,
// "GLOBAL OPTIONS", says where), so that one command line works for every subcommand.
struct GlobalOptions {
  std::string initiator_name;
  bool verbose = false;
  std::string log_level = "warning";
  std::string password_file;         // CHAP secret (initiator to target)
  std::string target_password_file;  // mutual CHAP secret
  std::string username;              // CHAP user where the URL names none
  std::string target_username;       // mutual CHAP user where the URL names none
  std::string transport;             // "", "tcp" or "iser"
  std::string login_timeout = "15";  // seconds
  std::string config_dir;            // the node record store (discovery/node_store.h; "": default)
  // Session recovery (AddSessionOptions); unset: the URL's argument, else the default.
  std::optional<std::string> replacement_timeout;
  std::optional<std::string> command_timeout;
};

// Whether -v is --verbose: node keeps it for --value, as iscsiadm does.
enum class ShortVerbose { kYes, kNo };
void AddGlobalOptions(CLI::App& app, GlobalOptions& g, ShortVerbose v = ShortVerbose::kYes);
// The options of the subcommands that open a normal session (recovery settings), into g.
void AddSessionOptions(CLI::App& cmd, GlobalOptions& g);
// Applies --log-level/--verbose to spdlog and the library's log sink.
void SetupLogging(const GlobalOptions& g);
// ConnectOptions from the global options (reads the password files, checks the durations).
Result<ConnectOptions> MakeConnectOptions(const GlobalOptions& g);

// Accepts a URL (iscsi://, iser://) or a bare portal "HOST[:PORT]".
Result<IscsiUrl> ParseUrlOrPortal(const std::string& text);

// Prints "iser-connect: <message>" to stderr and returns the exit code for it.
int Fail(const Status& status);
// Fail for errors of the node record store (discovery/node_store.h): a bad value is 7, a record
// not found 21, and every other error, about the store's directory or files, 6.
int FailStore(const Status& status);

}  // namespace iser::cli
