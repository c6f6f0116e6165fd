// iser-connect mount: the LUNs of a target as files in a FUSE mount (frontends/fuse).
#include "frontends/fuse/mount.h"
#include "cli/commands.h"

namespace iser::cli {

void AddMountCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string url;
    fuse::MountOptions mount;
    bool no_auto_unmount = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "mount", "expose the LUNs of a target as files (lun1, lun2, ...) in a FUSE mount");
  AddGlobalOptions(*cmd, g);
  AddSessionOptions(*cmd, g);
  cmd->add_option("url", args->url, "iscsi:// or iser:// URL of the target (and LUN)")->required();
  cmd->add_option("mountpoint", args->mount.mountpoint, "an existing, empty directory")->required();
  cmd->add_flag("-f,--foreground", args->mount.foreground, "stay in the foreground");
  cmd->add_option("--pidfile", args->mount.pidfile, "write the serving process's pid once mounted");
  cmd->add_flag("--page-cache", args->mount.page_cache,
                "use the kernel page cache (default: direct I/O, no second cache)");
  cmd->add_flag("-r,--read-only", args->mount.read_only, "mount read-only");
  cmd->add_flag("--allow-other", args->mount.allow_other, "let other users open the files");
  cmd->add_flag("--no-auto-unmount", args->no_auto_unmount,
                "keep the mount if the process dies (default: it is removed)");
  cmd->add_option("--threads", args->mount.max_threads, "FUSE worker threads")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--fuse-debug", args->mount.fuse_debug, "trace FUSE requests on stderr");
  cmd->callback([args, &g] {
    SetupLogging(g);
    Result<IscsiUrl> url = ParseIscsiUrl(args->url);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    fuse::MountOptions o = args->mount;
    o.url = *url;
    o.connect = *c;
    o.auto_unmount = !args->no_auto_unmount;
    const Status st = fuse::RunMount(o);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

}  // namespace iser::cli
