// iscsi:// and iser:// URLs and portals, good and bad.
#include <gtest/gtest.h>

#include "discovery/sendtargets.h"
#include "discovery/url.h"

namespace iser {
namespace {

TEST(Url, FullLibiscsiForm) {
  Result<IscsiUrl> u = ParseIscsiUrl(
      "iscsi://alice%s3cret@192.0.2.1:3261/iqn.2026-11.example:disk/3"
      "?target_user=tgt&target_password=p%40ss&header_digest=crc32c-none&auth=sha-256,md5");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->transport, TransportKind::kTcp);
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "s3cret");
  EXPECT_EQ(u->portal.host, "192.0.2.1");
  EXPECT_EQ(u->portal.port, 3261);
  EXPECT_EQ(u->target, "iqn.2026-11.example:disk");
  ASSERT_TRUE(u->lun);
  EXPECT_EQ(*u->lun, 3u);
  EXPECT_EQ(u->target_user, "tgt");
  EXPECT_EQ(u->target_password, "p@ss");
  ASSERT_TRUE(u->header_digest);
  EXPECT_EQ(*u->header_digest, (std::vector<DigestType>{DigestType::kCrc32c, DigestType::kNone}));
  EXPECT_EQ(u->auth, (std::vector<ChapAlgorithm>{ChapAlgorithm::kSha256, ChapAlgorithm::kMd5}));
  EXPECT_EQ(u->Redacted(),
            "iscsi://alice%***@192.0.2.1:3261/iqn.2026-11.example:disk/3"
            "?target_user=tgt&target_password=***&header_digest=crc32c-none&auth=SHA256,MD5");
}

TEST(Url, PortalOnlyDefaultPortAndIser) {
  Result<IscsiUrl> u = ParseIscsiUrl("iser://storage.example");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->transport, TransportKind::kIser);
  EXPECT_EQ(u->portal.port, 3260);
  EXPECT_TRUE(u->target.empty());
  EXPECT_FALSE(u->lun);
  u = ParseIscsiUrl("iscsi://127.0.0.1?iser");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->transport, TransportKind::kIser);
  u = ParseIscsiUrl("iscsi://127.0.0.1/iqn.x/");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->lun);
}

TEST(Url, Ipv6) {
  Result<IscsiUrl> u = ParseIscsiUrl("iscsi://[fec0::1]:3262/iqn.x/0");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->portal.host, "fec0::1");
  EXPECT_EQ(u->portal.port, 3262);
  EXPECT_EQ(u->portal.ToString(), "[fec0::1]:3262");
  EXPECT_EQ(*u->lun, 0u);
}

TEST(Url, BadUrlsNameTheProblem) {
  auto err = [](const char* url) { return ParseIscsiUrl(url).status(); };
  EXPECT_NE(err("http://x/iqn/1").message().find("iscsi://"), std::string::npos);
  EXPECT_NE(err("iscsi://h/iqn/1?bogus=1").message().find("unknown argument 'bogus'"),
            std::string::npos);
  EXPECT_NE(err("iscsi://h:0/iqn/1").message().find("port"), std::string::npos);
  EXPECT_NE(err("iscsi://h:70000/iqn/1").message().find("port"), std::string::npos);
  EXPECT_NE(err("iscsi://h:abc/iqn/1").message().find("port"), std::string::npos);
  EXPECT_NE(err("iscsi://h/iqn/x1").message().find("LUN"), std::string::npos);
  EXPECT_NE(err("iscsi://h/iqn/1?auth=des").message().find("des"), std::string::npos);
  EXPECT_NE(err("iscsi://h/iqn/1?header_digest=md5").message().find("header_digest"),
            std::string::npos);
  EXPECT_NE(err("iscsi://h/iqn/1?auth=md5&auth=sha1").message().find("twice"), std::string::npos);
  EXPECT_NE(err("iscsi://h/iq%zz/1").message().find("percent"), std::string::npos);
  EXPECT_NE(err("iscsi://h/iq%2/1").message().find("percent"), std::string::npos);
  EXPECT_NE(err("iscsi://[fec0::1/iqn/1").message().find("["), std::string::npos);
  EXPECT_NE(err("iscsi://h/iqn/1?target_user").message().find("needs a value"), std::string::npos);
  EXPECT_NE(err("iscsi://@h/iqn/1").message().find("user"), std::string::npos);
  EXPECT_EQ(err("iscsi://bad host/iqn").code(), StatusCode::kInvalidArgument);
}

