// iser-connect bench: a fio-like load generator on one LUN through BlockDevice's asynchronous
// API (queue depth QD, requests resubmitted from their completions on the session's I/O
// thread), with a live progress line, a summary and optional data verification.
//
// Verification (--verify) writes checksummed units stamped with offset, seed and a per-block
// write generation (cli/bench/verify_pattern.h). Workloads that read first fill the range with
// generation 1; every later write of a block stamps the next generation, and the ledger
// (cli/bench/block_ledger.h) remembers it, so a read finds out whether the last write of that
// block reached the LUN. No two I/Os on one block are in flight together, so what each read
// must return is always known. At the end every block written in the run is read back.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <semaphore>

#include "cli/bench/block_ledger.h"
#include "cli/bench/latency_histogram.h"
#include "cli/bench/thread_cpu.h"
#include "cli/bench/verify_pattern.h"
#include "cli/commands.h"
#include "cli/json_output.h"
#include "cli/size.h"
#include "discovery/seconds.h"
#include "initiator/base/mutex.h"
#include "initiator/block/block_device.h"

namespace iser::cli {

namespace {

using BenchClock = std::chrono::steady_clock;
constexpr uint64_t kMaxBlockSize = 64u << 20;

enum class Workload { kRead, kWrite, kRandRead, kRandWrite, kRandRw };

struct BenchConfig {
  Workload workload = Workload::kRandRead;
  std::string rw = "randread";
  uint32_t bs = 4096;
  uint32_t qd = 32;
  double seconds = 0;  // --time
  bool verify = false;
  bool json = false;
  bool progress = false;
  uint64_t range = 0;  // bytes of the LUN used, from offset 0; 0: all of it
  uint32_t rwmix_read = 50;
};

uint64_t NextRandom(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

class Bench {
 public:
  Bench(BlockDevice& dev, const BenchConfig& cfg) : dev_(dev), cfg_(cfg) {}

  Status Run();
  // The summary; the session's stats say how often it recovered during the run.
  void Print(const std::string& target, const PathSet& paths) const;
  bool verify_failed() const { return bad_units_ > 0; }

 private:
  struct Slot {
    IoRequest req;
    uint8_t* buf = nullptr;
    uint64_t rng = 0;
    uint64_t block = 0;
    uint32_t generation = 0;  // verify: what the read must find, or what the write stamps
    BenchClock::time_point start;
    Bench* bench = nullptr;
  };

  Status Prefill();
  Status VerifyWritten();
  void Issue(Slot& s);
  static void OnComplete(IoRequest* req, const Status& status);

  BlockDevice& dev_;
  BenchConfig cfg_;
  uint64_t blocks_ = 0;
  uint64_t seed_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint8_t> buffers_;
  std::optional<BlockLedger> ledger_;  // verify mode
  std::atomic<uint64_t> seq_cursor_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> outstanding_{0};
  std::binary_semaphore done_{0};
  BenchClock::time_point end_;

  LatencyHistogram latency_;  // recorded on the I/O thread
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> read_ios_{0};
  std::atomic<uint64_t> write_ios_{0};
  uint64_t checked_units_ = 0;
  std::atomic<uint64_t> bad_units_{0};
  Mutex error_mu_;
  Status error_ ISER_GUARDED_BY(error_mu_);
  std::string verify_error_;

  double elapsed_s_ = 0;
  double cpu_user_s_ = 0;
  double cpu_sys_s_ = 0;
  CpuByName cpu_by_thread_;  // during the run
};

void Bench::Issue(Slot& s) {
  IoRequest& r = s.req;
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
  if (random) {
    s.block = NextRandom(s.rng) % blocks_;
  } else {
    s.block = seq_cursor_.fetch_add(1, std::memory_order_relaxed) % blocks_;
  }
  r.op = write ? IoOp::kWrite : IoOp::kRead;
  r.length = cfg_.bs;
  r.buffer = s.buf;
  // The slot's buffer holds only this LUN's bytes; a verifying run wants every byte placed.
  r.keeps_unplaced_bytes = !ledger_;
  if (ledger_) {
    s.block = ledger_->ClaimFrom(s.block);
    s.generation = write ? ledger_->NextGeneration(s.block) : ledger_->generation(s.block);
    if (write) FillUnits(s.buf, s.block * cfg_.bs, cfg_.bs, seed_, s.generation);
  }
  r.offset = s.block * cfg_.bs;
  s.start = BenchClock::now();
  dev_.Submit(&r);
}

void Bench::OnComplete(IoRequest* req, const Status& status) {
  Slot& s = *static_cast<Slot*>(req->context);
  Bench& b = *s.bench;
  const auto now = BenchClock::now();
  if (!status.ok()) {
    MutexLock lock(&b.error_mu_);
    if (b.error_.ok()) b.error_ = status;
    b.stop_ = true;
  } else {
    b.latency_.Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.start).count()));
    b.bytes_.fetch_add(req->length, std::memory_order_relaxed);
    if (req->op == IoOp::kRead) {
      b.read_ios_.fetch_add(1, std::memory_order_relaxed);
      if (b.ledger_ && s.generation > 0) {
        b.checked_units_ += req->length / kVerifyUnit;
        const uint64_t bad = CheckUnits(req->buffer, req->offset, req->length, b.seed_,
                                        s.generation, &b.verify_error_);
        if (bad > 0) {
          b.bad_units_ += bad;
          b.stop_ = true;
        }
      }
    } else {
      b.write_ios_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (b.ledger_) b.ledger_->Release(s.block);
  if (!b.stop_.load(std::memory_order_relaxed) && now < b.end_) {
    b.Issue(s);
    return;
  }
  if (b.outstanding_.fetch_sub(1) == 1) b.done_.release();
}

// The largest multiple of --bs that one command carries, at most 1 MiB.
uint32_t ChunkBytes(const LunInfo& info, uint32_t bs) {
  return std::max(bs, std::min<uint32_t>(info.max_transfer_bytes, 1u << 20) / bs * bs);
}

Status Bench::Prefill() {
  const uint32_t chunk = ChunkBytes(dev_.info(), cfg_.bs);
  std::vector<uint8_t> buf(chunk);
  for (uint64_t off = 0; off < cfg_.range; off += chunk) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk, cfg_.range - off));
    FillUnits(buf.data(), off, n, seed_, 1);
    ISER_RETURN_IF_ERROR(dev_.Write(off, buf.data(), n));
  }
  ledger_->SetAll(1);
  return Status::OK();
}

