#pragma once
// max_lifetime's first-seen records (target/first_seen.h) as `xdcr-agent verify` and `explain`
// read them: READ-ONLY, beside a running agent that appends to them. Every instance of the
// pipeline has its file in agent.state_dir: `<pipeline>.first-seen`, and with a Redis Cluster
// source `<pipeline>@<id>.first-seen`; a key is looked up in each.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "replicator/verify_compare.h"
#include "target/first_seen.h"

namespace xdcr::replicator {

class FirstSeenView {
 public:
  /**
   * Loads every instance's file (records whose lifetime ended by `now_ms` are dropped, as the
   * agent drops them). Never creates, truncates or appends to a file. A file that cannot be
   * read is skipped and named in note().
   */
  static FirstSeenView load(const std::string& state_dir, const std::string& pipeline,
                            int64_t max_lifetime_ms, int64_t now_ms);

  /** The key's first second (target db and key); min_s < max_s when two files disagree. */
  verify::FirstSeenFact find(int db, std::string_view key) const;
  /** Which files were read ("STATE/p.first-seen (12 keys)"), or why none. */
  const std::string& note() const { return note_; }
  size_t files() const { return stores_.size(); }

 private:
  std::vector<std::unique_ptr<target::FirstSeenStore>> stores_;
  std::string note_;
};

}  // namespace xdcr::replicator