TEST(Url, AuthIsAListKeptInItsOrder) {
  Result<IscsiUrl> u = ParseIscsiUrl("iscsi://alice@h/iqn.x/1?auth=sha1,sha3-256,md5");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->auth, (std::vector<ChapAlgorithm>{ChapAlgorithm::kSha1, ChapAlgorithm::kSha3_256,
                                                 ChapAlgorithm::kMd5}));
  u = ParseIscsiUrl("iscsi://alice@h/iqn.x/1?auth=md5,sha-256");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->auth, (std::vector<ChapAlgorithm>{ChapAlgorithm::kMd5, ChapAlgorithm::kSha256}));
  u = ParseIscsiUrl("iscsi://alice@h/iqn.x/1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->auth.empty()) << "no auth=: the library's default applies";
}

TEST(Url, BadAuthListsSayWhatIsWrong) {
  auto err = [](const char* url) { return ParseIscsiUrl(url).status(); };
  const Status twice = err("iscsi://h/iqn/1?auth=md5,sha-256,md5");
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("auth: CHAP algorithm 'md5' is listed twice"), std::string::npos)
      << twice.message();
  const Status unknown = err("iscsi://h/iqn/1?auth=sha-256,sha512");
  EXPECT_NE(unknown.message().find("auth: unknown CHAP algorithm 'sha512' (use md5, sha1, "
                                   "sha-256 or sha3-256)"),
            std::string::npos)
      << unknown.message();
  for (const char* empty : {"iscsi://h/iqn/1?auth=", "iscsi://h/iqn/1?auth=md5,"}) {
    const Status st = err(empty);
    EXPECT_NE(st.message().find("auth: empty name"), std::string::npos) << st.message();
  }
}

TEST(Portal, Forms) {
  EXPECT_EQ(ParsePortal("10.1.2.3")->port, 3260);
  EXPECT_EQ(ParsePortal("10.1.2.3:3000")->port, 3000);
  EXPECT_EQ(ParsePortal("[::1]:3000")->host, "::1");
  EXPECT_EQ(ParsePortal("fe80::1")->host, "fe80::1");
  EXPECT_FALSE(ParsePortal("").ok());
  EXPECT_FALSE(ParsePortal("[::1]x").ok());
  EXPECT_FALSE(ParsePortal("[nothex]:1").ok());
}

// RFC 4007's zone, which a link-local address needs: "%eth0" in a portal as iscsiadm and ip(8)
// write it, "%25eth0" in a URL (RFC 6874).
TEST(Portal, Ipv6ZoneIsKeptWithTheHost) {
  Result<Portal> p = ParsePortal("[fe80::1%eth0]:3261");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->host, "fe80::1%eth0");
  EXPECT_EQ(p->port, 3261);
  EXPECT_EQ(p->ToString(), "[fe80::1%eth0]:3261");
  p = ParsePortal("fe80::1%2");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->host, "fe80::1%2") << "a numeric zone: the interface index";
  EXPECT_EQ(p->port, 3260);
  EXPECT_EQ(ParsePortal("[fe80::1%veth-a.1_b]")->host, "fe80::1%veth-a.1_b");
}

