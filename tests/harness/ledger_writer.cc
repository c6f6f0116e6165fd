// ledger-writer: verified writers for the multipath soak (tests/soak/multipath_soak.sh,
// bench/multipath-soak). Threads write 4 KiB blocks, each stamped with its block number and a
// generation, to a LUN (a FUSE mount's LUN file, or an NBD export) while paths are cut and
// stalled under them; a ledger keeps the generation each block was last written with, and at the
// end every block is read back and held against it.
//
//   ledger-writer [--threads N] [--seconds S] [--size BYTES] [--seed N] [--check-every K]
//                 [--label TEXT] [--json] TARGET
//
// TARGET is a file, opened O_RDWR|O_DIRECT (pwrite/pread with aligned buffers), or an NBD URI
// (nbd://..., nbd+unix://...: libnbd, one connection per thread). Blocks are 4 KiB, in the first
// --size bytes (default: the whole target); thread t owns the blocks b with b % N == t, so no two
// threads ever write one block. For S seconds each thread writes blocks of its own, one write at
// a time (a write returns before the next starts, so the last write of a block that completed is
// what the block must hold); a quarter of its writes go again to the block it wrote last, the
// case where an old copy of a write landing late would overwrite a newer one. Every K-th
// operation (--check-every, default 8; 0: never) reads one of its written blocks instead and
// checks it. Then each block of --size is read (256 KiB at a time, the threads sharing the work)
// and checked, and the writes are flushed first.
//
// A block's stamp: a magic, the run (a random number of this process: a block left by an earlier
// run is never taken for this one's), the seed, the block number, the generation (the writing
// thread's counter) and the thread, then a fill derived from them all. A block read back is:
//   good     it holds the generation last written (or that of a write that failed after it:
//            a failed write may or may not have landed);
//   lost     it holds no stamp of this run although a write of it completed;
//   stale    it holds an older generation of itself: an old copy landed over a newer write (a
//            write run twice, the second time late, shows here);
//   corrupt  a stamp of this run with the wrong block or thread, a generation never written, or
//            a fill that does not match (a torn or misplaced write);
//   bogus    a stamp of this run in a block no write completed nor failed on.
// The counts of bad blocks are of the reads that found them, on the way and at the end. An I/O
// that fails is counted and printed with its error (the first 20), never ignored; a read that
// fails leaves its blocks unchecked.
//
// Two pauses are measured during the writes: the longest single I/O (what a flap cost the
// unluckiest writer), and the longest time in which no thread's I/O completed at all (what a flap
// cost the device: with a usable path left, only the I/O held on the lost one waits).
//
// Prints one summary line (and with --json a JSON line with the same figures, last) on stdout.
// Exit status: 0 when every I/O succeeded and every block checked is good, 1 otherwise (or when
// the target cannot be opened), 2 for bad arguments.
#include <fcntl.h>
#include <getopt.h>
#include <libnbd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kCheckChunk = 64;  // blocks per read of the final check (256 KiB)
constexpr char kMagic[8] = {'L', 'E', 'D', 'G', 'E', 'R', 'W', '1'};
constexpr int kPrintedErrors = 20;
constexpr int kPrintedBadBlocks = 20;

using Clock = std::chrono::steady_clock;

const char kUsage[] =
    "usage: ledger-writer [--threads N] [--seconds S] [--size BYTES] [--seed N]\n"
    "                     [--check-every K] [--label TEXT] [--json] TARGET\n"
    "  TARGET            a file (opened O_DIRECT: a FUSE mount's LUN file) or an NBD URI\n"
    "                    (nbd://..., nbd+unix://...)\n"
    "  --threads N       writer threads, each with blocks of its own (default 8)\n"
    "  --seconds S       how long they write (default 10)\n"
    "  --size BYTES      the blocks used: the first BYTES of TARGET, a multiple of 4096;\n"
    "                    k, m, g suffixes (default: all of it)\n"
    "  --seed N          the writes' choices and fill (default: random, printed)\n"
    "  --check-every K   every K-th operation reads and checks a written block (default 8;\n"
    "                    0: only the final check)\n"
    "  --label TEXT      names the run in the output\n"
    "  --json            a JSON line with the figures after the summary\n"
    "Exit status: 0 no I/O error and no bad block, 1 otherwise, 2 bad arguments.\n";

