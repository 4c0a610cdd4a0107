#include "source/redis_shard_source.h"

#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace xdcr::source {

RedisShardSource::RedisShardSource(net::any_io_executor ex, const config::ClusterConfig& cluster,
                                   std::string label, ExpiryIndex& index,
                                   const clock::ClusterClock& source_clock,
                                   std::optional<RedisEndpoint> node)
    : label_(label),
      redis_(std::move(ex), cluster, std::move(label), std::move(node)),
      resolver_(index, source_clock),
      unit_clock_(source_clock.local()) {}

net::awaitable<Result<SyncKind>> RedisShardSource::start(const Position* resume, int resume_db,
                                                         SnapshotConsumer& consumer) {
  consumer_ = &consumer;
  walker_ = rdb::Walker();
  retry_at_ = 0;
  auto kind = co_await redis_.start(resume, *this);
  consumer_ = nullptr;
  if (!kind) co_return kind;
  // After a full sync the stream starts with SELECT; a partial resync continues in the db the
  // checkpoint recorded.
  resolver_.setCurrentDb(*kind == SyncKind::Partial ? resume_db : 0);
  co_return kind;
}

Result<bool> RedisShardSource::nextUnit(ResolvedUnit& out) {
  auto got = redis_.nextUnit(unit_);
  if (!got || !*got) return got;
  out.transaction = unit_.transaction;
  out.snapshot = false;
  out.offset_end = unit_.offset_end;
  out.replid = redis_.position().replid;
  out.bytes = unit_.bytes;
  out.count = 0;
  out.local_ms = unit_clock_.nowMs();
  for (const auto& entry : unit_.entries) resolver_.resolve(entry, out.add(), out.local_ms);
  return true;
}

void RedisShardSource::consume(const ResolvedUnit&) {
  redis_.consume(unit_);
}

net::awaitable<Status> RedisShardSource::begin(const Position& at, uint64_t total_bytes) {
  co_return co_await consumer_->beginSnapshot(at, total_bytes);
}

net::awaitable<Result<size_t>> RedisShardSource::data(std::string_view available, bool last) {
  size_t used = 0;
  while (used < available.size() || (last && !walker_.done())) {
    std::string_view rest = available.substr(used);
    // A value larger than what is buffered is retried only once the buffer has doubled (or the
    // exact size it needs is there), so a large value costs O(n), not O(n^2), to find.
    if (!last && rest.size() < retry_at_) break;
    rdb::Item item;
    auto r = walker_.next(rest, item);
    if (r.status == rdb::Status::NeedMore) {
      if (last) {
        co_return fail(Error::protocol(
            fmt::format("{}: the source's snapshot ended in the middle of an item", label_)));
      }
      retry_at_ = std::max<size_t>(r.need, std::min(rest.size() * 2, rest.size() + (64u << 20)));
      break;
    }
    if (r.status == rdb::Status::Error) {
      co_return fail(Error::protocol(fmt::format(
          "{}: bad snapshot from the source: {}; the full sync will be retried", label_, r.error)));
    }
    retry_at_ = 0;
    used += r.consumed;
    uint64_t announced = 0;
    switch (item.kind) {
      case rdb::ItemKind::Key: {
        payload_ = RdbPayload{item.type,   item.value, rdb::payloadVersion(walker_, item.type),
                              item.idle_s, item.freq,  walker_.flavor()};
        snapshot_unit_.transaction = false;
        snapshot_unit_.snapshot = true;
        snapshot_unit_.offset_end = redis_.position().offset;
        snapshot_unit_.bytes = r.consumed;
        snapshot_unit_.count = 0;
        resolver_.resolveSnapshotKey(item.db, item.key, item.expire_ms, payload_,
                                     snapshot_unit_.add());
        consumer_->snapshotProgress(0, r.consumed);
        // The views into `available` stay valid while the consumer waits: nothing else touches
        // the source's buffer meanwhile.
        if (auto s = co_await consumer_->snapshotUnit(snapshot_unit_); !s)
          co_return fail(s.error());
        // The link lost before the whole snapshot was in (spooled): stop applying it now.
        if (redis_.snapshotLost()) {
          if (auto s = co_await redis_.checkSnapshot(); !s) co_return fail(s.error());
        }
        continue;
      }
      case rdb::ItemKind::ResizeDb:
        announced = item.db_size;
        break;
      case rdb::ItemKind::Aux:
        // A diskless snapshot announces no length: the source's memory sizes its spool.
        if (item.aux_key == "used-mem") {
          uint64_t used = 0;
          auto [p, ec] = std::from_chars(item.aux_value.data(),
                                         item.aux_value.data() + item.aux_value.size(), used);
          if (ec == std::errc() && used > 0) redis_.snapshotSizeHint(used);
        }
        break;
      case rdb::ItemKind::Function:
        spdlog::warn(
            "{}: the snapshot holds a function library; functions are not replicated "
            "(load them on the target yourself)",
            label_);
        break;
      default:
        break;
    }
    consumer_->snapshotProgress(announced, r.consumed);
  }
  co_return used;
}

net::awaitable<Status> RedisShardSource::end() {
  if (!walker_.done()) {
    co_return fail(
        Error::protocol(fmt::format("{}: the snapshot ended before its EOF marker", label_)));
  }
  co_return co_await consumer_->endSnapshot();
}

}  // namespace xdcr::source
