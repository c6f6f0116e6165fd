// A node record: what iser-connect remembers about one target at one portal (docs/nodes.md), in
// open-iscsi's words, so that `node --op update -n KEY` takes the keys iscsiadm users know.
//
// The file form is human-readable text, one "key = value" per line; blank lines and lines
// starting with '#' are ignored. ParseNodeRecord reads what FormatNodeRecord writes, and any
// file a user edited by hand: an unknown key, a key given twice, a line without " = ", a bad
// value or a missing identity key (node.name, node.conn[0].address) is an InvalidArgument
// naming the source, the line number and the key; every other key missing takes its default
// (iscsiadm's). Values are trimmed of surrounding spaces and tabs, which is why SetNodeKey refuses
// values that start or end with one: every value it accepts reads back unchanged.
//
// Identity: a record is named by (node.name, portal); node.tpgt is refreshed by discovery. The
// identity keys cannot be changed with SetNodeKey (UpdatableNodeKey is false for them). Names
// and hosts become file names (NodeRecordDirName, NodeRecordFileName), so they are checked to be
// safe path components: letters, digits and ".-:_" (plus '%' in hosts, for IPv6 zones), not
// starting with '.'.
//
// Secrets (the CHAP passwords) are never returned by NodeShowValue: "********" when set,
// "<empty>" when not, as iscsiadm shows them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "initiator/base/status.h"
#include "initiator/login/negotiation.h"
#include "initiator/transport/portal.h"

namespace iser {

enum class AuthMethod { kNone, kChap };

struct NodeRecord {
  std::string name;  // the target's IQN
  uint16_t tpgt = 1;
  Portal portal;
  TransportKind transport = TransportKind::kTcp;
  bool startup_automatic = false;  // node.startup = automatic | manual
  AuthMethod auth = AuthMethod::kNone;
  std::string username;  // CHAP: initiator authenticates to the target
  std::string password;
  std::string username_in;  // mutual CHAP: target authenticates to us
  std::string password_in;
  std::vector<DigestType> header_digest{DigestType::kNone};  // preference order
  std::vector<DigestType> data_digest{DigestType::kNone};
  std::chrono::milliseconds login_timeout{15000};
  std::chrono::milliseconds replacement_timeout{120000};
  std::chrono::milliseconds command_timeout{30000};
  // Where the record was discovered (SendTargets at this portal over this transport); an empty
  // host: created by hand, owned by no portal.
  Portal discovery_portal;
  TransportKind discovery_transport = TransportKind::kTcp;

  bool operator==(const NodeRecord&) const = default;
};

// Every key in the order files and `--op show` list them.
const std::vector<std::string_view>& NodeRecordKeys();
bool IsSecretNodeKey(std::string_view key);
bool UpdatableNodeKey(std::string_view key);

// The value of `key` as the file holds it; an unknown key is InvalidArgument.
Result<std::string> GetNodeKey(const NodeRecord& record, std::string_view key);
// The value as `node --op show` prints it: secrets masked, empty values as "<empty>".
Result<std::string> NodeShowValue(const NodeRecord& record, std::string_view key);
// Checks `value` for `key` and stores it; on error (naming the key, and the value unless it is a
// secret) the record is unchanged. Identity keys are accepted here: ParseNodeRecord needs them.
Status SetNodeKey(NodeRecord* record, std::string_view key, std::string_view value);

std::string FormatNodeRecord(const NodeRecord& record);
// source names the text in errors ("FILE:LINE: ...").
Result<NodeRecord> ParseNodeRecord(std::string_view text, std::string_view source);

// Checks that the identity (name, portal host) can name files; InvalidArgument otherwise.
Status CheckNodeIdentity(const NodeRecord& record);
// The record's directory under nodes/ (the IQN) and file name in it: "HOST,PORT,TPGT", IPv6 hosts
// in brackets. Only for records that pass CheckNodeIdentity.
std::string NodeRecordDirName(const NodeRecord& record);
std::string NodeRecordFileName(const NodeRecord& record);

// What OpenSession takes for this record: the URL (target, portal, transport, digests, and with
// authmethod CHAP the users and secrets; mutual CHAP when username_in is set) and `base` with the
// record's transport and timeouts.
IscsiUrl NodeRecordUrl(const NodeRecord& record);
ConnectOptions NodeRecordConnectOptions(const NodeRecord& record, ConnectOptions base);

}  // namespace iser
