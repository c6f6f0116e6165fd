// iser-connect bench: a fio-like load generator on one LUN through BlockDevice's asynchronous
// API (queue depth QD, requests resubmitted from their completions on the session's I/O
// thread), with a live progress line, a summary and optional data verification.
//
// Verification writes, into every 512-byte unit, its own byte offset, a per-run seed and a
// CRC32C over the unit; the rest of the unit is derived from offset and seed. The content of a
// unit therefore depends only on where it is, so concurrent overlapping writes cannot make the
// expected data ambiguous, while a write that lands at the wrong offset, is lost (an older run's
// seed) or is corrupted is caught on read.
#include <sys/resource.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <semaphore>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "initiator/block/block_device.h"
#include "initiator/base/crc32c.h"

namespace iser::cli {

namespace {

using BenchClock = std::chrono::steady_clock;
constexpr uint32_t kVerifyUnit = 512;

enum class Workload { kRead, kWrite, kRandRead, kRandWrite, kRandRw };

struct BenchConfig {
  Workload workload = Workload::kRandRead;
  std::string rw = "randread";
  uint32_t bs = 4096;
  uint32_t qd = 32;
  double seconds = 10;
  bool verify = false;
  bool json = false;
  bool progress = false;
  uint64_t range = 0;  // bytes of the LUN used, from offset 0
  uint32_t rwmix_read = 50;
};

// CPU seconds (user + system) of this process's threads, summed by thread name: a transport's
// helper threads (softrdma's, which does a NIC's work) then show apart from the initiator's own.
std::map<std::string, double> CpuByThreadName() {
  std::map<std::string, double> cpu;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return cpu;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    // After the name: state, then fields 4..; utime and stime are fields 14 and 15.
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    cpu[stat.substr(open + 1, close - open - 1)] += (utime + stime) / tick;
  }
  closedir(dir);
  return cpu;
}

uint64_t NextRandom(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

void FillUnit(uint8_t* p, uint64_t offset, uint64_t seed) {
  std::memcpy(p, &offset, 8);
  std::memcpy(p + 8, &seed, 8);
  uint64_t s = (offset * 0x9e3779b97f4a7c15ULL) ^ seed ^ 0x5bd1e995;
  if (s == 0) s = 1;
  for (uint32_t i = 20; i < kVerifyUnit; i += 4) {
    const uint32_t v = static_cast<uint32_t>(NextRandom(s));
    std::memcpy(p + i, &v, 4);
  }
  uint32_t crc = Crc32cExtend(kCrc32cSeed, p, 16);
  crc = Crc32cFinish(Crc32cExtend(crc, p + 20, kVerifyUnit - 20));
  std::memcpy(p + 16, &crc, 4);
}

// Returns the number of bad units in buf, which was read from offset.
uint64_t CheckUnits(const uint8_t* buf, uint64_t offset, uint32_t len, uint64_t seed,
                    std::string* first_error) {
  uint64_t bad = 0;
  for (uint32_t i = 0; i < len; i += kVerifyUnit) {
    const uint8_t* p = buf + i;
    uint64_t got_off, got_seed;
    uint32_t got_crc;
    std::memcpy(&got_off, p, 8);
    std::memcpy(&got_seed, p + 8, 8);
    std::memcpy(&got_crc, p + 16, 4);
    uint32_t crc = Crc32cExtend(kCrc32cSeed, p, 16);
    crc = Crc32cFinish(Crc32cExtend(crc, p + 20, kVerifyUnit - 20));
    const char* what = nullptr;
    if (crc != got_crc) {
      what = "checksum mismatch (corrupted data)";
    } else if (got_off != offset + i) {
      what = "data written for another offset (misplaced write)";
    } else if (got_seed != seed) {
      what = "data from an earlier run (lost write)";
    }
    if (what) {
      if (bad == 0 && first_error->empty()) {
        *first_error = "at byte offset " + std::to_string(offset + i) + ": " + what;
      }
      ++bad;
    }
  }
  return bad;
}

class Bench {
 public:
  Bench(BlockDevice& dev, const BenchConfig& cfg) : dev_(dev), cfg_(cfg) {}

  Status Run();
  void Print(const std::string& target) const;
  bool verify_failed() const { return bad_units_ > 0; }

 private:
  struct Slot {
    IoRequest req;
    uint8_t* buf = nullptr;
    uint64_t rng = 0;
    BenchClock::time_point start;
    Bench* bench = nullptr;
  };

  Status Prefill();
  Status VerifyWritten();
  void Issue(Slot& s);
  static void OnComplete(IoRequest* req, const Status& status);
  void Record(uint64_t ns);
  double Percentile(double p) const;

  BlockDevice& dev_;
  BenchConfig cfg_;
  uint64_t seed_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint8_t> buffers_;
  std::vector<uint8_t> written_;  // per bs-block of the range, verify mode
  std::atomic<uint64_t> seq_cursor_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> outstanding_{0};
  std::binary_semaphore done_{0};
  BenchClock::time_point end_;

  std::atomic<uint64_t> ios_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> read_ios_{0};
  std::atomic<uint64_t> write_ios_{0};
  std::atomic<uint64_t> lat_sum_ns_{0};  // read by the progress line
  uint64_t lat_max_ns_ = 0;
  std::vector<uint64_t> hist_ = std::vector<uint64_t>(64 * 16, 0);
  uint64_t checked_units_ = 0;
  std::atomic<uint64_t> bad_units_{0};
  std::mutex error_mu_;
  Status error_;
  std::string verify_error_;

  double elapsed_s_ = 0;
  double cpu_user_s_ = 0;
  double cpu_sys_s_ = 0;
  std::map<std::string, double> cpu_by_thread_;  // during the run, by thread name
};

void Bench::Record(uint64_t ns) {
  lat_sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  lat_max_ns_ = std::max(lat_max_ns_, ns);
  const int log = ns == 0 ? 0 : 63 - __builtin_clzll(ns);
  const int sub = log >= 4 ? static_cast<int>((ns >> (log - 4)) & 15) : 0;
  ++hist_[log * 16 + sub];
}

double Bench::Percentile(double p) const {
  uint64_t total = 0;
  for (uint64_t c : hist_) total += c;
  if (total == 0) return 0;
  const uint64_t want = static_cast<uint64_t>(std::ceil(p * static_cast<double>(total)));
  uint64_t seen = 0;
  for (size_t i = 0; i < hist_.size(); ++i) {
    seen += hist_[i];
    if (seen >= want) {
      const int log = static_cast<int>(i / 16);
      const uint64_t sub = i % 16;
      const double lo =
          log >= 4 ? std::ldexp(16.0 + static_cast<double>(sub), log - 4) : std::ldexp(1.0, log);
      return lo;
    }
  }
  return static_cast<double>(lat_max_ns_);
}

void Bench::Issue(Slot& s) {
  IoRequest& r = s.req;
  const uint64_t blocks = cfg_.range / cfg_.bs;
  bool write = false;
  bool random = true;
  switch (cfg_.workload) {
    case Workload::kRead:
      random = false;
      break;
    case Workload::kWrite:
      random = false;
      write = true;
      break;
    case Workload::kRandRead:
      break;
    case Workload::kRandWrite:
      write = true;
      break;
    case Workload::kRandRw:
      write = NextRandom(s.rng) % 100 >= cfg_.rwmix_read;
      break;
  }
  uint64_t block;
  if (random) {
    block = NextRandom(s.rng) % blocks;
  } else {
    block = seq_cursor_.fetch_add(1, std::memory_order_relaxed) % blocks;
  }
  r.op = write ? IoOp::kWrite : IoOp::kRead;
  r.offset = block * cfg_.bs;
  r.length = cfg_.bs;
  r.buffer = s.buf;
  if (write && cfg_.verify) {
    for (uint32_t i = 0; i < cfg_.bs; i += kVerifyUnit) FillUnit(s.buf + i, r.offset + i, seed_);
  }
  s.start = BenchClock::now();
  dev_.Submit(&r);
}

void Bench::OnComplete(IoRequest* req, const Status& status) {
  Slot& s = *static_cast<Slot*>(req->context);
  Bench& b = *s.bench;
  const auto now = BenchClock::now();
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(b.error_mu_);
    if (b.error_.ok()) b.error_ = status;
    b.stop_ = true;
  } else {
    b.Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.start).count()));
    b.ios_.fetch_add(1, std::memory_order_relaxed);
    b.bytes_.fetch_add(req->length, std::memory_order_relaxed);
    if (req->op == IoOp::kRead) {
      b.read_ios_.fetch_add(1, std::memory_order_relaxed);
      if (b.cfg_.verify) {
        b.checked_units_ += req->length / kVerifyUnit;
        const uint64_t bad =
            CheckUnits(req->buffer, req->offset, req->length, b.seed_, &b.verify_error_);
        if (bad > 0) {
          b.bad_units_ += bad;
          b.stop_ = true;
        }
      }
    } else {
      b.write_ios_.fetch_add(1, std::memory_order_relaxed);
      if (b.cfg_.verify) b.written_[req->offset / b.cfg_.bs] = 1;
    }
  }
  if (!b.stop_.load(std::memory_order_relaxed) && now < b.end_) {
    b.Issue(s);
    return;
  }
  if (b.outstanding_.fetch_sub(1) == 1) b.done_.release();
}

