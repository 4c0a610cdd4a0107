#include "target/redis_target.h"

#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/sentinel.h"

namespace xdcr::target {
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);

}  // namespace

bool isAvailabilityError(std::string_view kind) {
  for (std::string_view k : {"OOM", "READONLY", "LOADING", "NOAUTH", "NOPERM", "MISCONF",
                             "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"}) {
    if (kind == k) return true;
  }
  return false;
}

RedisTarget::RedisTarget(net::any_io_executor ex, const config::ClusterConfig& cluster,
                         std::string label, PipelineStats& stats, const clock::Clock& clock)
    : cluster_(cluster),
      clock_(clock),
      conn_(ex, std::move(label)),
      stats_(stats),
      ledger_(clock, stats.apply_latency),
      writer_wake_(ex),
      progress_(ex) {}

net::awaitable<Status> RedisTarget::connect() {
  // Where: the address, or the master the Sentinels name now (a failover moves it; READONLY or
  // a +switch-master ends the session, and the next one asks again).
  auto node = co_await sentinel::resolveEndpoint(cluster_, kConnectTimeout);
  if (!node) co_return fail(node.error());
  node_ = std::move(*node);
  // TCP, TLS (certificate checked before anything is sent), AUTH.
  if (auto r = co_await conn_.connect(node_, kConnectTimeout); !r) {
    co_return r;
  }
  std::vector<std::string_view> ping{"PING"};
  auto r = co_await conn_.call(ping, kConnectTimeout);
  if (!r) co_return fail(r.error());
  if (r->has_error) {
    co_return fail(
        Error::auth(fmt::format("{}: PING refused: {}; check the cluster's username "
                                "and password",
                                conn_.label(), r->text)));
  }
  // Values above this cannot be RESTOREd in one piece (full sync). A user without +config
  // gets an error here: keep Redis's default then.
  std::vector<std::string_view> get{"CONFIG", "GET", "proto-max-bulk-len"};
  auto cfg = co_await conn_.call(get, kConnectTimeout, true);
  if (!cfg) co_return fail(cfg.error());
  if (!cfg->has_error && cfg->elements.size() == 2) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(cfg->elements[1].data(),
                                   cfg->elements[1].data() + cfg->elements[1].size(), v);
    if (ec == std::errc() && v > 0) max_bulk_ = v;
  }
  // Which snapshot payloads it takes, whether it stores field TTLs. A user without +info gets
  // an error: unknown, then RESTORE is tried and a refusal counted.
  const std::vector<std::vector<std::string>> info = {{"INFO", "server"}};
  auto inf = co_await conn_.callMany(info, kConnectTimeout);
  if (!inf) co_return fail(inf.error());
  server_ = (*inf)[0].isError() ? ServerInfo{} : ServerInfo::parse((*inf)[0].str);
  wait_replicas_ = 0;
  if (cluster_.isSentinel()) {
    // Does the master have a replica to wait for, and may this user WAIT?
    const std::vector<std::vector<std::string>> ask = {{"INFO", "replication"}, {"WAIT", "0", "0"}};
    auto r = co_await conn_.callMany(ask, kConnectTimeout);
    if (!r) co_return fail(r.error());
    // Replicas streaming now (state=online), not those still in their full sync: WAIT would
    // time out for those.
    const std::string& info = (*r)[0].str;
    int replicas = 0;
    for (size_t at = info.find("\nslave"); at != std::string::npos;
         at = info.find("\nslave", at + 1)) {
      const size_t end = info.find('\n', at + 1);
      if (info.substr(at, end - at).find("state=online") != std::string::npos) ++replicas;
    }
    if ((*r)[1].isError()) {
      spdlog::warn(
          "{}: WAIT refused ({}): checkpoints are not held until the target's replica has them, "
          "so a failover of the target may cost a full sync; grant the target's user +wait",
          conn_.label(), (*r)[1].str);
    } else if (replicas > 0) {
      wait_replicas_ = 1;
    }
  }
  co_return Status{};
}

void RedisTarget::commit(size_t commands, uint64_t source_offset) {
  ledger_.commit(commands, source_offset);
  if (commands > 0) writer_wake_.notify();
}

