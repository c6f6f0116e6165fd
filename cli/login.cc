// iser-connect login: a target's LUNs as files in the tree of the session daemon
// (frontends/fuse/tree_client.h), ROOT/<target-iqn>/lun<N>.
#include <cstdio>

#include "cli/commands.h"
#include "frontends/fuse/tree_client.h"

namespace iser::cli {

void AddLoginCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string url;
    fuse::TreeLoginOptions tree;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "login",
      "log in to a target and expose its LUNs as ROOT/<target-iqn>/lun<N>, in the one tree the "
      "session daemon serves (started if none runs)");
  AddGlobalOptions(*cmd, g);
  AddSessionOptions(*cmd, g);
  cmd->add_option("url", args->url, "iscsi:// or iser:// URL of the target (and LUN)")->required();
  cmd->add_option("--mountpoint", args->tree.mountpoint,
                  "the tree's ROOT (default: $XDG_RUNTIME_DIR/iser-connect, /run/iser-connect as "
                  "root); an existing, empty directory when the daemon starts");
  cmd->add_flag("--page-cache", args->tree.page_cache,
                "use the kernel page cache (default: direct I/O); when the daemon starts");
  cmd->add_flag("-r,--read-only", args->tree.read_only,
                "serve the tree read-only; when the daemon starts");
  cmd->add_flag("--allow-other", args->tree.allow_other,
                "let other users open the files; when the daemon starts");
  cmd->add_option("--threads", args->tree.max_threads,
                  "FUSE worker threads; when the daemon starts")
      ->check(CLI::Range(1, 1024));
  cmd->callback([args, &g] {
    SetupLogging(g);
    Result<IscsiUrl> url = ParseIscsiUrl(args->url);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    Result<fuse::TreeLogin> login = fuse::LoginToTree(*url, *c, args->tree);
    if (!login.ok()) throw CLI::RuntimeError(Fail(login.status()));
    if (login->exists) {
      std::fprintf(stderr, "iser-connect: session exists: already logged in to %s in %s\n",
                   url->target.c_str(), login->root.c_str());
      throw CLI::RuntimeError(exit_code::kSessionExists);
    }
    std::printf("Login to [target: %s, portal: %s] successful: %s/%s\n", url->target.c_str(),
                url->portal.ToString().c_str(), login->root.c_str(), url->target.c_str());
  });
}

}  // namespace iser::cli