// The block's header; the fill follows it to the end of the block.
struct Stamp {
  char magic[8];
  uint64_t run;
  uint64_t seed;
  uint64_t block;
  uint64_t generation;
  uint32_t thread;
  uint32_t reserved;
};
static_assert(sizeof(Stamp) == 48);

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

void MakeBlock(uint64_t run, uint64_t seed, uint64_t block, uint64_t generation, uint32_t thread,
               uint8_t* out) {
  Stamp s{};
  std::memcpy(s.magic, kMagic, sizeof(kMagic));
  s.run = run;
  s.seed = seed;
  s.block = block;
  s.generation = generation;
  s.thread = thread;
  std::memcpy(out, &s, sizeof(s));
  uint64_t state = run ^ (seed * 31) ^ (block * 0x100000001b3) ^ (generation << 17) ^ thread;
  for (uint64_t i = sizeof(s); i < kBlock; i += 8) {
    const uint64_t v = SplitMix(state);
    std::memcpy(out + i, &v, 8);
  }
}

// What the ledger holds of a block: the generation of the last write that completed (0: none),
// and the generations of the writes of it that failed since (0: none; each may or may not have
// landed, and the thread's counter puts them between the first and the last).
struct Entry {
  uint64_t generation = 0;
  uint64_t failed_first = 0;
  uint64_t failed_last = 0;
};

enum class Verdict { kGood, kLost, kStale, kCorrupt, kBogus };
const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kGood:
      return "good";
    case Verdict::kLost:
      return "lost";
    case Verdict::kStale:
      return "stale";
    case Verdict::kCorrupt:
      return "corrupt";
    case Verdict::kBogus:
      return "bogus";
  }
  return "?";
}

// One handle on the target for one thread: returns "" or the error's text.
class Target {
 public:
  virtual ~Target() = default;
  virtual std::string Write(const uint8_t* data, uint64_t bytes, uint64_t offset) = 0;
  virtual std::string Read(uint8_t* data, uint64_t bytes, uint64_t offset) = 0;
  virtual std::string Flush() = 0;
};

std::string Short(const char* what, ssize_t done, uint64_t bytes) {
  return std::string("short ") + what + ": " + std::to_string(done) + " of " +
         std::to_string(bytes) + " bytes";
}

class FileTarget final : public Target {
 public:
  explicit FileTarget(int fd) : fd_(fd) {}
  std::string Write(const uint8_t* data, uint64_t bytes, uint64_t offset) override {
    const ssize_t n = pwrite(fd_, data, bytes, static_cast<off_t>(offset));
    if (n < 0) return std::strerror(errno);
    return static_cast<uint64_t>(n) == bytes ? "" : Short("write", n, bytes);
  }
  std::string Read(uint8_t* data, uint64_t bytes, uint64_t offset) override {
    const ssize_t n = pread(fd_, data, bytes, static_cast<off_t>(offset));
    if (n < 0) return std::strerror(errno);
    return static_cast<uint64_t>(n) == bytes ? "" : Short("read", n, bytes);
  }
  std::string Flush() override { return fdatasync(fd_) == 0 ? "" : std::strerror(errno); }

 private:
  int fd_;  // shared by the threads (pread/pwrite need no lock), closed by main
};

class NbdTarget final : public Target {
 public:
  explicit NbdTarget(nbd_handle* h) : h_(h) {}
  ~NbdTarget() override {
    nbd_shutdown(h_, 0);
    nbd_close(h_);
  }
  std::string Write(const uint8_t* data, uint64_t bytes, uint64_t offset) override {
    return nbd_pwrite(h_, data, bytes, offset, 0) == -1 ? Error() : "";
  }
  std::string Read(uint8_t* data, uint64_t bytes, uint64_t offset) override {
    return nbd_pread(h_, data, bytes, offset, 0) == -1 ? Error() : "";
  }
  std::string Flush() override { return nbd_flush(h_, 0) == -1 ? Error() : ""; }