TEST(Portal, BadZonesSayWhatIsWrong) {
  auto message = [](const char* text) { return ParsePortal(text).status().message(); };
  EXPECT_NE(message("[fe80::1%]:3260").find("empty zone"), std::string::npos);
  EXPECT_NE(message("[fe80::1%eth/0]").find("bad zone 'eth/0'"), std::string::npos);
  EXPECT_NE(message("[fe80::1%eth0%1]").find("bad zone 'eth0%1'"), std::string::npos);
  EXPECT_NE(message("[fe80::1%a23456789012345b]").find("at most 15"), std::string::npos);
  EXPECT_NE(message("[fe8g::1%eth0]").find("bad IPv6 address 'fe8g::1'"), std::string::npos);
  EXPECT_NE(message("fe80::1%").find("empty zone"), std::string::npos);
  EXPECT_FALSE(ParsePortal("10.0.0.1%eth0").ok()) << "zones are for IPv6 addresses";
  EXPECT_FALSE(ParsePortal("[fe80::1%eth0:3260").ok());
}

TEST(Portal, ReportedLinkLocalAddressesTakeTheZoneOfThePortalAsked) {
  const Portal asked{"fe80::1%eth0", 3260};
  EXPECT_EQ(OnLinkOf({"fe80::1", 3261}, asked), (Portal{"fe80::1%eth0", 3261}));
  EXPECT_EQ(OnLinkOf({"fe80::2%tgt1", 3260}, asked), (Portal{"fe80::2%eth0", 3260}))
      << "the target's own interface name means nothing here";
  EXPECT_EQ(OnLinkOf({"2001:db8::1", 3260}, asked), (Portal{"2001:db8::1", 3260}));
  EXPECT_EQ(OnLinkOf({"192.0.2.1", 3260}, asked), (Portal{"192.0.2.1", 3260}));
  EXPECT_EQ(OnLinkOf({"fe80::1", 3260}, {"192.0.2.1", 3260}), (Portal{"fe80::1", 3260}))
      << "asked without a zone: nothing to give";
}

TEST(Url, Ipv6ZoneIsPercent25) {
  Result<IscsiUrl> u = ParseIscsiUrl("iscsi://[fe80::1%25eth0]:3262/iqn.x/1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->portal.host, "fe80::1%eth0");
  EXPECT_EQ(u->portal.port, 3262);
  EXPECT_EQ(u->Redacted(), "iscsi://[fe80::1%25eth0]:3262/iqn.x/1");
  u = ParseIscsiUrl("iser://alice%secret@[fe80::1%25eth0]/iqn.x");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->portal.host, "fe80::1%eth0");
  EXPECT_EQ(u->password, "secret");
  // "%25" is the delimiter, always: what follows is the zone, "1" here, never "251".
  u = ParseIscsiUrl("iscsi://[fe80::1%251]/iqn.x");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->portal.host, "fe80::1%1");
  EXPECT_EQ(u->Redacted(), "iscsi://[fe80::1%251]:3260/iqn.x");
  u = ParseIscsiUrl("iscsi://[fe80::1%2525]/iqn.x");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->portal.host, "fe80::1%25") << "the delimiter, then the zone \"25\"";
  // The zone itself may be escaped; it must decode to a valid zone.
  u = ParseIscsiUrl("iscsi://[fe80::1%25eth%2D0]/iqn.x");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->portal.host, "fe80::1%eth-0");
  u = ParseIscsiUrl("iscsi://h/iqn.x?portal=[fe80::2%25eth1]:3261");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->alternate_portals, (std::vector<Portal>{{"fe80::2%eth1", 3261}}));
  EXPECT_EQ(u->Redacted(), "iscsi://h:3260/iqn.x?portal=[fe80::2%25eth1]:3261");
  // The same in portal= arguments: "%25", then the zone.
  u = ParseIscsiUrl("iscsi://h/iqn.x?portal=[fe80::2%251]:3261&portal=[fe80::3%2525]");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->alternate_portals, (std::vector<Portal>{{"fe80::2%1", 3261}, {"fe80::3%25", 3260}}));
  auto message = [](const char* url) { return ParseIscsiUrl(url).status().message(); };
  EXPECT_NE(message("iscsi://[fe80::1%25]/iqn.x").find("empty zone"), std::string::npos);
  EXPECT_NE(message("iscsi://[fe80::1%25eth%2F0]/iqn.x").find("bad zone 'eth/0'"),
            std::string::npos);
  EXPECT_NE(message("iscsi://[fe80::1%25eth%zz]/iqn.x").find("percent-escape in the zone"),
            std::string::npos);
}

