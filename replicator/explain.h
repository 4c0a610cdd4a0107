#pragma once
// `xdcr-agent explain -c FILE -p PIPELINE KEY` (interface.md §6.4): a dry run of what the pipeline
// does with one key, and why the target holds what it holds (issue 18, finding 7: nothing told an
// operator why a given key is not on the target).
//
// It reads the key on the source (TYPE, PEXPIRETIME, OBJECT IDLETIME, with CLIENT NO-TOUCH where
// the server has it, so that the dry run leaves the key's idle time as it was; a Redis Cluster
// source is routed by the key's slot) and on the target, and judges it with the agent's own code:
//  1. the pipeline's key space (filters::KeySpace::judgeKey: the dbs map, the source's slots,
//     include_keys, exclude_keys — the rule that excludes it is named) and its event filter
//     (filters::EventFilter: the key as a full sync or a create writes it; strip_ttl);
//  2. the target db and key (dbs, key_rewrite) and the bucket and collection of the target key
//     (target::MaxTtlPolicy: its effective max_ttl);
//  3. the deadline written now (target::clampDeadline, expiry-semantics.md §4, in the target's
//     clock, after the §7 compensation the running agent applies or, without one, the one
//     verify would expect); expired on arrival when it has passed;
//     under a collection policy beside max_ttl, target::decide on the source's value (the
//     field read is printed) and max_lifetime's first-seen record (read-only), as verify;
//  4. what the target holds and whether the rules allow it (verify::DeadlineRules::allows); if
//     the key is absent, the likely reasons in order: filtered, expired by its clamped deadline
//     (verify::judgeAbsence: the source key's idle time and the last full sync), the pipeline
//     paused or behind (the running agent's /status, through agent.admin_listen), not yet
//     replicated.
// Nothing is written anywhere.

#include <chrono>
#include <string>

#include "config/config.h"

namespace xdcr::replicator {

struct ExplainOptions {
  std::string pipeline;
  std::string key;
  int db = 0;  // the source db the key is in
  std::chrono::milliseconds ttl_tolerance{1000};
  bool json = false;  // one JSON object on stdout
};

/** Exit status: 0 explained; 2 a cluster cannot be reached, or the target is memcached (not
 *  supported: use verify); 78 no such pipeline. */
int runExplain(const config::ConfigConstSharedPtr& config, const ExplainOptions& options);

}  // namespace xdcr::replicator
