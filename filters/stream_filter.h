#pragma once
// The filter stage: one stream entry in, its events out, each resolved and judged.
//
//  - tracks the source db (SELECT) and the `dbs` map;
//  - resolves deadlines that depend on source state (in-place writes, RENAME/COPY) from the
//    expiry index, and keeps the index current (expiry-semantics.md §2);
//  - classifies each key of a DEL/UNLINK as an expiration or a deletion (§5), with tombstones;
//  - applies the filters of §6 and interface.md §2: include/exclude_keys (RE2, unanchored
//    search), drop_expirations, drop_deletions, strip_ttl, replicate_flush;
//  - counts every event by kind and every filtered event by reason.
//
// Not thread-safe; one per pipeline session.

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "clock/clock.h"
#include "common/logging.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/expiry_index.h"
#include "source/event.h"

namespace re2 {
class RE2;
}

namespace xdcr::filters {

class StreamFilter {
 public:
  StreamFilter(const config::PipelineConfig& pipeline, ExpiryIndex& index,
               const clock::ClusterClock& source_clock, PipelineStats& stats);
  ~StreamFilter();

  /** Decodes and filters one entry; `out.events` holds the verdicts. */
  void process(const source::Entry& entry, source::Change& out);

  /** The source db in effect at the current stream position (persisted with checkpoints). */
  int currentDb() const { return db_; }
  void setCurrentDb(int db) { db_ = db; }
  /** Target db for a source db, or -1 when the `dbs` map does not replicate it. */
  int mapDb(int source_db) const;
  /**
   * The reverse of the `dbs` map, target db -> source db: every db the pipeline may write. The
   * identity map covers Redis's default 16 dbs.
   */
  std::map<int, int> sourceDbsByTarget() const {
    std::map<int, int> out;
    if (pipeline_.dbs.empty()) {
      for (int db = 0; db < 16; ++db) out[db] = db;
    } else {
      for (auto [src, dst] : pipeline_.dbs) out.emplace(dst, src);
    }
    return out;
  }
  /** All target dbs the map replicates into (empty = identity map). */
  const std::map<int, int>& dbMap() const { return pipeline_.dbs; }
  /** include_keys / exclude_keys verdict for one key. */
  bool keyPasses(std::string_view key) const;

 private:
  void filterKeyEvent(source::Change& c, source::Event& ev, int64_t source_now);
  /** A command whose keys fall on both sides of the filters cannot be reproduced: say so. */
  void reportSplit(const source::Change& c, std::string_view why);

  const config::PipelineConfig& pipeline_;
  ExpiryIndex& index_;
  const clock::ClusterClock& source_clock_;
  PipelineStats& stats_;
  std::vector<std::unique_ptr<re2::RE2>> include_;
  std::vector<std::unique_ptr<re2::RE2>> exclude_;
  int db_ = 0;
  LogRateLimiter flush_log_;
  LogRateLimiter problem_log_;
  LogRateLimiter split_log_;
};

/** key_rewrite: the first rule whose `from` is a prefix of the key maps it to `to` + rest. */
class KeyRewriter {
 public:
  explicit KeyRewriter(const std::vector<config::KeyRewrite>& rules) : rules_(rules) {}
  /** The target key as two parts (prefix, rest), to be written back to back. */
  std::pair<std::string_view, std::string_view> map(std::string_view key) const {
    for (const auto& r : rules_) {
      if (key.substr(0, r.from.size()) == r.from) {
        return {r.to, key.substr(r.from.size())};
      }
    }
    return {std::string_view(), key};
  }
  /** The source name of a target key: undoes the first rule whose target prefix matches. */
  std::string unmap(std::string_view target_key) const {
    for (const auto& r : rules_) {
      if (target_key.substr(0, r.to.size()) == r.to) {
        return r.from + std::string(target_key.substr(r.to.size()));
      }
    }
    return std::string(target_key);
  }
  bool empty() const { return rules_.empty(); }

 private:
  const std::vector<config::KeyRewrite>& rules_;
};

}  // namespace xdcr::filters
