// The JSON documents iser-connect prints with --json, and the one way they are written out.
//
// Objects keep their keys in the order they are set (ordered_json), so the output reads like
// the text form. Strings come from the network (target names, INQUIRY fields) or the system
// (thread names) and may hold bytes that are not UTF-8: DumpJson replaces every invalid byte
// sequence with U+FFFD, so the output is always valid JSON and valid UTF-8.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli/listing.h"
#include "discovery/sendtargets.h"
#include "sessions/control.h"

namespace iser::cli {

using Json = nlohmann::ordered_json;

// One line, no spaces, no trailing newline.
std::string DumpJson(const Json& document);

using sessions::PortalJson;

// discover --json: [{"target", "portals": [PortalJson]}]
Json DiscoveryJson(const std::vector<DiscoveredTarget>& targets);

// ls --json: [{"target", "portal": PortalJson, then "error" or "luns": [{"lun", "type",
// "vendor", "product", "revision", "serial", "id", and for disks "size", "logical_block_size",
// "physical_block_size", "max_transfer", "thin", "lbprz", "unmap", "write_same_unmap",
// "write_cache", "fua",
// "read_only", "rotational"}]}]
Json ListingJson(const std::vector<TargetListing>& listing);

// session --json, from the status replies of the tree processes (sessions/control.h):
// [{"target", "portal" (PortalJson: where it logged in), "connection" (where it is now, with its
// transport: "TCP 10.0.0.1:3260"), "current_portal" (PortalJson: the same), "sid" (the session's
// ID, sessions/session_ids.h), "transport" ("tcp" or "iser"), "datamover", "state" ("logged in",
// "recovering", "failed"), "recoveries", "replayed_tasks", "retried_commands", "commands",
// "bytes_read", "bytes_written", "files": [absolute paths], "parameters": {negotiated key: value,
// as RFC 7143 names them; numbers as numbers, "Yes"/"No", digests "None"/"CRC32C"}, "root": the
// tree, "pid": its process, "kind" ("daemon", "portal" or "mount"), and "portal_mount"
// (PortalJson) for a whole-portal mount's sessions}]
Json SessionsJson(const std::vector<Json>& tree_statuses);

}  // namespace iser::cli
