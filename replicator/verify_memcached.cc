#include "replicator/verify_memcached.h"

#include <charconv>

#include <fmt/format.h>

#include "clock/memcached_time.h"
#include "target/memcached_encoder.h"
#include "target/memcached_writer.h"

namespace xdcr::replicator::verify {

McExpectation expectOnMemcached(const McExpectInput& in) {
  McExpectation e;
  auto refuse = [&](const char* reason, std::string why) {
    e.kind = McExpectation::Kind::Refused;
    e.reason = reason;
    e.why = std::move(why);
    return e;
  };
  const auto wk = target::mc::wireKey(in.target_key);
  if (!wk) {
    return refuse("key_too_long",
                  fmt::format("its key is {} bytes; memcached takes at most 250 bytes of key (186 "
                              "of a key with bytes other than printable ASCII)",
                              in.target_key.size()));
  }
  if (in.type == "string") {
    e.flags = target::mc::kFlagString;
  } else if (in.non_strings == config::NonStrings::Json) {
    e.flags = target::mc::kFlagJson;
  } else if (in.non_strings == config::NonStrings::Dump) {
    e.flags = target::mc::kFlagDump;
  } else {
    return refuse("not_a_string", fmt::format("it is a {} and non_strings is refuse", in.type));
  }
  const auto f = target::mc::finalDeadline(in.deadline_ms, 0, in.max_ttl_ms, in.target_now_ms);
  using K = target::mc::FinalDeadline::Kind;
  if (f.kind == K::Expired) {
    e.kind = McExpectation::Kind::Expired;
    return e;
  }
  if (f.kind == K::TooFar) {
    return refuse("deadline_2038",
                  fmt::format("its deadline {} ms is after 2038-01-19T03:14:07Z, which memcached "
                              "cannot store",
                              f.ms));
  }
  const size_t max_value = target::mc::maxValueSize(in.item_size_max, in.target_key.size());
  if (in.value_size > max_value) {
    return refuse("value_too_large",
                  fmt::format("its value is {} bytes; memcached's item_size_max {} leaves at most "
                              "{} for this key",
                              in.value_size, in.item_size_max, max_value));
  }
  return e;
}

MemcachedVerifyTarget::MemcachedVerifyTarget(net::any_io_executor ex,
                                             const config::ClusterConfig& cluster,
                                             std::chrono::milliseconds timeout)
    : cluster_(cluster),
      label_(fmt::format("target {} (memcached {})", cluster.name, cluster.address())),
      timeout_(timeout),
      conn_(ex, label_) {}

net::awaitable<Status> MemcachedVerifyTarget::connect() {
  if (auto s = co_await conn_.connect(cluster_.endpoint(), timeout_); !s) co_return s;
  auto r = co_await target::MemcachedWriter::call(conn_, "stats settings\r\n", 0, timeout_);
  if (!r) co_return fail(r.error());
  for (const auto& reply : *r) {
    if (reply.isError()) {
      co_return fail(Error::protocol(fmt::format(
          "{}: `stats settings` refused ({}): is this a memcached server?", label_, reply.text)));
    }
    if (reply.kind == target::mc::Reply::Kind::Stat && reply.text.rfind("item_size_max ", 0) == 0) {
      uint64_t v = 0;
      const std::string_view num = std::string_view(reply.text).substr(14);
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (ec == std::errc() && v > 0) item_size_max_ = v;
    }
  }
  co_return Status{};
}

net::awaitable<Result<std::vector<McItem>>> MemcachedVerifyTarget::read(
    const std::vector<std::string>& keys, int64_t& stat_time_s) {
  std::vector<McItem> out(keys.size());
  std::vector<size_t> asked;
  std::string request;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto wk = target::mc::wireKey(keys[i]);
    if (!wk) continue;  // the sink never writes it
    request += "mg " + wk->text + " v t f" + (wk->base64 ? " b" : "") + "\r\n";
    asked.push_back(i);
  }
  if (!asked.empty()) {
    auto r = co_await target::MemcachedWriter::call(conn_, request, asked.size(), timeout_);
    if (!r) co_return fail(r.error());
    for (size_t j = 0; j < asked.size(); ++j) {
      const target::mc::Reply& reply = (*r)[j];
      if (reply.isError()) {
        co_return fail(Error::protocol(
            fmt::format("{}: mg {} answered an error: {}", label_, keys[asked[j]], reply.text)));
      }
      if (reply.kind != target::mc::Reply::Kind::Value) continue;  // EN: absent
      McItem& item = out[asked[j]];
      item.present = true;
      item.value = reply.value;
      item.flags = static_cast<uint32_t>(target::mc::flagValue(reply.text, 'f').value_or(0));
      // t: remaining seconds, -1 none (converted to absolute below, with STAT time).
      item.deadline_ms = target::mc::flagValue(reply.text, 't').value_or(-1);
    }
  }
  auto st = co_await target::MemcachedWriter::call(conn_, "stats\r\n", 0, timeout_);
  if (!st) co_return fail(st.error());
  stat_time_s = 0;
  for (const auto& reply : *st) {
    if (reply.kind != target::mc::Reply::Kind::Stat) continue;
    if (auto t = clock::parseStatTime("STAT " + reply.text)) stat_time_s = *t;
  }
  if (stat_time_s == 0) {
    co_return fail(Error::protocol(fmt::format("{}: `stats` gave no STAT time", label_)));
  }
  for (McItem& item : out) {
    if (item.present && item.deadline_ms >= 0) {
      item.deadline_ms = (stat_time_s + item.deadline_ms) * 1000;
    }
  }
  co_return out;
}

}  // namespace xdcr::replicator::verify