 private:
  static std::string Error() {
    std::string text = nbd_get_error() ? nbd_get_error() : "unknown error";
    const int e = nbd_get_errno();
    if (e && text.find(std::strerror(e)) == std::string::npos) {
      text += std::string(" (") + std::strerror(e) + ")";
    }
    return text;
  }
  nbd_handle* h_;
};

bool IsNbdUri(const std::string& target) {
  return target.rfind("nbd", 0) == 0 && target.find("://") != std::string::npos;
}

struct Options {
  int threads = 8;
  double seconds = 10;
  uint64_t size = 0;  // 0: the target's
  uint64_t seed = 0;
  bool seed_given = false;
  uint64_t check_every = 8;
  std::string label;
  bool json = false;
  std::string target;
};

// Counts of one thread, summed at the end.
struct Counts {
  uint64_t writes = 0, reads = 0, errors = 0;
  uint64_t lost = 0, stale = 0, corrupt = 0, bogus = 0;
  uint64_t checked = 0, unchecked = 0, checked_on_the_way = 0;
  Clock::duration longest{};
  double longest_at = 0;  // seconds since the start
  const char* longest_op = "";
  Clock::duration longest_pause{};  // no thread's I/O completed, ending at one of this thread's
  double longest_pause_at = 0;      // when it began, seconds since the start

  uint64_t bad() const { return lost + stale + corrupt + bogus; }
  void Add(const Counts& o) {
    writes += o.writes, reads += o.reads, errors += o.errors;
    lost += o.lost, stale += o.stale, corrupt += o.corrupt, bogus += o.bogus;
    checked += o.checked, unchecked += o.unchecked, checked_on_the_way += o.checked_on_the_way;
    if (o.longest > longest) {
      longest = o.longest;
      longest_at = o.longest_at;
      longest_op = o.longest_op;
    }
    if (o.longest_pause > longest_pause) {
      longest_pause = o.longest_pause;
      longest_pause_at = o.longest_pause_at;
    }
  }
};

class Run {
 public:
  Run(const Options& o, uint64_t blocks, uint64_t run_id)
      : o_(o), blocks_(blocks), run_(run_id), ledger_(blocks), start_(Clock::now()) {}