// RFC 6874 writes the zone delimiter "%25" in a URI; a bare '%' there starts a percent-escape and
// cannot end an address. Taking it as the delimiter too made "[fe80::1%251]", zone "251" as
// iscsiadm writes it, silently zone "1": a URL is read one way only, and the error shows that way.
TEST(Url, BarePercentBeforeAZoneIsAnErrorShowingThePercent25Form) {
  auto message = [](const std::string& url) { return ParseIscsiUrl(url).status().message(); };
  struct Case {
    const char* url;
    const char* bad;    // the text the message quotes
    const char* right;  // the form it proposes
  };
  for (const Case& c : {
           Case{"iscsi://[fe80::1%eth0]/iqn.x", "[fe80::1%eth0]", "[fe80::1%25eth0]"},
           Case{"iscsi://[fe80::1%1]:3261/iqn.x/2", "[fe80::1%1]:3261", "[fe80::1%251]:3261"},
           Case{"iser://alice%secret@[fe80::1%2eth0]/iqn.x", "[fe80::1%2eth0]",
                "[fe80::1%252eth0]"},
           Case{"iscsi://h/iqn.x?portal=[fe80::2%eth1]:3261", "[fe80::2%eth1]:3261",
                "[fe80::2%25eth1]:3261"},
           Case{"iscsi://h/iqn.x?portal=[fe80::2%12]", "[fe80::2%12]", "[fe80::2%2512]"},
           Case{"iscsi://fe80::1%eth0/iqn.x", "fe80::1%eth0", "[fe80::1%25eth0]"},
           Case{"iscsi://fe80::1%eth0:3261/iqn.x", "fe80::1%eth0:3261", "[fe80::1%25eth0]:3261"},
           Case{"iscsi://h/iqn.x?portal=fe80::2%25eth1", "fe80::2%25eth1", "[fe80::2%25eth1]"},
       }) {
    const std::string m = message(c.url);
    EXPECT_NE(m.find(std::string("'") + c.bad + "'"), std::string::npos) << c.url << ": " << m;
    EXPECT_NE(m.find(std::string("write ") + c.right), std::string::npos) << c.url << ": " << m;
    EXPECT_NE(m.find("%25"), std::string::npos) << c.url << ": " << m;
    EXPECT_EQ(m.find("secret"), std::string::npos) << m;
  }
}

// Without brackets and two colons a '%' is no zone: a host name is refused as a host, not with
// advice about IPv6 zones, and an escaped IPv4 portal still reads.
TEST(Url, PercentOutsideAnIpv6AddressIsNoZone) {
  Result<IscsiUrl> u = ParseIscsiUrl("iscsi://ho%73t/iqn.x");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("bad host"), std::string::npos) << u.status().ToString();
  EXPECT_EQ(u.status().message().find("%25"), std::string::npos) << u.status().ToString();
  u = ParseIscsiUrl("iscsi://h/iqn.x?portal=10.0.0.1%3A3261");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  ASSERT_EQ(u->alternate_portals.size(), 1u);
  EXPECT_EQ(u->alternate_portals[0].host, "10.0.0.1");
  EXPECT_EQ(u->alternate_portals[0].port, 3261);
}

