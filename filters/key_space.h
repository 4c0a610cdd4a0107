#pragma once
// A pipeline's key space, one immutable value: which source dbs it replicates and into which
// target db (`dbs`), which keys (`filters.include_keys` / `exclude_keys`, RE2, unanchored
// search), which hash slots of a Redis Cluster source (its `slots`: an agent that replicates part
// of a cluster), and under which name (`key_rewrite`). Built once per pipeline configuration and
// shared (KeySpaceConstSharedPtr) by everything that must agree on it: the event filter and the
// sink that write, the stale-key sweep after a full sync, and `xdcr-agent verify` that compares.
// A key outside the source's slots is another agent's: the filter counts it as a key filter.

#include <bitset>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"

namespace re2 {
class RE2;
}

namespace xdcr::filters {

class KeySpace {
 public:
  explicit KeySpace(const config::PipelineConfig& pipeline);
  /** With the source cluster's `slots` (empty: every slot). */
  KeySpace(const config::PipelineConfig& pipeline,
           const std::vector<std::pair<int, int>>& source_slots);
  ~KeySpace();
  KeySpace(const KeySpace&) = delete;
  KeySpace& operator=(const KeySpace&) = delete;

  /** Target db for a source db, or -1 when the `dbs` map does not replicate it. */
  int mapDb(int source_db) const {
    if (dbs_.empty()) return source_db;
    auto it = dbs_.find(source_db);
    return it == dbs_.end() ? -1 : it->second;
  }
  /** Which rule decides whether a key is in the key space (`xdcr-agent explain` names it). */
  struct KeyVerdict {
    enum class Rule {
      Passes,   // in the key space
      Slot,     // its hash slot is not among the source cluster's `slots`
      Include,  // include_keys is set and no pattern matches it
      Exclude,  // exclude_keys[pattern] matches it (the first that does)
    };
    Rule rule = Rule::Passes;
    int pattern = -1;  // Exclude: the index into filters.exclude_keys
    int slot = -1;     // its hash slot, when the source's `slots` are set
  };
  /** The slots, then include_keys, then exclude_keys; the first rule that rejects the key. */
  KeyVerdict judgeKey(std::string_view key) const;
  /** include_keys / exclude_keys verdict for one key (any db), and its slot among the source
   *  cluster's `slots` when they are set. */
  bool keyPasses(std::string_view key) const {
    return judgeKey(key).rule == KeyVerdict::Rule::Passes;
  }
  /** Both: the key is in the pipeline's key space. */
  bool contains(int source_db, std::string_view key) const {
    return mapDb(source_db) >= 0 && keyPasses(key);
  }
  /** The `dbs` map as configured (empty = identity). */
  const std::map<int, int>& dbMap() const { return dbs_; }
  /**
   * The reverse of the `dbs` map, target db -> source db: every db the pipeline may write. The
   * identity map covers Redis's default 16 dbs.
   */
  std::map<int, int> sourceDbsByTarget() const;

  /** key_rewrite: the target key as two parts (prefix, rest), to be written back to back. */
  std::pair<std::string_view, std::string_view> rewrite(std::string_view key) const {
    for (const auto& r : rewrites_) {
      if (key.substr(0, r.from.size()) == r.from) return {r.to, key.substr(r.from.size())};
    }
    return {std::string_view(), key};
  }
  /** The source name of a target key: undoes the first rule whose target prefix matches. */
  std::string unrewrite(std::string_view target_key) const;
  bool rewrites() const { return !rewrites_.empty(); }

 private:
  std::map<int, int> dbs_;
  std::vector<std::unique_ptr<re2::RE2>> include_;
  std::vector<std::unique_ptr<re2::RE2>> exclude_;
  std::vector<config::KeyRewrite> rewrites_;
  bool all_slots_ = true;
  std::bitset<16384> slots_;  // with !all_slots_: the source slots replicated
};

using KeySpaceConstSharedPtr = std::shared_ptr<const KeySpace>;

}  // namespace xdcr::filters
