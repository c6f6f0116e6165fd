// iser-connect mount: the LUNs of a target as files in a FUSE mount (frontends/fuse).
#include <cstdio>

#include "cli/commands.h"
#include "cli/mount_options.h"
#include "frontends/fuse/mount.h"
#include "sessions/client.h"

namespace iser::cli {

namespace {

// -o's session settings take the place of the matching command-line options.
void ApplyMountOptionList(const MountOptionList& list, GlobalOptions* g, fuse::MountOptions* m) {
  if (list.read_only) m->read_only = *list.read_only;
  m->allow_other = m->allow_other || list.allow_other;
  m->page_cache = m->page_cache || list.page_cache;
  if (list.replacement_timeout) g->replacement_timeout = list.replacement_timeout;
  if (list.command_timeout) g->command_timeout = list.command_timeout;
  if (list.login_timeout) g->login_timeout = *list.login_timeout;
  if (list.transport) g->transport = *list.transport;
  if (list.password_file) g->password_file = *list.password_file;
  if (list.target_password_file) g->target_password_file = *list.target_password_file;
}

}  // namespace

void AddMountCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string url;
    fuse::MountOptions mount;
    bool no_auto_unmount = false;
    bool new_session = false;
    std::vector<std::string> option_lists;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "mount",
      "expose the LUNs of a target as files (lun1, lun2, ...) in a FUSE mount; with a portal URL, "
      "every target the portal reports, as <target-iqn>/lun<N>");
  AddGlobalOptions(*cmd, g);
  AddSessionOptions(*cmd, g);
  cmd->add_option("url", args->url,
                  "iscsi:// or iser:// URL of the target (and LUN), or of a portal")
      ->required();
  cmd->add_option("mountpoint", args->mount.mountpoint, "an existing, empty directory")->required();
  cmd->add_flag("-f,--foreground", args->mount.foreground, "stay in the foreground");
  cmd->add_option("--pidfile", args->mount.pidfile, "write the serving process's pid once mounted");
  cmd->add_flag("--page-cache", args->mount.page_cache,
                "use the kernel page cache (default: direct I/O, no second cache)");
  cmd->add_flag("-r,--read-only", args->mount.read_only, "mount read-only");
  cmd->add_flag("--allow-other", args->mount.allow_other, "let other users open the files");
  cmd->add_flag("--new-session", args->new_session,
                "mount a target though a session with it exists in a tree or another mount (a "
                "second session, with an ISID of its own)");
  cmd->add_flag("--no-auto-unmount", args->no_auto_unmount,
                "keep the mount if the process dies (default: it is removed)");
  cmd->add_option("--threads", args->mount.max_threads, "FUSE worker threads")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--fuse-debug", args->mount.fuse_debug, "trace FUSE requests on stderr");
  cmd->add_option("-o", args->option_lists,
                  "mount options, comma separated, as in fstab: ro, rw, allow_other, page_cache, "
                  "replacement_timeout=S, command_timeout=S, login_timeout=S, transport=tcp|iser, "
                  "password_file=F, target_password_file=F; _netdev, nofail, x-* and the like are "
                  "ignored (docs/fstab.md)")
      ->allow_extra_args(false);
  cmd->callback([args, &g] {
    MountOptionList list;
    for (const std::string& text : args->option_lists) {
      if (Status st = ParseMountOptionList(text, &list); !st.ok()) {
        throw CLI::RuntimeError(Fail(st));
      }
    }
    ApplyMountOptionList(list, &g, &args->mount);
    SetupLogging(g);
    Result<IscsiUrl> url = ParseIscsiUrl(args->url);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    // A whole-portal mount holds what the portal reports, whoever else holds a target of it.
    if (!url->target.empty() && !args->new_session && !list.new_session) {
      if (std::optional<sessions::HeldSession> held = sessions::HolderOf(url->target)) {
        std::fprintf(stderr,
                     "iser-connect: session exists: already logged in to %s in %s "
                     "(--new-session, or -o new_session, mounts it with another session)\n",
                     url->target.c_str(), held->root.c_str());
        throw CLI::RuntimeError(exit_code::kSessionExists);
      }
    }
    fuse::MountOptions o = args->mount;
    o.url = *url;
    o.connect = *c;
    o.auto_unmount = !args->no_auto_unmount;
    const Status st = fuse::RunMount(o);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

}  // namespace iser::cli
