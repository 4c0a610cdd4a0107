#include "replicator/verify_routing.h"

#include <algorithm>

#include "common/cluster_slot.h"

namespace xdcr::replicator {

std::vector<NodeGroup> groupByNode(const target::SlotMap& map, const std::vector<std::string>& keys,
                                   const std::vector<size_t>& pending,
                                   const std::vector<std::optional<config::NodeAddress>>& ask_to,
                                   std::vector<size_t>& unowned) {
  // One group per master first (in the map's order), so that a node's commands keep batch order.
  std::vector<NodeGroup> groups(map.masters().size());
  for (size_t m = 0; m < groups.size(); ++m) {
    groups[m].node = {map.masters()[m].host, map.masters()[m].port};
  }
  for (size_t i : pending) {
    if (i < ask_to.size() && ask_to[i]) {
      const config::NodeAddress& to = *ask_to[i];
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const NodeGroup& g) { return g.node == to; });
      if (it == groups.end()) {
        groups.push_back({to, {}});
        it = groups.end() - 1;
      }
      it->commands.push_back({i, true});
      continue;
    }
    const int owner = map.ownerOf(cluster::keySlot(keys[i]));
    if (owner < 0) {
      unowned.push_back(i);
      continue;
    }
    groups[static_cast<size_t>(owner)].commands.push_back({i, false});
  }
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [](const NodeGroup& g) { return g.commands.empty(); }),
               groups.end());
  return groups;
}

ReplyKind classifyReply(const resp::Value& reply, target::Redirection* where) {
  if (!reply.isError()) return ReplyKind::Answer;
  if (auto r = target::parseRedirection(reply.str)) {
    if (where != nullptr) *where = *r;
    return r->ask ? ReplyKind::Ask : ReplyKind::Moved;
  }
  const std::string_view text = reply.str;
  const std::string_view kind = text.substr(0, text.find(' '));
  if (kind == "TRYAGAIN" || kind == "CLUSTERDOWN") return ReplyKind::Busy;
  return ReplyKind::Answer;
}

RetryDecision decideRetry(const RoundOutcome& outcome, int round) {
  RetryDecision d;
  if (outcome.unanswered() == 0) return d;
  if (round + 1 >= kMaxRounds) {
    d.action = RetryDecision::Action::GiveUp;
    return d;
  }
  d.action = RetryDecision::Action::Retry;
  d.reload_map = outcome.moved > 0;
  if (outcome.busy > 0 || (outcome.moved > 0 && round > 0)) {
    d.pause = std::min(std::chrono::milliseconds(50 << std::min(round, 5)),
                       std::chrono::milliseconds(1000));
  }
  return d;
}

}  // namespace xdcr::replicator