  // The write phase of thread t, on its own handle.
  void Write(int t, Target& target, Counts& c) {
    const uint64_t n = static_cast<uint64_t>(o_.threads);
    const uint64_t mine = (blocks_ - t + n - 1) / n;  // blocks t, t + n, ...
    uint64_t mix = o_.seed ^ (0xa0761d6478bd642f * (t + 1));
    std::mt19937_64 rng(SplitMix(mix));
    auto buf = AlignedBuffer(kBlock);
    std::vector<uint64_t> written;  // blocks with a completed write, for the checks on the way
    uint64_t generation = 0, last = UINT64_MAX;
    const auto end = start_ + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(o_.seconds));
    for (uint64_t op = 1; Clock::now() < end; ++op) {
      if (o_.check_every && op % o_.check_every == 0 && !written.empty()) {
        const uint64_t b = written[rng() % written.size()];
        const std::string e =
            Timed(c, "read", [&] { return target.Read(buf.get(), kBlock, b * kBlock); });
        Progressed(c, end);
        ++c.reads;
        if (!e.empty()) {
          Failed(c, "read", b, e);
        } else {
          Count(c, b, Check(b, buf.get()), buf.get(), "on the way");
          ++c.checked_on_the_way;
        }
        continue;
      }
      const uint64_t b = last != UINT64_MAX && rng() % 4 == 0 ? last : t + n * (rng() % mine);
      MakeBlock(run_, o_.seed, b, ++generation, static_cast<uint32_t>(t), buf.get());
      const std::string e =
          Timed(c, "write", [&] { return target.Write(buf.get(), kBlock, b * kBlock); });
      Progressed(c, end);
      ++c.writes;
      last = b;
      Entry& entry = ledger_[b];
      if (!e.empty()) {
        if (entry.failed_first == 0) entry.failed_first = generation;
        entry.failed_last = generation;
        Failed(c, "write", b, e);
        continue;
      }
      if (entry.generation == 0) written.push_back(b);
      entry = Entry{generation, 0, 0};
    }
    const std::string e = Timed(c, "flush", [&] { return target.Flush(); });
    if (!e.empty()) Failed(c, "flush", UINT64_MAX, e);
  }

  // The final check of thread t: the chunks c with c % threads == t, every block of them.
  void CheckAll(int t, Target& target, Counts& c) {
    auto buf = AlignedBuffer(kCheckChunk * kBlock);
    for (uint64_t first = t * kCheckChunk; first < blocks_; first += o_.threads * kCheckChunk) {
      const uint64_t count = std::min(kCheckChunk, blocks_ - first);
      const std::string e =
          Timed(c, "read", [&] { return target.Read(buf.get(), count * kBlock, first * kBlock); });
      ++c.reads;
      if (!e.empty()) {
        Failed(c, "read", first, e);
        c.unchecked += count;
        continue;
      }
      for (uint64_t i = 0; i < count; ++i) {
        const uint8_t* data = buf.get() + i * kBlock;
        Count(c, first + i, Check(first + i, data), data, "at the end");
        ++c.checked;
      }
    }
  }

  uint64_t written_blocks() const {
    return std::count_if(ledger_.begin(), ledger_.end(),
                         [](const Entry& e) { return e.generation != 0; });
  }
  double elapsed() const { return Seconds(Clock::now() - start_); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<uint8_t, Free>;
  static Buffer AlignedBuffer(uint64_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, kBlock, bytes) != 0) std::abort();
    return Buffer(static_cast<uint8_t*>(p));
  }
  static double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  template <typename F>
  std::string Timed(Counts& c, const char* op, F&& f) {
    const auto t0 = Clock::now();
    std::string e = f();
    const auto took = Clock::now() - t0;
    if (took > c.longest) {
      c.longest = took;
      c.longest_at = Seconds(t0 - start_);
      c.longest_op = op;
    }
    return e;
  }

  // An I/O of this thread completed (or failed) before `end`: the time since the last completion
  // of any thread is a pause of the device. After the end the threads stop one by one, so a late
  // completion then would measure their stopping, not a pause.
  void Progressed(Counts& c, Clock::time_point end) {
    const Clock::time_point now = Clock::now();
    if (now > end) return;
    const int64_t at = (now - start_).count();
    int64_t before = last_completion_.load(std::memory_order_relaxed);
    while (before < at && !last_completion_.compare_exchange_weak(before, at)) {
    }
    if (before >= at) return;  // another thread completed later meanwhile
    const Clock::duration pause(at - before);
    if (pause > c.longest_pause) {
      c.longest_pause = pause;
      c.longest_pause_at = Seconds(Clock::duration(before));
    }
  }

  // Counts and reports a failed I/O, then pauses a moment: a target that fails everything must
  // not be flooded (nor the output), and the count still says how much failed.
  void Failed(Counts& c, const char* op, uint64_t block, const std::string& error) {
    ++c.errors;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int n = printed_errors_.fetch_add(1);
    if (n < kPrintedErrors) {
      const std::string where = block == UINT64_MAX
                                    ? ""
                                    : " block " + std::to_string(block) + " (offset " +
                                          std::to_string(block * kBlock) + ")";
      std::fprintf(stderr, "ledger-writer: %.3f s: %s%s failed: %s\n", elapsed(), op, where.c_str(),
                   error.c_str());
    } else if (n == kPrintedErrors) {
      std::fprintf(stderr, "ledger-writer: more errors, not printed (counted)\n");
    }
  }

  Verdict Check(uint64_t b, const uint8_t* data) const {
    const Entry& entry = ledger_[b];
    Stamp s;
    std::memcpy(&s, data, sizeof(s));
    const bool ours = std::memcmp(s.magic, kMagic, sizeof(kMagic)) == 0 && s.run == run_;
    if (!ours) return entry.generation == 0 ? Verdict::kGood : Verdict::kLost;
    if (entry.generation == 0 && entry.failed_first == 0) return Verdict::kBogus;
    const uint32_t owner = static_cast<uint32_t>(b % o_.threads);
    if (s.block != b || s.thread != owner || s.seed != o_.seed) return Verdict::kCorrupt;
    uint8_t want[kBlock];
    MakeBlock(run_, o_.seed, b, s.generation, owner, want);
    if (std::memcmp(want, data, kBlock) != 0) return Verdict::kCorrupt;
    if (s.generation == entry.generation ||
        (entry.failed_first <= s.generation && s.generation <= entry.failed_last)) {
      return Verdict::kGood;
    }
    return s.generation < std::max(entry.generation, entry.failed_last) ? Verdict::kStale
                                                                        : Verdict::kCorrupt;
  }

  void Count(Counts& c, uint64_t b, Verdict v, const uint8_t* data, const char* when) {
    switch (v) {
      case Verdict::kGood:
        return;
      case Verdict::kLost:
        ++c.lost;
        break;
      case Verdict::kStale:
        ++c.stale;
        break;
      case Verdict::kCorrupt:
        ++c.corrupt;
        break;
      case Verdict::kBogus:
        ++c.bogus;
        break;
    }
    if (printed_bad_.fetch_add(1) >= kPrintedBadBlocks) return;
    Stamp s;
    std::memcpy(&s, data, sizeof(s));
    std::string holds = "no stamp";
    if (std::memcmp(s.magic, kMagic, sizeof(kMagic)) == 0) {
      holds = s.run != run_
                  ? "another run's stamp"
                  : "block " + std::to_string(s.block) + " generation " +
                        std::to_string(s.generation) + " thread " + std::to_string(s.thread);
    }
    const Entry& entry = ledger_[b];
    if (v == Verdict::kCorrupt) {
      uint8_t want[kBlock];
      MakeBlock(run_, o_.seed, s.block, s.generation, s.thread, want);
      holds += s.block != b                      ? ", the wrong block"
               : s.thread != b % o_.threads      ? ", the wrong thread"
               : std::memcmp(want, data, kBlock) ? ", a fill that does not match its stamp"
                                                 : ", a generation never written";
    }
    std::string ledger = "generation " + std::to_string(entry.generation);
    if (entry.failed_first) {
      ledger += " (then failed writes, generations " + std::to_string(entry.failed_first) + "-" +
                std::to_string(entry.failed_last) + ")";
    }
    std::fprintf(stderr,
                 "ledger-writer: %.3f s: block %" PRIu64 " %s (read %s): holds %s; ledger: %s\n",
                 elapsed(), b, VerdictName(v), when, holds.c_str(), ledger.c_str());
  }

  const Options& o_;
  const uint64_t blocks_;
  const uint64_t run_;
  // Entry b is written by its owner thread only, in the write phase; the final check reads it
  // after those threads have been joined.
  std::vector<Entry> ledger_;
  const Clock::time_point start_;
  std::atomic<int64_t> last_completion_{0};  // Clock ticks since start_
  std::atomic<int> printed_errors_{0};
  std::atomic<int> printed_bad_{0};
};