TEST(Url, PasswordsArePercentDecodedAndKeptOutOfErrors) {
  // The first '%' separates user and password (libiscsi's form); later ones are escapes.
  Result<IscsiUrl> u = ParseIscsiUrl("iscsi://bob%p%40ss%25w@h/iqn.x/1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->user, "bob");
  EXPECT_EQ(u->password, "p@ss%w");
  const Status st =
      ParseIscsiUrl("iscsi://bob%hunter2@h/iqn.x/zz?target_password=swordfish").status();
  EXPECT_NE(st.message().find("LUN"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("hunter2"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("swordfish"), std::string::npos) << st.message();
  EXPECT_FALSE(ParseIscsiUrl("iscsi://bob%pa%zz@h/iqn.x/1").ok());
  const Status no_user =
      ParseIscsiUrl("iscsi://h/iqn.x/1?target_password=swordfish&bogus").status();
  EXPECT_NE(no_user.message().find("bogus"), std::string::npos) << no_user.message();
  EXPECT_EQ(no_user.message().find("swordfish"), std::string::npos) << no_user.message();
}

TEST(Url, EachArgumentAndLunBounds) {
  Result<IscsiUrl> u =
      ParseIscsiUrl("iser://[::1]/iqn.x/281474976710655?data_digest=none-crc32c&auth=SHA3-256");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->transport, TransportKind::kIser);
  EXPECT_EQ(*u->lun, 281474976710655u);
  EXPECT_FALSE(u->header_digest);
  EXPECT_EQ(*u->data_digest, (std::vector<DigestType>{DigestType::kNone, DigestType::kCrc32c}));
  EXPECT_EQ(u->auth, std::vector<ChapAlgorithm>{ChapAlgorithm::kSha3_256});
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h/iqn.x/281474976710656").ok()) << "LUN above 2^48-1";
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h/iqn.x/-1").ok());
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h/iqn.x/1?iser=1").ok());
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h//1").ok()) << "a LUN without a target";
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h:/iqn.x").ok());
}

TEST(Url, RecoverySettings) {
  Result<IscsiUrl> u = ParseIscsiUrl(
      "iscsi://h/iqn.x/1?replacement_timeout=0.5&command_timeout=10&portal=192.0.2.2:3261"
      "&portal=%5Bfec0::2%5D&portal=h2");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->replacement_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(u->command_timeout, std::chrono::seconds(10));
  EXPECT_EQ(u->alternate_portals,
            (std::vector<Portal>{{"192.0.2.2", 3261}, {"fec0::2", 3260}, {"h2", 3260}}));
  EXPECT_EQ(u->Redacted(),
            "iscsi://h:3260/iqn.x/1?replacement_timeout=0.5&command_timeout=10"
            "&portal=192.0.2.2:3261&portal=[fec0::2]:3260&portal=h2:3260");
  u = ParseIscsiUrl("iscsi://h/iqn.x?replacement_timeout=0&command_timeout=0");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->replacement_timeout, std::chrono::milliseconds(0)) << "0: fail I/O at once";
  EXPECT_EQ(u->command_timeout, std::chrono::milliseconds(0));
  u = ParseIscsiUrl("iscsi://h/iqn.x");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->replacement_timeout) << "unset: the options or the default decide";
  EXPECT_FALSE(u->command_timeout);
  EXPECT_TRUE(u->alternate_portals.empty());
}

TEST(Url, MultipathSettings) {
  Result<IscsiUrl> u =
      ParseIscsiUrl("iscsi://h/iqn.x/1?multipath=off&nr_sessions=4&path_selector=round-robin");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->multipath, false);
  EXPECT_EQ(u->nr_sessions, 4u);
  EXPECT_EQ(u->path_selector, "round-robin");
  EXPECT_EQ(u->Redacted(),
            "iscsi://h:3260/iqn.x/1?multipath=off&nr_sessions=4&path_selector=round-robin");
  u = ParseIscsiUrl("iscsi://h/iqn.x/1");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->multipath) << "unset: multipath wherever a LUN has several paths";
  EXPECT_FALSE(u->nr_sessions);
  auto message = [](const std::string& url) { return ParseIscsiUrl(url).status().message(); };
  EXPECT_EQ(message("iscsi://h/iqn.x?multipath=yes"),
            "bad URL 'iscsi://h/iqn.x?multipath=yes': multipath 'yes': use multipath=on or "
            "multipath=off");
  EXPECT_EQ(message("iscsi://h/iqn.x?nr_sessions=0"),
            "bad URL 'iscsi://h/iqn.x?nr_sessions=0': nr_sessions '0': a number of paths per "
            "portal from 1 to 16");
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h/iqn.x?nr_sessions=17").ok());
  EXPECT_FALSE(ParseIscsiUrl("iscsi://h/iqn.x?nr_sessions=x").ok());
  EXPECT_EQ(message("iscsi://h/iqn.x?path_selector=random"),
            "bad URL 'iscsi://h/iqn.x?path_selector=random': path_selector 'random': use "
            "queue-length or round-robin");
}