Status Bench::Prefill() {
  const uint32_t chunk = std::min<uint32_t>(dev_.info().max_transfer_bytes, 1u << 20);
  std::vector<uint8_t> buf(chunk);
  for (uint64_t off = 0; off < cfg_.range; off += chunk) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk, cfg_.range - off));
    for (uint32_t i = 0; i < n; i += kVerifyUnit) FillUnit(buf.data() + i, off + i, seed_);
    ISER_RETURN_IF_ERROR(dev_.Write(off, buf.data(), n));
  }
  std::fill(written_.begin(), written_.end(), 1);
  return Status::OK();
}

Status Bench::VerifyWritten() {
  std::vector<uint8_t> buf(cfg_.bs);
  for (uint64_t block = 0; block < written_.size(); ++block) {
    if (!written_[block]) continue;
    ISER_RETURN_IF_ERROR(dev_.Read(block * cfg_.bs, buf.data(), cfg_.bs));
    checked_units_ += cfg_.bs / kVerifyUnit;
    bad_units_ += CheckUnits(buf.data(), block * cfg_.bs, cfg_.bs, seed_, &verify_error_);
  }
  return Status::OK();
}

Status Bench::Run() {
  const LunInfo& info = dev_.info();
  if (cfg_.bs % info.logical_block_size != 0 || cfg_.bs > info.max_transfer_bytes) {
    return Status::InvalidArgument(
        "--bs must be a multiple of the LUN's " + std::to_string(info.logical_block_size) +
        "-byte blocks and at most " + HumanBytes(info.max_transfer_bytes));
  }
  if (cfg_.verify && cfg_.bs % kVerifyUnit != 0) {
    return Status::InvalidArgument("--verify needs --bs to be a multiple of 512");
  }
  if (cfg_.range == 0) cfg_.range = info.size_bytes;
  cfg_.range = std::min(cfg_.range, info.size_bytes) / cfg_.bs * cfg_.bs;
  if (cfg_.range == 0) return Status::InvalidArgument("the LUN is smaller than one --bs block");
  seed_ = static_cast<uint64_t>(BenchClock::now().time_since_epoch().count()) | 1;
  if (cfg_.verify) {
    written_.assign(cfg_.range / cfg_.bs, 0);
    const bool reads = cfg_.workload == Workload::kRead || cfg_.workload == Workload::kRandRead ||
                       cfg_.workload == Workload::kRandRw;
    if (reads) ISER_RETURN_IF_ERROR(Prefill());
  }
  const size_t align = 4096;
  const size_t per_slot = (cfg_.bs + align - 1) / align * align;
  buffers_.assign(per_slot * cfg_.qd + align, 0);
  uint8_t* base = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(buffers_.data()) + align - 1) / align * align);
  uint64_t fill = seed_;
  for (size_t i = 0; i + 8 <= per_slot * cfg_.qd; i += 8) {
    const uint64_t v = NextRandom(fill);
    std::memcpy(base + i, &v, 8);
  }
  slots_.resize(cfg_.qd);
  for (uint32_t i = 0; i < cfg_.qd; ++i) {
    Slot& s = slots_[i];
    s.buf = base + per_slot * i;
    s.rng = seed_ * (i + 1) + 0x9e3779b97f4a7c15ULL;
    s.bench = this;
    s.req.context = &s;
    s.req.on_complete = &Bench::OnComplete;
  }

  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const std::map<std::string, double> threads_before = CpuByThreadName();
  const auto start = BenchClock::now();
  end_ = start + std::chrono::duration_cast<BenchClock::duration>(
                     std::chrono::duration<double>(cfg_.seconds));
  outstanding_ = cfg_.qd;
  for (Slot& s : slots_) Issue(s);
  uint64_t last_ios = 0;
  uint64_t last_lat = 0;
  auto last = start;
  while (!done_.try_acquire_for(std::chrono::milliseconds(1000))) {
    if (!cfg_.progress) continue;
    const auto now = BenchClock::now();
    const uint64_t ios = ios_.load();
    const uint64_t lat = lat_sum_ns_.load(std::memory_order_relaxed);
    const double dt = std::chrono::duration<double>(now - last).count();
    const double iops = static_cast<double>(ios - last_ios) / dt;
    const double lat_ms = ios > last_ios ? static_cast<double>(lat - last_lat) /
                                               static_cast<double>(ios - last_ios) / 1e6
                                         : 0;
    std::fprintf(stderr, "\r%s: %8.0f IOPS %9.1f MiB/s  lat %7.3f ms  [%3.0f/%.0f s] ",
                 cfg_.rw.c_str(), iops, iops * cfg_.bs / (1 << 20), lat_ms,
                 std::chrono::duration<double>(now - start).count(), cfg_.seconds);
    last_ios = ios;
    last_lat = lat;
    last = now;
  }
  elapsed_s_ = std::chrono::duration<double>(BenchClock::now() - start).count();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  auto secs = [](timeval a, timeval b) {
    return static_cast<double>(b.tv_sec - a.tv_sec) +
           static_cast<double>(b.tv_usec - a.tv_usec) / 1e6;
  };
  cpu_user_s_ = secs(before.ru_utime, after.ru_utime);
  cpu_sys_s_ = secs(before.ru_stime, after.ru_stime);
  cpu_by_thread_ = CpuByThreadName();
  for (auto& [name, seconds] : cpu_by_thread_) {
    if (auto it = threads_before.find(name); it != threads_before.end()) seconds -= it->second;
  }
  if (cfg_.progress) std::fprintf(stderr, "\r%*s\r", 72, "");
  if (!error_.ok()) return error_;
  if (cfg_.verify && bad_units_ == 0) ISER_RETURN_IF_ERROR(VerifyWritten());
  return Status::OK();
}

