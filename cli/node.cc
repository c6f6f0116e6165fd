// iser-connect node: the node records (discovery/node_store.h), as iscsiadm -m node shows and
// changes them. Without -T/-p/--op: one "HOST:PORT,TPGT IQN" line per record. With -T and/or -p,
// --op show (the default), update or delete the matching records. The global -I tcp|iser narrows
// any of these to the records of that transport, as iscsiadm's -I does to an interface's.
//
// Secrets never come from argv, where every user sees them: --op update of a password key takes
// its value from --value-file FILE or, with `-v -`, one line of stdin. The global -v (--verbose)
// is --value here, as in iscsiadm; --verbose stays.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "cli/json_output.h"
#include "discovery/node_store.h"

namespace iser::cli {

namespace {

struct NodeArgs {
  bool json = false;
  std::string target;
  std::string portal;
  std::string op;
  std::string key;
  std::optional<std::string> value;
  std::string value_file;
};

[[noreturn]] void Throw(int code) {
  throw CLI::RuntimeError(code);
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  Throw(Fail(Status::InvalidArgument(message)));
}

std::string Describe(const NodeArgs& a, const std::string& transport) {
  std::string s = a.target.empty() ? "any target" : "target " + a.target;
  if (!a.portal.empty()) s += " at " + a.portal;
  if (!transport.empty()) s += " over " + transport;
  return s;
}

// The store's matches, less those of another transport than -I's.
Result<std::vector<NodeRecord>> FindRecords(const NodeStore& store, const NodeArgs& a,
                                            const std::optional<Portal>& portal,
                                            const std::string& transport,
                                            const NodeStore::Lock* lock) {
  Result<std::vector<NodeRecord>> records = store.Find(a.target, portal, lock);
  if (!records.ok() || transport.empty()) return records;
  const TransportKind kind = transport == "iser" ? TransportKind::kIser : TransportKind::kTcp;
  std::erase_if(*records, [kind](const NodeRecord& r) { return r.transport != kind; });
  return records;
}

// The first line of `in`, without its newline.
std::string FirstLine(std::istream& in) {
  std::string line;
  std::getline(in, line);
  return line;
}

std::string ValueFor(const NodeArgs& a) {
  if (!a.value_file.empty() && a.value) ThrowInvalid("give -v or --value-file, not both");
  if (!a.value_file.empty()) {
    std::ifstream in(a.value_file);
    if (!in) ThrowInvalid("cannot read value file " + a.value_file);
    return FirstLine(in);
  }
  if (!a.value) ThrowInvalid("--op update needs -v VALUE or --value-file FILE");
  if (*a.value == "-") return FirstLine(std::cin);
  if (IsSecretNodeKey(a.key)) {
    ThrowInvalid(a.key +
                 " is a secret: it is not taken from the command line, where other users can "
                 "see it; use --value-file FILE, or -v - to read one line from stdin");
  }
  return *a.value;
}

Json RecordJson(const NodeRecord& r) {
  return {{"target", r.name},
          {"portal", PortalJson(r.portal, r.tpgt)},
          {"transport", r.transport == TransportKind::kIser ? "iser" : "tcp"}};
}

void List(const std::vector<NodeRecord>& records, bool json) {
  if (json) {
    Json out = Json::array();
    for (const NodeRecord& r : records) out.push_back(RecordJson(r));
    std::printf("%s\n", DumpJson(out).c_str());
    return;
  }
  for (const NodeRecord& r : records) {
    std::printf("%s,%u %s\n", r.portal.ToString().c_str(), r.tpgt, r.name.c_str());
  }
}

std::string Shown(const NodeRecord& r, std::string_view key) {
  Result<std::string> v = NodeShowValue(r, key);
  return v.ok() ? *v : v.status().message();
}

void Show(const std::vector<NodeRecord>& records, bool json) {
  if (json) {
    Json out = Json::array();
    for (const NodeRecord& r : records) {
      Json keys = Json::object();
      for (std::string_view key : NodeRecordKeys()) keys[std::string(key)] = Shown(r, key);
      out.push_back(std::move(keys));
    }
    std::printf("%s\n", DumpJson(out).c_str());
    return;
  }
  bool first = true;
  for (const NodeRecord& r : records) {
    if (!first) std::printf("\n");
    first = false;
    for (std::string_view key : NodeRecordKeys()) {
      std::printf("%.*s = %s\n", static_cast<int>(key.size()), key.data(), Shown(r, key).c_str());
    }
  }
}

void Run(const NodeArgs& a, const GlobalOptions& g) {
  std::optional<Portal> portal;
  if (!a.portal.empty()) {
    Result<Portal> p = ParsePortal(a.portal);
    if (!p.ok()) Throw(Fail(p.status()));
    portal = *p;
  }
  const bool selected = !a.target.empty() || portal;
  const std::string& transport = g.transport;
  const std::string op = !a.op.empty() ? a.op : selected ? "show" : "list";
  if ((op == "update" || op == "delete") && !selected) {
    ThrowInvalid("--op " + op + " needs -T IQN and/or -p PORTAL");
  }
  if (op != "update" && (!a.key.empty() || a.value || !a.value_file.empty())) {
    ThrowInvalid("-n, -v and --value-file go with --op update");
  }
  Result<NodeStore> store =
      OpenNodeStore(g.config_dir, /*create=*/op == "update" || op == "delete");
  if (!store.ok()) Throw(FailStore(store.status()));

  if (op == "list" || op == "show") {
    Result<std::vector<NodeRecord>> records =
        FindRecords(*store, a, portal, transport, /*lock=*/nullptr);
    if (!records.ok()) Throw(FailStore(records.status()));
    if (records->empty()) {
      Throw(FailStore(
          Status::NotFound(selected || !transport.empty()
                               ? "no record for " + Describe(a, transport) + " in " + store->dir()
                               : "no records found in " + store->dir())));
    }
    (op == "list" ? List : Show)(*records, a.json);
    return;
  }

  std::string value;
  if (op == "update") {
    if (a.key.empty()) ThrowInvalid("--op update needs -n KEY");
    if (!UpdatableNodeKey(a.key)) {
      Result<std::string> known = GetNodeKey(NodeRecord{}, a.key);
      if (!known.ok()) Throw(Fail(known.status()));
      ThrowInvalid(a.key +
                   " names the record and cannot be updated (delete the record and discover "
                   "again)");
    }
    value = ValueFor(a);
  }
  Result<NodeStore::Lock> lock = store->Acquire();
  if (!lock.ok()) Throw(FailStore(lock.status()));
  Result<std::vector<NodeRecord>> records = FindRecords(*store, a, portal, transport, &*lock);
  if (!records.ok()) Throw(FailStore(records.status()));
  if (records->empty()) {
    Throw(FailStore(
        Status::NotFound("no record for " + Describe(a, transport) + " in " + store->dir())));
  }
  if (op == "delete") {
    for (const NodeRecord& r : *records) {
      Status removed = store->Remove(*lock, r);
      if (!removed.ok()) Throw(FailStore(removed));
      std::fprintf(stderr, "iser-connect: removed record %s,%u %s\n", r.portal.ToString().c_str(),
                   r.tpgt, r.name.c_str());
    }
    return;
  }
  // Every record is checked before any is written: a bad value changes none.
  std::vector<NodeRecord> updated = *records;
  for (NodeRecord& r : updated) {
    Status set = SetNodeKey(&r, a.key, value);
    if (!set.ok()) Throw(Fail(set));
  }
  for (const NodeRecord& r : updated) {
    Status written = store->Write(*lock, r);
    if (!written.ok()) Throw(FailStore(written));
  }
}

}  // namespace

void AddNodeCommand(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<NodeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "node", "list the node records, or show, update or delete those of one target (-T, -p)");
  AddGlobalOptions(*cmd, g, ShortVerbose::kNo);
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_option("-T,--targetname", args->target, "the target's IQN");
  cmd->add_option("-p,--portal", args->portal, "the record's portal HOST[:PORT]");
  cmd->add_option("-o,--op", args->op,
                  "show (default with -T/-p): every key; update: set key -n to -v; delete: "
                  "remove the records")
      ->check(CLI::IsMember({"show", "update", "delete"}));
  cmd->add_option("-n,--name", args->key,
                  "with --op update: the key (node.session.auth.username, ...)");
  cmd->add_option_function<std::string>(
      "-v,--value", [args](const std::string& v) { args->value = v; },
      "with --op update: the value; \"-\" reads one line from stdin (secrets: only so, or "
      "--value-file)");
  cmd->add_option("--value-file", args->value_file,
                  "with --op update: the value is the first line of FILE");
  cmd->callback([args, &g] {
    SetupLogging(g);
    Run(*args, g);
  });
}

}  // namespace iser::cli
