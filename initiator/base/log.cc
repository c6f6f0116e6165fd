#include "initiator/base/log.h"

#include <atomic>
#include <cstdio>

namespace iser {

namespace {
std::atomic<LogSink> g_sink{nullptr};
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kWarning)};
}  // namespace

void SetLogSink(LogSink sink, LogLevel min_level) {
  g_sink = sink;
  g_min_level = static_cast<int>(min_level);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_min_level.load();
}

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  if (LogSink sink = g_sink.load()) {
    sink(level, message);
    return;
  }
  static const char* const kNames[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "iser-connect: %s: %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace iser