void Bench::Print(const std::string& target) const {
  const double ios = static_cast<double>(ios_.load());
  const double iops = ios / elapsed_s_;
  const double mibs = static_cast<double>(bytes_.load()) / elapsed_s_ / (1 << 20);
  const double avg_ms = ios > 0 ? static_cast<double>(lat_sum_ns_.load()) / ios / 1e6 : 0;
  const double cpu = cpu_user_s_ + cpu_sys_s_;
  const double cpu_per_io_us = ios > 0 ? cpu / ios * 1e6 : 0;
  const double gib = static_cast<double>(bytes_.load()) / (1 << 30);
  const double cpu_per_gib_ms = gib > 0 ? cpu / gib * 1e3 : 0;
  std::string threads_json, threads_text;
  for (const auto& [name, seconds] : cpu_by_thread_) {
    char item[160];
    std::snprintf(item, sizeof item, "%s\"%s\":%.3f", threads_json.empty() ? "" : ",",
                  JsonEscape(name).c_str(), seconds);
    threads_json += item;
    std::snprintf(item, sizeof item, "%s%s %.2f s", threads_text.empty() ? "" : ", ", name.c_str(),
                  seconds);
    threads_text += item;
  }
  if (cfg_.json) {
    std::printf(
        "{\"target\":\"%s\",\"rw\":\"%s\",\"bs\":%u,\"qd\":%u,\"seconds\":%.3f,"
        "\"ios\":%.0f,\"read_ios\":%llu,\"write_ios\":%llu,\"iops\":%.1f,\"mib_per_s\":%.2f,"
        "\"lat_avg_ms\":%.4f,\"lat_p50_ms\":%.4f,\"lat_p99_ms\":%.4f,\"lat_max_ms\":%.4f,"
        "\"cpu_user_s\":%.3f,\"cpu_sys_s\":%.3f,\"cpu_us_per_io\":%.3f,"
        "\"cpu_ms_per_gib\":%.3f,\"cpu_s_by_thread\":{%s},\"verify\":%s,"
        "\"verified_units\":%llu,\"bad_units\":%llu}\n",
        JsonEscape(target).c_str(), cfg_.rw.c_str(), cfg_.bs, cfg_.qd, elapsed_s_, ios,
        static_cast<unsigned long long>(read_ios_.load()),
        static_cast<unsigned long long>(write_ios_.load()), iops, mibs, avg_ms,
        Percentile(0.5) / 1e6, Percentile(0.99) / 1e6, static_cast<double>(lat_max_ns_) / 1e6,
        cpu_user_s_, cpu_sys_s_, cpu_per_io_us, cpu_per_gib_ms, threads_json.c_str(),
        cfg_.verify ? "true" : "false", static_cast<unsigned long long>(checked_units_),
        static_cast<unsigned long long>(bad_units_.load()));
    return;
  }
  std::printf("%s %s QD%u for %.1f s on %s\n", cfg_.rw.c_str(), HumanBytes(cfg_.bs).c_str(),
              cfg_.qd, elapsed_s_, target.c_str());
  std::printf("  %.0f IOPS, %.1f MiB/s (%llu reads, %llu writes)\n", iops, mibs,
              static_cast<unsigned long long>(read_ios_.load()),
              static_cast<unsigned long long>(write_ios_.load()));
  std::printf("  latency avg %.3f ms, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", avg_ms,
              Percentile(0.5) / 1e6, Percentile(0.99) / 1e6,
              static_cast<double>(lat_max_ns_) / 1e6);
  std::printf("  initiator CPU %.2f s (user %.2f, sys %.2f): %.1f us per I/O, %.1f ms per GiB\n",
              cpu, cpu_user_s_, cpu_sys_s_, cpu_per_io_us, cpu_per_gib_ms);
  std::printf("  CPU by thread: %s\n", threads_text.c_str());
  if (cfg_.verify) {
    std::printf("  verify: %llu units of 512 bytes checked, %llu bad%s%s\n",
                static_cast<unsigned long long>(checked_units_),
                static_cast<unsigned long long>(bad_units_.load()),
                verify_error_.empty() ? "" : "; first: ", verify_error_.c_str());
  }
}