TEST(Url, BadRecoverySettingsNameTheArgumentAndTheValue) {
  auto message = [](const std::string& url) { return ParseIscsiUrl(url).status().message(); };
  EXPECT_EQ(message("iscsi://h/iqn.x?replacement_timeout=-1"),
            "bad URL 'iscsi://h/iqn.x?replacement_timeout=-1': replacement_timeout '-1': not a "
            "number of seconds (digits with an optional fraction, e.g. 30 or 0.5)");
  EXPECT_EQ(message("iscsi://h/iqn.x?command_timeout=1e300"),
            "bad URL 'iscsi://h/iqn.x?command_timeout=1e300': command_timeout '1e300': not a "
            "number of seconds (digits with an optional fraction, e.g. 30 or 0.5)");
  EXPECT_EQ(message("iscsi://h/iqn.x?command_timeout=99999999999"),
            "bad URL 'iscsi://h/iqn.x?command_timeout=99999999999': command_timeout "
            "'99999999999': must be between 0 and 31536000 seconds");
  EXPECT_NE(message("iscsi://h/iqn.x?replacement_timeout=").find("replacement_timeout ''"),
            std::string::npos);
  EXPECT_NE(message("iscsi://h/iqn.x?replacement_timeout").find("needs a value"),
            std::string::npos);
  EXPECT_NE(message("iscsi://h/iqn.x?replacement_timeout=1&replacement_timeout=2")
                .find("argument 'replacement_timeout' given twice"),
            std::string::npos);
  EXPECT_NE(message("iscsi://h/iqn.x?command_timeout=1&command_timeout=1")
                .find("argument 'command_timeout' given twice"),
            std::string::npos);
  EXPECT_NE(message("iscsi://h/iqn.x?portal=h2:0").find("portal 'h2:0'"), std::string::npos);
  EXPECT_NE(message("iscsi://h/iqn.x?portal=").find("portal ''"), std::string::npos);
  EXPECT_NE(message("iscsi://h/iqn.x?portal=[fec0::1").find("portal '[fec0::1'"),
            std::string::npos);
}

// Schemes are case-insensitive (RFC 3986 3.1); a scheme with one slash, or none at all, gets a
// message saying what a URL looks like (it said "bad IPv6 address" or "bad port" before).
TEST(Url, SchemesAreCaseInsensitiveAndMistakesSayWhatAUrlLooksLike) {
  Result<IscsiUrl> u = ParseIscsiUrl("ISCSI://192.0.2.1/iqn.2026-11.example:disk");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->transport, TransportKind::kTcp);
  EXPECT_EQ(u->target, "iqn.2026-11.example:disk");
  u = ParseIscsiUrl("IsEr://192.0.2.1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->transport, TransportKind::kIser);
  for (const char* bad : {"iscsi:/192.0.2.1/iqn.x", "iser:192.0.2.1", "192.0.2.1:3260/iqn.x"}) {
    Result<IscsiUrl> b = ParseIscsiUrl(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("a URL looks like iscsi://HOST[:PORT]/TARGET[/LUN]"),
              std::string::npos)
        << b.status().message();
    EXPECT_EQ(b.status().message().find("IPv6"), std::string::npos) << b.status().message();
  }
}

}  // namespace
}  // namespace iser
