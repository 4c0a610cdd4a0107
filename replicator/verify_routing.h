#pragma once
// The pure decisions of `xdcr-agent verify` on a Redis Cluster side (replicator/verify_side.h):
// which node each command of a batch goes to, what a reply that is not an answer means (MOVED,
// ASK, TRYAGAIN, CLUSTERDOWN), and what to do after a round of a batch that left some commands
// unanswered. No I/O; tests/replicator/verify_routing_test.cc.
//
// A batch is sent in rounds. Round 0 sends every command to the master that owns its key's slot
// (one pipelined callMany per master). A command answered MOVED (its slot has a new owner: a
// reshard, a failover) is sent again in the next round after the slot map was reloaded, once for
// the whole round; one answered ASK (its key was migrated to an importing node) goes to the node
// ASK named, with ASKING before it; TRYAGAIN or CLUSTERDOWN (the cluster cannot answer for that
// slot just now) after a pause. A reload that still shows the old owner (the node asked had not
// heard of the change yet) is retried after a pause too. After kMaxRounds rounds the batch fails:
// the slots keep moving, and the operator runs verify again once they stop.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/resp_value.h"
#include "config/config.h"
#include "target/cluster_target.h"  // Redirection, parseRedirection
#include "target/slot_map.h"

namespace xdcr::replicator {

/** The commands of one round for one node, as indexes into the batch, in batch order. */
struct NodeGroup {
  config::NodeAddress node;
  struct Routed {
    size_t index = 0;
    bool asking = false;  // ASKING goes before it (the node an ASK named)
  };
  std::vector<Routed> commands;
};

/**
 * Groups the commands `pending` (indexes into `keys`, the key each command is routed by) per
 * node: the node in `ask_to[i]` when it holds one (with ASKING), else the master of `map` that
 * owns the key's slot. Groups come in the order of map's masters, then nodes named only by ASK
 * in the order first seen; a master with nothing to do has no group. The index of a command
 * whose slot no master owns goes to `unowned`. `ask_to` is empty or as long as `keys`.
 */
std::vector<NodeGroup> groupByNode(const target::SlotMap& map, const std::vector<std::string>& keys,
                                   const std::vector<size_t>& pending,
                                   const std::vector<std::optional<config::NodeAddress>>& ask_to,
                                   std::vector<size_t>& unowned);

/** What one reply says about its command. */
enum class ReplyKind {
  Answer,  // the node ran the command (an error reply such as WRONGTYPE is an answer too)
  Moved,   // MOVED: the slot has another owner
  Ask,     // ASK: the key is on the importing node (a slot migration in progress)
  Busy,    // TRYAGAIN, CLUSTERDOWN: the cluster cannot answer for this slot just now
};
/** Classifies `reply`; for MOVED and ASK, `where` (when not null) gets the node named. */
ReplyKind classifyReply(const resp::Value& reply, target::Redirection* where = nullptr);

/** How many commands of a round were not answered, and why. */
struct RoundOutcome {
  size_t moved = 0;
  size_t asked = 0;
  size_t busy = 0;
  size_t unanswered() const { return moved + asked + busy; }
};

inline constexpr int kMaxRounds = 8;

struct RetryDecision {
  enum class Action {
    Done,    // every command was answered
    Retry,   // send the unanswered ones again (after `pause`, having reloaded the map if asked)
    GiveUp,  // kMaxRounds rounds and still not answered: fail the batch
  };
  Action action = Action::Done;
  bool reload_map = false;  // once per round, however many commands were MOVED
  std::chrono::milliseconds pause{0};
};

/**
 * After round `round` (0 = the first sending) ended with `outcome`: done when nothing is
 * unanswered; give up when that was round kMaxRounds - 1; else retry, reloading the slot map
 * when anything was MOVED, and pausing (50 ms doubling per round, at most 1 s) when anything was
 * TRYAGAIN/CLUSTERDOWN or MOVED again after a reload. ASK alone is followed at once.
 */
RetryDecision decideRetry(const RoundOutcome& outcome, int round);

}  // namespace xdcr::replicator
