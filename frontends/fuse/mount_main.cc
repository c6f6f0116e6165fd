// iser-fuse-mount URL MOUNTPOINT [-f] [--pidfile F] [--page-cache] [--read-only] ...
// A developer and test tool calling RunMount, the code behind `iser-connect mount`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "frontends/fuse/mount.h"
#include "initiator/base/log.h"

namespace {

void StderrSink(iser::LogLevel level, const std::string& message) {
  static const char* const kNames[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "iser-fuse-mount: %s: %s\n", kNames[static_cast<int>(level)],
               message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Expose the LUNs of an iSCSI target as files (FUSE)", "iser-fuse-mount"};
  std::string url_text;
  iser::fuse::MountOptions o;
  bool verbose = false;
  bool no_auto_unmount = false;
  app.add_option("URL", url_text, "iscsi://HOST[:PORT]/TARGET[/LUN] or iser://...")->required();
  app.add_option("MOUNTPOINT", o.mountpoint, "an existing empty directory")->required();
  app.add_flag("-f,--foreground", o.foreground, "stay in the foreground");
  app.add_option("--pidfile", o.pidfile, "write the serving process's pid here once mounted");
  app.add_flag("--page-cache", o.page_cache, "use the kernel page cache (default: direct I/O)");
  app.add_flag("-r,--read-only", o.read_only, "mount read-only");
  app.add_flag("--allow-other", o.allow_other, "let other users open the files");
  app.add_flag("--no-auto-unmount", no_auto_unmount, "do not unmount when the process dies");
  app.add_option("--threads", o.max_threads, "FUSE worker threads")->check(CLI::Range(1, 1024));
  app.add_flag("--fuse-debug", o.fuse_debug, "trace FUSE requests");
  app.add_flag("-v,--verbose", verbose, "debug messages");
  CLI11_PARSE(app, argc, argv);
  o.auto_unmount = !no_auto_unmount;
  iser::SetLogSink(StderrSink, verbose ? iser::LogLevel::kDebug : iser::LogLevel::kInfo);

  iser::Result<iser::IscsiUrl> url = iser::ParseIscsiUrl(url_text);
  if (!url.ok()) {
    std::fprintf(stderr, "iser-fuse-mount: %s\n", url.status().ToString().c_str());
    return 2;
  }
  o.url = *url;
  const iser::Status st = iser::fuse::RunMount(o);
  if (!st.ok()) {
    std::fprintf(stderr, "iser-fuse-mount: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