Status Bench::VerifyWritten() {
  const uint32_t chunk = ChunkBytes(dev_.info(), cfg_.bs);
  const uint64_t per_chunk = chunk / cfg_.bs;
  std::vector<uint8_t> buf(chunk);
  for (uint64_t first = 0; first < blocks_; first += per_chunk) {
    const uint64_t count = std::min(per_chunk, blocks_ - first);
    bool written = false;
    for (uint64_t b = first; b < first + count; ++b) written = written || ledger_->generation(b);
    if (!written) continue;
    ISER_RETURN_IF_ERROR(dev_.Read(first * cfg_.bs, buf.data(), count * cfg_.bs));
    for (uint64_t b = first; b < first + count; ++b) {
      const uint32_t generation = ledger_->generation(b);
      if (generation == 0) continue;
      checked_units_ += cfg_.bs / kVerifyUnit;
      bad_units_ += CheckUnits(buf.data() + (b - first) * cfg_.bs, b * cfg_.bs, cfg_.bs, seed_,
                               generation, &verify_error_);
    }
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
  if (cfg_.range == 0) cfg_.range = info.size_bytes;
  cfg_.range = std::min(cfg_.range, info.size_bytes) / cfg_.bs * cfg_.bs;
  if (cfg_.range == 0) return Status::InvalidArgument("the LUN is smaller than one --bs block");
  blocks_ = cfg_.range / cfg_.bs;
  seed_ = static_cast<uint64_t>(BenchClock::now().time_since_epoch().count()) | 1;
  if (cfg_.verify) {
    if (blocks_ < cfg_.qd) {
      return Status::InvalidArgument("--verify keeps one I/O per block in flight: the range has " +
                                     std::to_string(blocks_) + " blocks of --bs, fewer than --qd " +
                                     std::to_string(cfg_.qd));
    }
    ledger_.emplace(blocks_);
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
  const CpuByName threads_before = CpuByThreadName();
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
    const uint64_t ios = latency_.count();
    const uint64_t lat = latency_.sum_ns();
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
  cpu_by_thread_ = CpuSpent(threads_before, CpuByThreadName());
  if (cfg_.progress) std::fprintf(stderr, "\r%*s\r", 72, "");
  {
    MutexLock lock(&error_mu_);
    if (!error_.ok()) return error_;
  }
  if (ledger_ && bad_units_ == 0) ISER_RETURN_IF_ERROR(VerifyWritten());
  return Status::OK();
}

void Bench::Print(const std::string& target, const PathSet& paths) const {
  const SessionStats session = paths.primary_stats();
  // With several paths: how the I/O went by each, and how often paths changed.
  std::vector<PathStatus> by_path;
  if (paths.multipath()) {
    for (const LunPathStatus& l : paths.PathStatuses()) {
      if (l.lun == dev_.info().lun) by_path = l.paths;
    }
  }
  const uint64_t ios = latency_.count();
  const double iops = static_cast<double>(ios) / elapsed_s_;
  const double mibs = static_cast<double>(bytes_.load()) / elapsed_s_ / (1 << 20);
  const double avg_ms = ios > 0 ? static_cast<double>(latency_.sum_ns()) / ios / 1e6 : 0;
  const double p50_ms = static_cast<double>(latency_.Percentile(0.5)) / 1e6;
  const double p99_ms = static_cast<double>(latency_.Percentile(0.99)) / 1e6;
  const double max_ms = static_cast<double>(latency_.max_ns()) / 1e6;
  const double cpu = cpu_user_s_ + cpu_sys_s_;
  const double cpu_per_io_us = ios > 0 ? cpu / static_cast<double>(ios) * 1e6 : 0;
  const double gib = static_cast<double>(bytes_.load()) / (1 << 30);
  const double cpu_per_gib_ms = gib > 0 ? cpu / gib * 1e3 : 0;
  const double longest_recovery_s = std::chrono::duration<double>(session.longest_recovery).count();
  if (cfg_.json) {
    Json threads = Json::object();
    for (const auto& [name, seconds] : cpu_by_thread_) threads[name] = seconds;
    const Json report = {{"target", target},
                         {"portal", PortalJson(session.current_portal, session.current_tpgt)},
                         {"connection", session.portal},
                         {"rw", cfg_.rw},
                         {"bs", cfg_.bs},
                         {"qd", cfg_.qd},
                         {"seconds", elapsed_s_},
                         {"ios", ios},
                         {"read_ios", read_ios_.load()},
                         {"write_ios", write_ios_.load()},
                         {"iops", iops},
                         {"mib_per_s", mibs},
                         {"lat_avg_ms", avg_ms},
                         {"lat_p50_ms", p50_ms},
                         {"lat_p99_ms", p99_ms},
                         {"lat_max_ms", max_ms},
                         {"cpu_user_s", cpu_user_s_},
                         {"cpu_sys_s", cpu_sys_s_},
                         {"cpu_us_per_io", cpu_per_io_us},
                         {"cpu_ms_per_gib", cpu_per_gib_ms},
                         {"cpu_s_by_thread", std::move(threads)},
                         {"verify", cfg_.verify},
                         {"verified_units", checked_units_},
                         {"bad_units", bad_units_.load()},
                         {"recoveries", session.recoveries},
                         {"longest_recovery_s", longest_recovery_s},
                         {"replayed_tasks", session.replayed_tasks},
                         {"retried_commands", session.retried_commands},
                         {"datamover", session.datamover}};
    Json report_paths = Json::array();
    for (const PathStatus& p : by_path) {
      report_paths.push_back(
          {{"portal", PortalJson(p.session.current_portal, p.session.current_tpgt)},
           {"healthy", p.healthy},
           {"serves", p.serves},
           {"alua_state", p.alua_state},
           {"commands", p.commands},
           {"recoveries", p.session.recoveries},
           {"replayed_tasks", p.session.replayed_tasks}});
    }
    Json full = report;
    full["paths"] = std::move(report_paths);
    full["path_changes"] = paths.path_changes();
    std::printf("%s\n", DumpJson(full).c_str());
    return;
  }
  std::string threads_text;
  for (const auto& [name, seconds] : cpu_by_thread_) {
    char item[64];
    std::snprintf(item, sizeof item, " %.2f s", seconds);
    threads_text += (threads_text.empty() ? "" : ", ") + name + item;
  }
  std::printf("%s %s QD%u for %.1f s on %s\n", cfg_.rw.c_str(), HumanBytes(cfg_.bs).c_str(),
              cfg_.qd, elapsed_s_, target.c_str());
  std::printf("  %.0f IOPS, %.1f MiB/s (%llu reads, %llu writes)\n", iops, mibs,
              static_cast<unsigned long long>(read_ios_.load()),
              static_cast<unsigned long long>(write_ios_.load()));
  std::printf("  latency avg %.3f ms, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", avg_ms, p50_ms,
              p99_ms, max_ms);
  std::printf("  initiator CPU %.2f s (user %.2f, sys %.2f): %.1f us per I/O, %.1f ms per GiB\n",
              cpu, cpu_user_s_, cpu_sys_s_, cpu_per_io_us, cpu_per_gib_ms);
  std::printf("  CPU by thread: %s\n", threads_text.c_str());
  std::printf("  connection: %s\n", session.portal.c_str());
  if (!session.datamover.empty()) std::printf("  datamover: %s\n", session.datamover.c_str());
  std::printf(
      "  session: %llu recoveries (longest %.1f s), %llu tasks replayed, %llu commands "
      "retried\n",
      static_cast<unsigned long long>(session.recoveries), longest_recovery_s,
      static_cast<unsigned long long>(session.replayed_tasks),
      static_cast<unsigned long long>(session.retried_commands));
  for (size_t i = 0; i < by_path.size(); ++i) {
    const PathStatus& p = by_path[i];
    std::printf("  path %zu: %s %s, %s, %llu commands, %llu recoveries\n", i + 1, p.portal.c_str(),
                p.healthy ? "up" : "down",
                p.serves ? p.alua_state.c_str() : ("not used: " + p.why_not).c_str(),
                static_cast<unsigned long long>(p.commands),
                static_cast<unsigned long long>(p.session.recoveries));
  }
  if (!by_path.empty()) {
    std::printf("  path changes: %llu\n", static_cast<unsigned long long>(paths.path_changes()));
  }
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

struct BenchArgs {
  std::string url;
  std::string bs = "4k";
  std::string time = "10";
  std::optional<std::string> size;  // unset: the whole LUN
  BenchConfig cfg;
  bool no_progress = false;
};

// The options that need no LUN to check, checked before connecting.
Result<BenchConfig> ConfigFrom(const BenchArgs& args) {
  BenchConfig cfg = args.cfg;
  Result<Workload> w = ParseWorkload(cfg.rw);
  if (!w.ok()) return w.status();
  cfg.workload = *w;
  Result<uint64_t> bs = ParseSize("--bs", args.bs, 1, kMaxBlockSize);
  if (!bs.ok()) return bs.status();
  cfg.bs = static_cast<uint32_t>(*bs);
  Result<std::chrono::milliseconds> time =
      ParseSeconds("--time", args.time, std::chrono::milliseconds(1));
  if (!time.ok()) return time.status();
  cfg.seconds = std::chrono::duration<double>(*time).count();
  if (cfg.verify && cfg.bs % kVerifyUnit != 0) {
    return Status::InvalidArgument("--bs '" + args.bs + "': --verify needs a multiple of " +
                                   std::to_string(kVerifyUnit) + " bytes");
  }
  if (args.size) {
    Result<uint64_t> size = ParseSize("--size", *args.size, cfg.bs);
    if (!size.ok()) return size.status();
    cfg.range = *size;
  }
  cfg.progress = !args.no_progress && !cfg.json && isatty(STDERR_FILENO);
  return cfg;
}

// The URL's LUN, or the first direct-access LUN of the target.
Result<uint64_t> ChooseLun(Executor& session, const IscsiUrl& url) {
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
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "measure IOPS, bandwidth and latency on a LUN");
  AddGlobalOptions(*cmd, g);
  AddSessionOptions(*cmd, g);
  cmd->add_option("url", args->url, "iscsi:// or iser:// URL of the target (and LUN)")->required();
  cmd->add_option("--rw", args->cfg.rw, "read, write, randread, randwrite or randrw");
  cmd->add_option("--bs", args->bs, "block size per I/O, 1 byte to 64 MiB (e.g. 4k, 512k, 1m)");
  cmd->add_option("--qd", args->cfg.qd, "I/Os in flight")->check(CLI::Range(1, 1023));
  cmd->add_option("--time", args->time, "seconds to run (default 10, at most a year)");
  cmd->add_option_function<std::string>(
      "--size", [args](const std::string& size) { args->size = size; },
      "use only the first SIZE bytes of the LUN (at least --bs; e.g. 16m, 1g)");
  cmd->add_option("--rwmixread", args->cfg.rwmix_read, "percent of reads for randrw")
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--verify", args->cfg.verify,
                "write checksummed patterns and check every block read back");
  cmd->add_flag("--json", args->cfg.json, "print the summary as JSON");
  cmd->add_flag("--no-progress", args->no_progress, "no live progress line");
  cmd->callback([args, &g] {
    SetupLogging(g);
    Result<BenchConfig> cfg = ConfigFrom(*args);
    if (!cfg.ok()) throw CLI::RuntimeError(Fail(cfg.status()));
    Result<IscsiUrl> url = ParseIscsiUrl(args->url);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    Result<std::shared_ptr<PathSet>> paths = OpenPaths(*url, *c);
    if (!paths.ok()) throw CLI::RuntimeError(Fail(paths.status()));
    Result<uint64_t> lun = ChooseLun(**paths, *url);
    if (!lun.ok()) throw CLI::RuntimeError(Fail(lun.status()));
    Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(*paths, *lun);
    if (!dev.ok()) throw CLI::RuntimeError(Fail(dev.status()));
    Bench bench(**dev, *cfg);
    Status st = bench.Run();
    const std::string target = url->target + " LUN " + std::to_string(*lun);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    bench.Print(target, **paths);
    dev->reset();
    // The set first (it closes the sessions it opened, quietly), then a lone session of Of's.
    st = (*paths)->Close();
    if (Status lone = (*paths)->primary().Close(); st.ok()) st = lone;
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    if (bench.verify_failed()) {
      std::fprintf(stderr, "iser-connect: verify failed: data read back does not match\n");
      throw CLI::RuntimeError(exit_code::kVerifyFailed);
    }
  });
}

}  // namespace iser::cli
