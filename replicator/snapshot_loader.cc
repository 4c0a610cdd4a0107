#include "replicator/snapshot_loader.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace xdcr::replicator {
namespace {

// The same bounds as the stream's (pipeline.cc): the target answers, then we read on.
constexpr uint64_t kMaxInflightCommands = 20'000;
constexpr size_t kMaxPendingBytes = 16u << 20;
constexpr auto kReportEvery = std::chrono::seconds(5);

}  // namespace

SnapshotLoader::SnapshotLoader(std::string pipeline, filters::StreamFilter& filter,
                               filters::ExpiryIndex& index, target::Applier& applier,
                               target::RedisTarget& target, PipelineStats& stats,
                               SnapshotProgress& progress, std::function<Status()> on_begin,
                               std::function<bool()> hold)
    : pipeline_(std::move(pipeline)),
      filter_(filter),
      index_(index),
      applier_(applier),
      target_(target),
      stats_(stats),
      progress_(progress),
      on_begin_(std::move(on_begin)),
      hold_(std::move(hold)),
      tty_(::isatty(STDERR_FILENO) == 1) {}

net::awaitable<Status> SnapshotLoader::begin(const source::Position& at, uint64_t total_bytes) {
  progress_ = SnapshotProgress{};
  progress_.active = true;
  progress_.bytes_total = total_bytes;
  progress_.started = last_report_ = std::chrono::steady_clock::now();
  spdlog::info("pipeline {}: full sync from {}:{} ({} snapshot)", pipeline_, at.replid, at.offset,
               total_bytes ? fmt::format("{} byte", total_bytes) : std::string("diskless"));
  co_return on_begin_();
}

net::awaitable<Result<size_t>> SnapshotLoader::data(std::string_view available, bool last) {
  size_t used = 0;
  while (used < available.size() || (last && !walker_.done())) {
    std::string_view rest = available.substr(used);
    // A value larger than what is buffered is retried only once the buffer has doubled (or the
    // exact size it needs is there), so a large value costs O(n), not O(n^2), to find.
    if (!last && rest.size() < retry_at_) break;
    source::rdb::Item item;
    auto r = walker_.next(rest, item);
    if (r.status == source::rdb::Status::NeedMore) {
      if (last) {
        co_return fail(Error::protocol(fmt::format(
            "pipeline {}: the source's snapshot ended in the middle of an item", pipeline_)));
      }
      retry_at_ = std::max<size_t>(r.need, std::min(rest.size() * 2, rest.size() + (64u << 20)));
      break;
    }
    if (r.status == source::rdb::Status::Error) {
      co_return fail(Error::protocol(fmt::format(
          "pipeline {}: bad snapshot from the source: {}; the full sync will be retried",
          pipeline_, r.error)));
    }
    retry_at_ = 0;
    used += r.consumed;
    progress_.bytes_done += r.consumed;
    switch (item.kind) {
      case source::rdb::ItemKind::Key:
        applyKey(item);
        break;
      case source::rdb::ItemKind::ResizeDb:
        progress_.keys_total += item.db_size;
        break;
      case source::rdb::ItemKind::Function:
        spdlog::warn("pipeline {}: the snapshot holds a function library; functions are not "
                     "replicated (load them on the target yourself)",
                     pipeline_);
        break;
      default:
        break;
    }
    // Backpressure, between items (the views into `available` stay valid: nothing else touches
    // the source's buffer while this runs).
    while (target_.inflightCommands() > kMaxInflightCommands ||
           target_.pendingBytes() > kMaxPendingBytes || hold_()) {
      co_await target_.waitProgress(std::chrono::milliseconds(100));
    }
    if (std::chrono::steady_clock::now() - last_report_ >= kReportEvery) reportProgress(false);
  }
  co_return used;
}

