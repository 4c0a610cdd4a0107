#pragma once
// The filter stage of one pipeline: a resolved change in (source/resolver.h), each event judged
// for this pipeline's target (expiry-semantics.md §6, interface.md §2):
//  - the key space (filters/key_space.h): the `dbs` map, include_keys / exclude_keys;
//  - drop_expirations, drop_deletions, strip_ttl (E = 0: a snapshot key too, since a snapshot
//    entry is a replicated create), replicate_flush;
//  - counts every event by kind and every filtered event by reason.
//
// It only sets Event::pass / stripped / deadline_ms (and turns a RENAME out of the key space into
// a deletion) on its own copy of the change: the resolved change is shared by every pipeline of
// a fan-out. Not thread-safe; one per pipeline session.

#include <string_view>

#include "common/logging.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/key_space.h"
#include "source/event.h"

namespace xdcr::filters {

class EventFilter {
 public:
  EventFilter(const config::PipelineConfig& pipeline, KeySpaceConstSharedPtr keys,
              PipelineStats& stats)
      : name_(pipeline.name), filters_(pipeline.filters), keys_(std::move(keys)), stats_(stats) {}

  /** Judges every event of `c` (a copy owned by this pipeline). */
  void judge(source::Change& c);

  const KeySpace& keySpace() const { return *keys_; }

 private:
  void judgeKeyEvent(source::Change& c, source::Event& ev);
  /** A command whose keys fall on both sides of the filters cannot be reproduced: say so. */
  void reportSplit(const source::Change& c, std::string_view why);

  std::string name_;
  config::FilterConfig filters_;
  KeySpaceConstSharedPtr keys_;
  PipelineStats& stats_;
  LogRateLimiter flush_log_;
  LogRateLimiter split_log_;
};

}  // namespace xdcr::filters