bool ParseCount(const char* text, uint64_t* out) {
  if (text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseSize(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  int shift = 0;
  const std::string unit = end;
  if (unit == "k" || unit == "K") {
    shift = 10;
  } else if (unit == "m" || unit == "M") {
    shift = 20;
  } else if (unit == "g" || unit == "G") {
    shift = 30;
  } else if (!unit.empty()) {
    return false;
  }
  if (v > (UINT64_MAX >> shift)) return false;
  *out = static_cast<uint64_t>(v) << shift;
  return true;
}

int Usage(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "ledger-writer: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const option longs[] = {{"threads", required_argument, nullptr, 't'},
                          {"seconds", required_argument, nullptr, 's'},
                          {"size", required_argument, nullptr, 'z'},
                          {"seed", required_argument, nullptr, 'r'},
                          {"check-every", required_argument, nullptr, 'k'},
                          {"label", required_argument, nullptr, 'l'},
                          {"json", no_argument, nullptr, 'j'},
                          {"help", no_argument, nullptr, 'h'},
                          {nullptr, 0, nullptr, 0}};
  opterr = 0;
  for (int opt; (opt = getopt_long(argc, argv, "", longs, nullptr)) != -1;) {
    uint64_t v = 0;
    const std::string arg = optarg ? optarg : "";
    switch (opt) {
      case 't':
        if (!ParseCount(optarg, &v) || v < 1 || v > 256) {
          return Usage("--threads '" + arg + "': give 1 to 256");
        }
        o.threads = static_cast<int>(v);
        break;
      case 's': {
        char* end = nullptr;
        o.seconds = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(o.seconds > 0) || o.seconds > 86400) {
          return Usage("--seconds '" + arg + "': give a number of seconds, more than 0");
        }
        break;
      }
      case 'z':
        if (!ParseSize(arg, &o.size) || o.size == 0 || o.size % kBlock != 0) {
          return Usage("--size '" + arg + "': give a multiple of 4096 bytes (k, m, g suffixes)");
        }
        break;
      case 'r':
        if (!ParseCount(optarg, &o.seed)) return Usage("--seed '" + arg + "': give a number");
        o.seed_given = true;
        break;
      case 'k':
        if (!ParseCount(optarg, &o.check_every)) {
          return Usage("--check-every '" + arg + "': give a number (0: never)");
        }
        break;
      case 'l':
        o.label = arg;
        break;
      case 'j':
        o.json = true;
        break;
      case 'h':
        std::fputs(kUsage, stdout);
        return 0;
      default:
        return Usage(std::string("unknown or incomplete option ") + argv[optind - 1]);
    }
  }
  if (optind + 1 != argc) return Usage(optind == argc ? "no TARGET" : "one TARGET only");
  o.target = argv[optind];
  if (o.label.empty()) o.label = o.target;
  if (!o.seed_given) o.seed = std::random_device{}() % 1000000;
  // The run tells this process's stamps from those an earlier run left on the LUN.
  const uint64_t run_id = (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                          std::random_device{}() ^
                          static_cast<uint64_t>(Clock::now().time_since_epoch().count());

  // One handle per thread: the same file descriptor, or a connection each.
  std::vector<std::unique_ptr<Target>> targets;
  uint64_t target_size = 0;
  int fd = -1;
  if (IsNbdUri(o.target)) {
    for (int t = 0; t < o.threads; ++t) {
      nbd_handle* h = nbd_create();
      if (h == nullptr || nbd_connect_uri(h, o.target.c_str()) == -1) {
        std::fprintf(stderr, "ledger-writer: connecting to %s: %s\n", o.target.c_str(),
                     nbd_get_error());
        if (h) nbd_close(h);
        return 1;
      }
      targets.push_back(std::make_unique<NbdTarget>(h));
      const int64_t size = nbd_get_size(h);
      if (size < 0) {
        std::fprintf(stderr, "ledger-writer: size of %s: %s\n", o.target.c_str(), nbd_get_error());
        return 1;
      }
      target_size = static_cast<uint64_t>(size);
    }
  } else {
    fd = open(o.target.c_str(), O_RDWR | O_DIRECT);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      std::fprintf(stderr, "ledger-writer: opening %s (O_RDWR|O_DIRECT): %s\n", o.target.c_str(),
                   std::strerror(errno));
      return 1;
    }
    target_size = static_cast<uint64_t>(st.st_size);
    for (int t = 0; t < o.threads; ++t) targets.push_back(std::make_unique<FileTarget>(fd));
  }
  if (o.size == 0) o.size = target_size / kBlock * kBlock;
  // Arguments that do not fit this target: bad arguments too, without the usage text.
  if (o.size > target_size) {
    std::fprintf(stderr,
                 "ledger-writer: --size %" PRIu64 " is past the end of %s (%" PRIu64 " bytes)\n",
                 o.size, o.target.c_str(), target_size);
    return 2;
  }
  const uint64_t blocks = o.size / kBlock;
  if (blocks < static_cast<uint64_t>(o.threads)) {
    std::fprintf(stderr, "ledger-writer: %s has fewer 4 KiB blocks (%" PRIu64 ") than threads\n",
                 o.target.c_str(), blocks);
    return 2;
  }
  std::fprintf(stderr,
               "ledger-writer: %s: %d threads, %g s, %" PRIu64 " blocks of 4 KiB, seed %" PRIu64
               "\n",
               o.label.c_str(), o.threads, o.seconds, blocks, o.seed);

  Run run(o, blocks, run_id);
  std::vector<Counts> counts(o.threads);
  auto phase = [&](void (Run::*step)(int, Target&, Counts&)) {
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] { (run.*step)(t, *targets[t], counts[t]); });
    }
    for (std::thread& th : threads) th.join();
  };
  phase(&Run::Write);
  const double write_seconds = run.elapsed();
  phase(&Run::CheckAll);
  targets.clear();
  if (fd >= 0) close(fd);

  Counts sum;
  for (const Counts& c : counts) sum.Add(c);
  const double longest_ms = std::chrono::duration<double, std::milli>(sum.longest).count();
  const double pause_ms = std::chrono::duration<double, std::milli>(sum.longest_pause).count();
  const std::string unchecked =
      sum.unchecked ? ", " + std::to_string(sum.unchecked) + " unchecked" : "";
  std::printf("ledger-writer: %s: %d threads, %.1f s: %" PRIu64 " writes, %" PRIu64
              " reads, %" PRIu64 " errors; %" PRIu64 " blocks written; %" PRIu64
              " checked on the way and %" PRIu64 " at the end: %" PRIu64 " lost, %" PRIu64
              " stale, %" PRIu64 " corrupt, %" PRIu64
              " bogus%s; longest I/O %.1f ms (%s at %.1f s); longest pause %.1f ms (at %.1f s); "
              "seed %" PRIu64 "\n",
              o.label.c_str(), o.threads, write_seconds, sum.writes, sum.reads, sum.errors,
              run.written_blocks(), sum.checked_on_the_way, sum.checked, sum.lost, sum.stale,
              sum.corrupt, sum.bogus, unchecked.c_str(), longest_ms, sum.longest_op, sum.longest_at,
              pause_ms, sum.longest_pause_at, o.seed);
  if (o.json) {
    const nlohmann::ordered_json summary = {{"label", o.label},
                                            {"target", o.target},
                                            {"threads", o.threads},
                                            {"seconds", write_seconds},
                                            {"size", o.size},
                                            {"seed", o.seed},
                                            {"writes", sum.writes},
                                            {"reads", sum.reads},
                                            {"errors", sum.errors},
                                            {"blocks_written", run.written_blocks()},
                                            {"checked_on_the_way", sum.checked_on_the_way},
                                            {"checked", sum.checked},
                                            {"unchecked", sum.unchecked},
                                            {"lost", sum.lost},
                                            {"stale", sum.stale},
                                            {"corrupt", sum.corrupt},
                                            {"bogus", sum.bogus},
                                            {"bad", sum.bad()},
                                            {"longest_io_ms", longest_ms},
                                            {"longest_io_op", sum.longest_op},
                                            {"longest_io_at_s", sum.longest_at},
                                            {"longest_pause_ms", pause_ms},
                                            {"longest_pause_at_s", sum.longest_pause_at}};
    // A label or path that is not UTF-8 must not cost the figures.
    std::printf("%s\n",
                summary.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return sum.errors == 0 && sum.bad() == 0 && sum.unchecked == 0 ? 0 : 1;
}