void RedisTarget::resetOffset(uint64_t source_offset) {
  ledger_.reset(source_offset);
}

net::awaitable<Status> RedisTarget::runWriter() {
  for (;;) {
    while (pending_.empty()) {
      if (closing_) co_return Status{};
      co_await writer_wake_.wait();
    }
    if (before_send_) {
      if (auto s = before_send_(); !s) co_return s;
    }
    // Double buffering: the applier keeps appending to pending_ while writing_ is on the wire.
    std::swap(pending_, writing_);
    auto r = co_await conn_.writeAll(writing_);
    if (!r) co_return r;
    writing_.clear();
    if (writing_.capacity() > (64u << 20)) writing_.shrink_to_fit();
  }
}

net::awaitable<Status> RedisTarget::runReader() {
  resp::ReplyInfo info;
  for (;;) {
    auto& buf = conn_.buffer();
    bool progressed = false;
    for (;;) {
      const uint64_t seq = ledger_.replied() + 1;  // the reply about to be read
      while (!observed_.empty() && observed_.front() < seq) observed_.pop_front();
      info.collect_items = !observed_.empty() && observed_.front() == seq;
      auto pr = resp::parseReply(buf.data(), info);
      if (pr.status == resp::ParseStatus::NeedMore) break;
      if (pr.status == resp::ParseStatus::Error) {
        co_return fail(
            Error::protocol(fmt::format("{}: malformed reply: {}", conn_.label(), pr.error)));
      }
      buf.consume(pr.consumed);
      if (ledger_.drained()) {
        co_return fail(
            Error::protocol(fmt::format("{}: unexpected reply \"{}\"", conn_.label(), info.text)));
      }
      if (info.has_error) {
        if (auto s = onReplyError(info.text); !s) co_return s;
      }
      if (info.collect_items) {
        observed_.pop_front();
        if (observer_) observer_(seq, info);
      }
      if (!expects_.empty() && expects_.front().seq == ledger_.replied() + 1) {
        Expect e = std::move(expects_.front());
        expects_.pop_front();
        if (e.check) {
          if (auto s = e.check(info); !s) co_return s;
          ledger_.answered();
          progressed = true;
          continue;
        }
        const bool null = info.type == resp::ReplyType::Null;
        if (null != !e.value.has_value() || (!null && info.text != *e.value)) {
          if (auto s = e.on_mismatch(null ? std::nullopt : std::optional<std::string>(info.text));
              !s) {
            co_return s;
          }
        }
      }
      ledger_.answered();
      progressed = true;
    }
    if (progressed) {
      ledger_.progressed();
      progress_.notify();
    }
    auto r = co_await conn_.readSome();
    if (!r) co_return fail(r.error());
  }
}

Status RedisTarget::onReplyError(const std::string& text) {
  std::string kind = text.substr(0, text.find(' '));
  ++stats_.target_errors;
  ++stats_.target_errors_by_kind[kind];
  if (isAvailabilityError(kind)) {
    // Not acknowledged: the session ends here and the write is sent again after reconnecting.
    return fail(
        Error::refused(fmt::format("{}: target refused a write: {}; will retry from the "
                                   "last acknowledged offset",
                                   conn_.label(), text)));
  }
  uint64_t suppressed = 0;
  if (error_log_.allow(suppressed)) {
    spdlog::warn("{}: target error: {} (counted in xdcr_target_errors_total{{kind=\"{}\"}}){}",
                 conn_.label(), text, kind,
                 suppressed ? fmt::format("; {} more suppressed", suppressed) : "");
  }
  return Status{};
}

void RedisTarget::expectReply(uint64_t seq, std::optional<std::string> value,
                              MismatchFn on_mismatch) {
  expects_.push_back({seq, std::move(value), std::move(on_mismatch), nullptr});
}

void RedisTarget::onReply(uint64_t seq, ReplyFn check) {
  expects_.push_back({seq, std::nullopt, nullptr, std::move(check)});
}

double RedisTarget::stalledSeconds() const {
  return ledger_.stalledSeconds();
}

}  // namespace xdcr::target
