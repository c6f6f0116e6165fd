// Logging for the library: one process-wide sink that the program installs (spdlog in the CLI,
// nbdkit_debug/nbdkit_error in the plugin). Without a sink, warnings and errors go to stderr.
#pragma once

#include <string>

namespace iser {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
using LogSink = void (*)(LogLevel level, const std::string& message);

void SetLogSink(LogSink sink, LogLevel min_level);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);

}  // namespace iser