Result<Workload> ParseWorkload(const std::string& rw) {
  if (rw == "read") return Workload::kRead;
  if (rw == "write") return Workload::kWrite;
  if (rw == "randread") return Workload::kRandRead;
  if (rw == "randwrite") return Workload::kRandWrite;
  if (rw == "randrw") return Workload::kRandRw;
  return Status::InvalidArgument("--rw must be read, write, randread, randwrite or randrw");
}

// The URL's LUN, or the first direct-access LUN of the target.
Result<uint64_t> ChooseLun(Session& session, const IscsiUrl& url) {
  if (url.lun) return *url.lun;
  Result<std::vector<uint64_t>> luns = ReportLuns(session);
  if (!luns.ok()) return luns.status();
  for (uint64_t lun : *luns) {
    Result<LunInfo> info = ProbeLun(session, lun);
    if (info.ok() && info->is_disk) return lun;
  }
  return Status::NotFound("target " + url.target + " has no disk LUN");
}

}  // namespace

void AddBenchCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string url;
    std::string bs = "4k";
    std::string size;
    BenchConfig cfg;
    bool no_progress = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "measure IOPS, bandwidth and latency on a LUN");
  AddGlobalOptions(*cmd, g);
  cmd->add_option("url", args->url, "iscsi:// or iser:// URL of the target (and LUN)")->required();
  cmd->add_option("--rw", args->cfg.rw, "read, write, randread, randwrite or randrw");
  cmd->add_option("--bs", args->bs, "block size per I/O (e.g. 4k, 512k, 1m)");
  cmd->add_option("--qd", args->cfg.qd, "I/Os in flight")->check(CLI::Range(1, 1023));
  cmd->add_option("--time", args->cfg.seconds, "seconds to run")->check(CLI::PositiveNumber);
  cmd->add_option("--size", args->size, "use only the first SIZE bytes of the LUN");
  cmd->add_option("--rwmixread", args->cfg.rwmix_read, "percent of reads for randrw")
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--verify", args->cfg.verify,
                "write checksummed patterns and check every block read back");
  cmd->add_flag("--json", args->cfg.json, "print the summary as JSON");
  cmd->add_flag("--no-progress", args->no_progress, "no live progress line");
  cmd->callback([args, &g] {
    SetupLogging(g);
    BenchConfig cfg = args->cfg;
    Result<Workload> w = ParseWorkload(cfg.rw);
    if (!w.ok()) throw CLI::RuntimeError(Fail(w.status()));
    cfg.workload = *w;
    Result<uint64_t> bs = ParseSize(args->bs);
    if (!bs.ok()) throw CLI::RuntimeError(Fail(bs.status()));
    if (*bs == 0 || *bs > (64u << 20)) {
      throw CLI::RuntimeError(Fail(Status::InvalidArgument("--bs must be between 1 and 64 MiB")));
    }
    cfg.bs = static_cast<uint32_t>(*bs);
    if (!args->size.empty()) {
      Result<uint64_t> size = ParseSize(args->size);
      if (!size.ok()) throw CLI::RuntimeError(Fail(size.status()));
      cfg.range = *size;
    }
    cfg.progress = !args->no_progress && !cfg.json && isatty(STDERR_FILENO);
    Result<IscsiUrl> url = ParseIscsiUrl(args->url);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    Result<std::shared_ptr<Session>> session = OpenSession(*url, *c);
    if (!session.ok()) throw CLI::RuntimeError(Fail(session.status()));
    Result<uint64_t> lun = ChooseLun(**session, *url);
    if (!lun.ok()) throw CLI::RuntimeError(Fail(lun.status()));
    Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(*session, *lun);
    if (!dev.ok()) throw CLI::RuntimeError(Fail(dev.status()));
    Bench bench(**dev, cfg);
    Status st = bench.Run();
    const std::string target = url->target + " LUN " + std::to_string(*lun);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    bench.Print(target);
    dev->reset();
    st = (*session)->Close();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    if (bench.verify_failed()) {
      std::fprintf(stderr, "iser-connect: verify failed: data read back does not match\n");
      throw CLI::RuntimeError(exit_code::kVerifyFailed);
    }
  });
}

}  // namespace iser::cli