void SnapshotLoader::applyKey(const source::rdb::Item& item) {
  ++progress_.keys_done;
  const int target_db = filter_.mapDb(item.db);
  if (target_db < 0 || !filter_.keyPasses(item.key)) {
    ++progress_.filtered;
    stats_.count(FilterReason::Key);
    return;
  }
  if (item.expire_ms != 0) index_.set(item.db, item.key, item.expire_ms);
  if (keys_ != nullptr) keys_->add(item.db, item.key);
  size_t payload = target::Applier::restorePayloadSize(item.value.size());
  if (payload > target_.maxBulkLength()) {
    ++progress_.failed;
    ++stats_.snapshot_keys_failed;
    uint64_t suppressed = 0;
    if (fail_log_.allow(suppressed)) {
      spdlog::error("pipeline {}: key \"{}\" (db {}) is {} bytes, over the target's "
                    "proto-max-bulk-len of {}: NOT copied; raise proto-max-bulk-len on the target "
                    "and restart the agent to retry{}",
                    pipeline_, item.key, item.db, payload, target_.maxBulkLength(),
                    suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
    }
    return;
  }
  applier_.beginUnit(false);
  auto w = applier_.applySnapshotKey(item.db, item.key, item.type, item.value, walker_.version(),
                                     item.expire_ms, item.idle_s, item.freq);
  size_t n = applier_.finishUnit(target_.pending());
  // The whole snapshot stands at the FULLRESYNC offset: acknowledging it moves nothing.
  target_.commit(n, target_.ackedOffset());
  if (w == target::Applier::SnapshotWrite::Expired) {
    ++progress_.expired;
  } else {
    ++progress_.restored;
  }
}

void SnapshotLoader::reportProgress(bool final) {
  last_report_ = std::chrono::steady_clock::now();
  double secs = std::chrono::duration<double>(last_report_ - progress_.started).count();
  std::string keys = progress_.keys_total
                         ? fmt::format("{}/{} keys ({:.0f}%)", progress_.keys_done,
                                       progress_.keys_total,
                                       100.0 * progress_.keys_done / progress_.keys_total)
                         : fmt::format("{} keys", progress_.keys_done);
  std::string bytes = progress_.bytes_total
                          ? fmt::format("{:.1f}/{:.1f} MB", progress_.bytes_done / 1e6,
                                        progress_.bytes_total / 1e6)
                          : fmt::format("{:.1f} MB", progress_.bytes_done / 1e6);
  if (tty_) {
    // A progress bar for a person watching; logs get the same line every few seconds.
    int width = 30;
    int filled = progress_.keys_total
                     ? static_cast<int>(width * progress_.keys_done / progress_.keys_total)
                     : 0;
    std::fprintf(stderr, "\r[%s%s] %s, %s, %.0f s%s", std::string(filled, '=').c_str(),
                 std::string(width - filled, ' ').c_str(), keys.c_str(), bytes.c_str(), secs,
                 final ? "\n" : "");
    std::fflush(stderr);
  }
  if (!final) spdlog::info("pipeline {}: full sync: {}, {}, {:.0f} s", pipeline_, keys, bytes, secs);
}

net::awaitable<Status> SnapshotLoader::end() {
  if (!walker_.done()) {
    co_return fail(Error::protocol(
        fmt::format("pipeline {}: the snapshot ended before its EOF marker", pipeline_)));
  }
  // "Applied" means acknowledged by the target.
  while (!target_.drained()) co_await target_.waitProgress(std::chrono::milliseconds(50));
  progress_.active = false;
  progress_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - progress_.started).count();
  stats_.snapshot_keys_restored += progress_.restored;
  stats_.snapshot_keys_expired += progress_.expired;
  reportProgress(true);
  spdlog::info("pipeline {}: snapshot applied: {} keys, {} expired, {} failed, {} filtered, {} "
               "bytes in {:.1f} s",
               pipeline_, progress_.restored, progress_.expired, progress_.failed,
               progress_.filtered, progress_.bytes_done, progress_.seconds);
  co_return Status{};
}

}  // namespace xdcr::replicator
