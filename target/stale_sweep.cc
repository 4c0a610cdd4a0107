#include "target/stale_sweep.h"

#include <boost/asio/this_coro.hpp>

#include <algorithm>

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "common/redis_conn.h"
#include "target/marker.h"

namespace xdcr::target {
namespace {

constexpr auto kTimeout = std::chrono::seconds(10);
constexpr uint64_t kMaxInflight = 50'000;

// The db goes into the hashed bytes, not into XXH3's seed: for inputs of 1–3 bytes the seed
// combines with the input almost linearly ("k:2" in db 2 and "k:3" in db 1 collide).
uint64_t hashOf(int db, std::string_view key) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const uint32_t d = static_cast<uint32_t>(db);
  XXH3_64bits_update(&state, &d, sizeof d);
  XXH3_64bits_update(&state, key.data(), key.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace

void SnapshotKeys::add(int db, std::string_view key) {
  hashes_.push_back(hashOf(db, key));
}

void SnapshotKeys::seal() {
  std::sort(hashes_.begin(), hashes_.end());
}

bool SnapshotKeys::contains(int db, std::string_view key) const {
  return std::binary_search(hashes_.begin(), hashes_.end(), hashOf(db, key));
}

net::awaitable<Result<uint64_t>> deleteStaleKeys(std::string_view label,
                                                 const config::ClusterConfig& target_cluster,
                                                 const filters::KeySpace& space,
                                                 const SnapshotKeys& snapshot, Applier& applier,
                                                 RedisTarget& target, uint64_t offset) {
  RedisConnection conn(co_await net::this_coro::executor, fmt::format("{} stale-key scan", label));
  // The writer's node (a Sentinel-managed target's master as discovered): TCP, TLS, AUTH.
  Status s = co_await conn.connect(target.node(), kTimeout);
  if (!s) co_return fail(s.error());

  uint64_t deleted = 0;
  for (auto [tdb, sdb] : space.sourceDbsByTarget()) {
    const std::vector<std::vector<std::string>> select = {{"SELECT", std::to_string(tdb)}};
    auto sel = co_await conn.callMany(select, kTimeout);
    if (!sel) co_return fail(sel.error());
    if ((*sel)[0].isError()) break;  // fewer dbs than 16 on this server: done
    std::string cursor = "0";
    do {
      auto keys = co_await conn.scanPage(cursor, 1000, kTimeout);
      if (!keys) co_return fail(keys.error());
      applier.beginUnit(false);
      for (const auto& tkey : *keys) {
        if (isMarkerKey(tkey)) continue;
        const std::string skey = space.unrewrite(tkey);
        if (!space.keyPasses(skey) || snapshot.contains(sdb, skey)) continue;
        applier.appendDelete(tdb, tkey);
        ++deleted;
      }
      target.commit(applier.finishUnit(target.pending()), offset);
      while (target.inflightCommands() > kMaxInflight) {
        co_await target.waitProgress(std::chrono::milliseconds(100));
      }
    } while (cursor != "0");
  }
  conn.close();
  while (!target.drained()) co_await target.waitProgress(std::chrono::milliseconds(50));
  co_return deleted;
}

}  // namespace xdcr::target
