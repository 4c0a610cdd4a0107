#include "target/cluster_sink.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/cluster_slot.h"
#include "common/limits.h"
#include "common/redis_conn.h"
#include "common/server_info.h"
#include "source/command_table.h"
#include "target/marker.h"

namespace xdcr::target {

namespace {

bool isOneOf(std::string_view name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (resp::iequals(name, n)) return true;
  }
  return false;
}

/** `text` as a SCAN MATCH pattern that matches it literally. */
std::string globLiteral(std::string_view text) {
  std::string pattern;
  for (char ch : text) {
    if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') pattern.push_back('\\');
    pattern.push_back(ch);
  }
  return pattern;
}

}  // namespace

ClusterSink::ClusterSink(net::any_io_executor ex, const config::PipelineConfig& pipeline,
                         const std::string& instance, const config::ClusterConfig& target_cluster,
                         filters::KeySpaceConstSharedPtr keys, const MaxTtlPolicy& policy,
                         const clock::ClusterClock& target_clock, const clock::Clock& clock,
                         const Limits& limits, PipelineStats& stats)
    : label_(fmt::format("pipeline {}: target {} (Redis Cluster)", instance, target_cluster.name)),
      pipeline_(pipeline),
      target_cluster_(target_cluster),
      limits_(limits),
      stats_(stats),
      filter_(pipeline, std::move(keys), stats),
      applier_(policy, filter_.keySpace(), target_clock, stats),
      target_(ex, target_cluster, label_, stats, clock),
      marker_prefix_(markerKey(instance) + ":"),
      stamp_prefix_(appliedStampKey(instance) + ":"),
      slot_skip_(cluster::kSlots, 0),
      target_clock_(target_clock),
      book_(label_, stats),
      record_prefix_(marker_prefix_ + "restored:"),
      clock_(clock) {
  applier_.setCopyWatch(true, limits.copy_guard_margin_ms, limits.copy_late_horizon_ms);
}

std::string ClusterSink::recordKeyFor(std::string_view key) const {
  return fmt::format("{}{{{}}}", record_prefix_, cluster::slotTag(cluster::keySlot(key)));
}

std::string ClusterSink::markerKeyFor(size_t m) const {
  const int slot = target_.slotMap().lowestSlot(m);
  return fmt::format("{}{{{}}}", marker_prefix_, cluster::slotTag(std::max(slot, 0)));
}

net::awaitable<Result<std::vector<std::pair<std::string, std::string>>>> ClusterSink::scanMarkers(
    RedisConnection& conn, const std::vector<std::string>& accepted, bool first_only) {
  constexpr auto kTimeout = std::chrono::seconds(10);
  std::vector<std::pair<std::string, std::string>> found;
  auto keys = co_await scanKeys(conn, globLiteral(marker_prefix_) + "{*}");
  if (!keys) {
    if (keys.error().kind == Error::Kind::Refused) co_return found;  // SCAN refused: none found
    co_return fail(keys.error());
  }
  for (const std::string& key : *keys) {
    const std::vector<std::vector<std::string>> get = {{"GET", key}};
    auto g = co_await conn.callMany(get, kTimeout);
    if (!g) co_return fail(g.error());
    if ((*g)[0].type == resp::ReplyType::Bulk &&
        std::find(accepted.begin(), accepted.end(), (*g)[0].str) != accepted.end()) {
      found.emplace_back(key, (*g)[0].str);
      if (first_only) co_return found;
    }
  }
  co_return found;
}

net::awaitable<Result<std::optional<std::string>>> ClusterSink::findMarker(
    RedisConnection& conn, const RedisEndpoint& endpoint,
    const std::vector<std::string>& accepted) {
  auto found = co_await scanMarkers(conn, accepted, true);
  if (!found) co_return fail(found.error());
  if (found->empty()) co_return std::optional<std::string>();
  const auto& [key, token] = found->front();
  spdlog::info("{}: the marker of {} is {} (its lowest slot changed since it was written)", label_,
               endpoint.address(), key);
  last_markers_.emplace_back(key, token);
  co_return std::optional<std::string>(token);
}

net::awaitable<Status> ClusterSink::readUnmarked(const std::vector<std::string>& accepted,
                                                 const std::vector<bool>& marked,
                                                 MarkerState& state) {
  constexpr auto kTimeout = std::chrono::seconds(10);
  const SlotMap& map = target_.slotMap();
  for (size_t m = 0; m < map.masters().size(); ++m) {
    const ClusterNode& node = map.masters()[m];
    RedisConnection conn(co_await net::this_coro::executor,
                         fmt::format("{} node {} marker search", label_, node.address()));
    if (Status s =
            co_await conn.connect(target_cluster_.endpointAt(node.host, node.port), kTimeout);
        !s) {
      co_return s;
    }
    auto keys = co_await scanMarkers(conn, accepted, false);
    if (!keys) co_return fail(keys.error());
    for (const auto& [key, token] : *keys) ++state.marker_keys_by_token[token];
    if (marked[m]) continue;
    const std::vector<std::vector<std::string>> info = {{"INFO", "server"},
                                                        {"INFO", "replication"}};
    auto r = co_await conn.callMany(info, kTimeout);
    if (!r) co_return fail(r.error());
    UnmarkedMaster u;
    u.address = node.address();
    if ((*r)[0].type == resp::ReplyType::Bulk) {
      const std::string_view up = infoField((*r)[0].str, "uptime_in_seconds");
      int64_t seconds = -1;
      if (std::from_chars(up.data(), up.data() + up.size(), seconds).ec == std::errc() &&
          seconds >= 0) {
        u.uptime_ms = seconds * 1000;
      }
    }
    // Unknown (an error reply, a field missing): counted as promoted, so not trusted.
    u.promoted = (*r)[1].type != resp::ReplyType::Bulk ||
                 infoField((*r)[1].str, "second_repl_offset") != "-1";
    state.unmarked.push_back(std::move(u));
    conn.close();
  }
  co_return Status{};
}

net::awaitable<Result<std::vector<std::string>>> ClusterSink::scanKeys(RedisConnection& conn,
                                                                       const std::string& pattern) {
  constexpr auto kTimeout = std::chrono::seconds(10);
  constexpr int kMaxPages = 256;  // x COUNT 1000: about 256,000 keys looked at, at most
  std::vector<std::string> keys;
  std::string cursor = "0";
  for (int page = 0; page < kMaxPages; ++page) {
    const std::vector<std::vector<std::string>> scan = {
        {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}};
    auto r = co_await conn.callMany(scan, kTimeout);
    if (!r) co_return fail(r.error());
    const resp::Value& v = (*r)[0];
    if (v.isError()) co_return fail(Error::refused(v.str));
    if (v.type != resp::ReplyType::Array || v.elements.size() != 2) break;
    for (const auto& key : v.elements[1].elements) keys.push_back(key.str);
    cursor = v.elements[0].str;
    if (cursor == "0") break;
  }
  co_return keys;
}

net::awaitable<Status> ClusterSink::readRecords(RedisConnection& conn, int probe_slot) {
  constexpr auto kTimeout = std::chrono::seconds(10);
  // What the guards and records need: a guard refused inside a MULTI would discard the write
  // it guards (EXECABORT), so without them nothing is watched, as before copies were restored.
  const std::string probe = fmt::format("{}{{{}}}", record_prefix_, cluster::slotTag(probe_slot));
  const std::vector<std::vector<std::string>> check = {
      {"EXISTS", probe}, {"HGETALL", probe}, {"HEXISTS", probe, "-"}};
  auto c = co_await conn.callMany(check, kTimeout);
  if (!c) co_return fail(c.error());
  const std::string pattern = globLiteral(record_prefix_) + "{*}";
  Result<std::vector<std::string>> keys = fail(Error::io("not read"));
  // Without +hexists only the guard of a hash field changed in place (S-11) is off; it matters
  // only where the target keeps field TTLs.
  applier_.setFieldGuards(!(*c)[2].isError());
  if ((*c)[2].isError()) book_.fieldGuardRefused((*c)[2].str, applier_.targetServer().fieldTtls());
  const bool refused = (*c)[0].isError() || (*c)[1].isError();
  if (!refused) keys = co_await scanKeys(conn, pattern);
  if (refused || !keys) {
    applier_.setCopyWatch(false, 0, 0);
    if (!copy_watch_refused_said_) {
      copy_watch_refused_said_ = true;
      spdlog::warn(
          "{}: the target refused {}: copies the target expires before a later source write "
          "reaches them are NOT restored (expiry-semantics.md §12); grant the target's user "
          "+exists +hgetall +scan",
          label_,
          (*c)[0].isError()   ? "EXISTS (" + (*c)[0].str + ")"
          : (*c)[1].isError() ? "HGETALL (" + (*c)[1].str + ")"
                              : "SCAN (" + keys.error().message + ")");
    }
    co_return Status{};
  }
  size_t loaded = 0;
  for (const std::string& key : *keys) {
    const std::vector<std::vector<std::string>> get = {{"HGETALL", key}};
    auto r = co_await conn.callMany(get, kTimeout);
    if (!r) co_return fail(r.error());
    const resp::Value& rec = (*r)[0];
    if (rec.type != resp::ReplyType::Array) continue;
    for (size_t i = 0; i + 1 < rec.elements.size(); i += 2) {
      uint64_t until = 0;
      const std::string& v = rec.elements[i + 1].str;
      if (std::from_chars(v.data(), v.data() + v.size(), until).ec != std::errc()) continue;
      loaded += book_.loadRecord(key, rec.elements[i].str, until) ? 1 : 0;
    }
  }
  if (loaded > 0) {
    spdlog::info(
        "{}: {} restored copies on record on {}: their writes up to each one's read are not "
        "replayed",
        label_, loaded, conn.label());
  }
  co_return Status{};
}

net::awaitable<Result<MarkerState>> ClusterSink::readMarkers(
    const std::vector<std::string>& accepted) {
  constexpr auto kTimeout = std::chrono::seconds(10);
  MarkerState state;
  last_markers_.clear();
  book_.beginSession();
  const SlotMap& map = target_.slotMap();
  std::vector<bool> marked;  // per master: an accepted marker found on it
  for (size_t m = 0; m < map.masters().size(); ++m) {
    const ClusterNode& node = map.masters()[m];
    RedisConnection conn(co_await net::this_coro::executor,
                         fmt::format("{} node {} marker check", label_, node.address()));
    const RedisEndpoint endpoint = target_cluster_.endpointAt(node.host, node.port);
    if (Status s = co_await conn.connect(endpoint, kTimeout); !s) {
      co_return fail(s.error());
    }
    // The master's marker, then the replay stamp of every slot it owns (one pipelined batch).
    std::vector<std::vector<std::string>> cmds;
    const std::string marker = markerKeyFor(m);
    cmds.push_back({"GET", marker});
    std::vector<int> slots;
    for (int s = 0; s < cluster::kSlots; ++s) {
      if (map.ownerOf(s) != static_cast<int>(m)) continue;
      slots.push_back(s);
      cmds.push_back({"GET", fmt::format("{}{{{}}}", stamp_prefix_, cluster::slotTag(s))});
    }
    auto r = co_await conn.callMany(cmds, kTimeout);
    if (!r) co_return fail(r.error());
    const resp::Value& v = (*r)[0];
    if (v.isError() && parseRedirection(v.str)) {
      // The slot map changed since connect() read it (a reshard under way): the session is
      // retried, on a fresh map.
      co_return fail(Error::io(fmt::format(
          "pipeline {}: the slot map of target {} changed while the markers were read ({} "
          "answered \"{}\"); retrying on a fresh map",
          pipeline_.name, target_cluster_.name, node.address(), v.str)));
    }
    if (v.isError()) {
      co_return fail(Error::refused(fmt::format(
          "pipeline {}: cannot read the marker key {} on {} of target {}: {}; the agent's user "
          "needs read and write access to it",
          pipeline_.name, marker, node.address(), target_cluster_.name, v.str)));
    }
    std::optional<std::string> value;
    if (!v.isNull()) value = v.str;
    // What the key holds, for the next marker write's check (SET ... GET must find it there).
    last_markers_.emplace_back(marker, value);
    const bool accepted_here =
        value && std::find(accepted.begin(), accepted.end(), *value) != accepted.end();
    if (!accepted_here && !accepted.empty()) {
      // After a reshard of the target the master's lowest slot may have changed since the last
      // checkpoint wrote its marker (or the marker was written into another of its slots, see
      // ClusterTarget): look for this pipeline's marker with an accepted token in its other
      // slots (a bounded SCAN; nothing found means the check fails, with what the lowest slot
      // holds).
      auto found = co_await findMarker(conn, endpoint, accepted);
      if (!found) co_return fail(found.error());
      if (*found) value = *found;
    }
    marked.push_back(value &&
                     std::find(accepted.begin(), accepted.end(), *value) != accepted.end());
    state.node_markers.emplace_back(node.address(), value);
    for (size_t i = 0; i < slots.size(); ++i) {
      const resp::Value& st = (*r)[i + 1];
      if (st.type == resp::ReplyType::Bulk) state.slot_stamps.emplace_back(slots[i], st.str);
    }
    if (applier_.watchesCopies()) {
      if (Status s = co_await readRecords(conn, slots.empty() ? 0 : slots.front()); !s) {
        co_return fail(s.error());
      }
    }
    conn.close();
  }
  if (!accepted.empty() && std::find(marked.begin(), marked.end(), false) != marked.end()) {
    // A master without one: what the pipeline needs to tell a marker a reshard carried to
    // another master from a master that lost data (markerMovedAway).
    if (Status s = co_await readUnmarked(accepted, marked, state); !s) co_return fail(s.error());
  }
  co_return state;
}

void ClusterSink::setSlotReplaySkip(std::vector<std::pair<int, uint64_t>> skips) {
  std::fill(slot_skip_.begin(), slot_skip_.end(), 0);
  max_slot_skip_ = 0;
  for (const auto& [slot, offset] : skips) {
    if (slot >= 0 && slot < cluster::kSlots) slot_skip_[static_cast<size_t>(slot)] = offset;
    max_slot_skip_ = std::max(max_slot_skip_, offset);
  }
}

bool ClusterSink::overLimits(bool snapshot) const {
  const uint64_t max_cmds =
      snapshot ? limits_.snapshot_max_unanswered_commands : limits_.max_unanswered_commands;
  return target_.inflightCommands() > max_cmds ||
         target_.pendingBytes() > limits_.max_unanswered_bytes;
}

net::awaitable<Status> ClusterSink::connect() {
  if (auto s = co_await target_.connect(); !s) co_return s;
  applier_.setTarget(target_.server(), target_.maxBulkLength(), label_);
  logTargetServer(label_, target_.server());
  co_return Status{};
}

void ClusterSink::apply(const source::ResolvedUnit& unit, bool write) {
  scratch_.clear();
  if (unit.snapshot) {
    for (const auto& c : unit.view()) {
      judged_ = c;
      filter_.judge(judged_);
      const source::Event& ev = judged_.events.front();
      if (!ev.pass) {
        ++counts_.filtered;
        continue;
      }
      applier_.beginUnit(false);
      applier_.apply(judged_);
      applier_.finishUnit(scratch_);
      using W = Applier::SnapshotWrite;
      switch (applier_.lastSnapshotWrite()) {
        case W::Expired:
          ++counts_.expired;
          break;
        case W::Restored:
          ++counts_.restored;
          break;
        case W::Rebuilt:
          ++counts_.rebuilt;
          break;
        case W::Failed: {
          ++counts_.failed;
          ++stats_.snapshot_keys_failed;
          ++stats_.target_write_failures["unwritable"];
          uint64_t suppressed = 0;
          if (fail_log_.allow(suppressed)) {
            spdlog::error("{}: snapshot key \"{}\" NOT copied: {}{}", label_, ev.key,
                          applier_.lastSnapshotError(),
                          suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
          }
          break;
        }
      }
    }
    route(unit, write);
    // The whole snapshot stands at the FULLRESYNC offset: acknowledging it moves nothing.
    target_.commitUnit(target_.ackedOffset());
    return;
  }
  book_.passed(unit.offset_end, target_.ackedOffset());
  applier_.beginUnit(unit.transaction, unit.local_ms);
  // Not written, or not in every slot (a slot's stamp covers it; all of its keys are taken:
  // reading back a key whose slot is written too costs a read, nothing else).
  const bool unconfirmed =
      unit.offset_end > unconfirmed_after_ && (!write || unit.offset_end <= max_slot_skip_);
  watchable_.clear();
  for (const auto& c : unit.view()) {
    judged_ = c;  // reuses judged_'s vectors
    filter_.judge(judged_);
    book_.dropRestored(judged_, unit.offset_end);
    if (applier_.watchesCopies()) book_.logMultiKey(judged_, unit.offset_end);
    if (write) applier_.apply(judged_);
    if (unconfirmed) applier_.watchableKeys(judged_, watchable_);
  }
  if (!watchable_.empty()) book_.requestUnconfirmed(watchable_, unit.offset_end);
  if (!unconfirmed) book_.release();  // past the units a stamp covers: read back what they asked
  applier_.finishUnit(scratch_);
  unit_offset_ = unit.offset_end;
  prepareWatches();
  route(unit, write);
  raw_watches_.clear();
  target_.commitUnit(unit.offset_end);
  last_offset_ = unit.offset_end;
}

void ClusterSink::prepareWatches() {
  unit_watches_.clear();
  raw_watches_.clear();
  next_watch_ = 0;
  if (applier_.watches().empty()) return;
  unit_watches_.swap(applier_.watches());
  // Where each MULTI of the unit's commands is, for the watches on an element of its EXEC.
  std::string_view data = scratch_;
  size_t pos = 0, raw = 0, last_multi = 0;
  std::vector<size_t> opened;  // per command index: the MULTI an EXEC closes
  while (pos < data.size()) {
    auto pr = resp::parseCommand(data.substr(pos), spans_);
    if (pr.status != resp::ParseStatus::Complete) break;  // (route() reports it)
    const std::string_view raw_cmd = data.substr(pos, pr.consumed);
    const std::string_view name = raw_cmd.substr(spans_[0].pos, spans_[0].len);
    if (resp::iequals(name, "multi")) last_multi = raw;
    opened.push_back(last_multi);
    pos += pr.consumed;
    ++raw;
  }
  for (size_t i = 0; i < unit_watches_.size(); ++i) {
    const Applier::Watch& w = unit_watches_[i];
    if (w.reply >= opened.size()) continue;
    const size_t at =
        w.element < 0 ? w.reply : opened[w.reply] + 1 + static_cast<size_t>(w.element);
    raw_watches_.emplace_back(at, i);
  }
  std::sort(raw_watches_.begin(), raw_watches_.end());
}

std::shared_ptr<ClusterTarget::PartWatch> ClusterSink::sliceWatch(const Slice& s, bool wrapped,
                                                                  size_t commands) {
  if (s.watched.empty() && !restoring_) return nullptr;
  auto pw = std::make_shared<ClusterTarget::PartWatch>();
  const auto exec = static_cast<uint32_t>(commands - 1);
  if (restoring_) {
    // The restored copy's MULTI/EXEC: an error in it (the target refused the RESTORE) is no
    // restore.
    pw->replies.push_back(exec);
    pw->done = [this, key = restore_key_, reason = restore_reason_,
                at = restore_write_offset_](const std::vector<resp::ReplyInfo>& got) {
      book_.landed(at);
      if (got.empty() || (!got.front().has_error && got.front().type != resp::ReplyType::Error)) {
        return;
      }
      --book_.restoredCounter(reason);
      book_.unrecoverable(key, "the target refused it: " + got.front().text);
    };
    return pw;
  }
  struct Judged {
    uint32_t reply;
    int element;
    Applier::Watch w;
  };
  std::vector<Judged> judged;
  for (const auto& [at, w] : s.watched) {
    Judged j{wrapped ? exec : at, wrapped ? static_cast<int>(at) : -1, unit_watches_[w]};
    j.w.element = -1;
    judged.push_back(std::move(j));
    if (std::find(pw->replies.begin(), pw->replies.end(), judged.back().reply) ==
        pw->replies.end()) {
      pw->replies.push_back(judged.back().reply);
    }
  }
  std::sort(pw->replies.begin(), pw->replies.end());
  pw->done = [this, judged = std::move(judged), replies = pw->replies,
              offset = unit_offset_](const std::vector<resp::ReplyInfo>& got) {
    for (const Judged& j : judged) {
      const size_t k = static_cast<size_t>(
          std::lower_bound(replies.begin(), replies.end(), j.reply) - replies.begin());
      if (k >= got.size()) continue;
      const resp::ReplyInfo& r = got[k];
      resp::ReplyType type = r.type;
      // An array (HPEXPIREAT's codes) is judged by its least integer element.
      int64_t integer = r.type == resp::ReplyType::Array ? r.least : r.integer;
      if (j.element >= 0) {
        // An element of an EXEC's array; an EXEC that did not run ran none of its writes.
        if (r.type != resp::ReplyType::Array || static_cast<size_t>(j.element) >= r.items.size()) {
          continue;
        }
        const resp::ReplyInfo::Item& item = r.items[static_cast<size_t>(j.element)];
        type = item.type;
        integer = item.type == resp::ReplyType::Array ? item.least : item.integer;
      }
      book_.onWatched(j.w, offset, type, integer, r.text, target_clock_.nowMs());
    }
  };
  return pw;
}

ClusterSink::Slice& ClusterSink::slice(int slot) {
  for (size_t i = 0; i < used_slices_; ++i) {
    if (slices_[i].slot == slot) return slices_[i];
  }
  if (used_slices_ == slices_.size()) slices_.emplace_back();
  Slice& s = slices_[used_slices_++];
  s.slot = slot;
  s.bytes.clear();
  s.commands = 0;
  s.unsafe = false;
  s.first_key = std::string_view();
  s.multi_key = false;
  s.watched.clear();
  return s;
}

void ClusterSink::addCommand(std::string_view raw, const std::vector<std::string_view>& args) {
  const std::string_view name = args[0];
  const source::CommandSpec* spec = source::lookupCommand(name);
  key_pos_.clear();
  if (spec != nullptr) {
    source::keyPositions(*spec, args.data(), args.size(), key_pos_);
  } else if (resp::iequals(name, "exists")) {
    // A copy's guard (expiry-semantics.md §12), a read the write-command table does not know:
    // it must stay with the write it guards, in that key's slot and MULTI.
    for (size_t i = 1; i < args.size(); ++i) key_pos_.push_back(static_cast<uint16_t>(i));
  } else if (resp::iequals(name, "hexists") && args.size() > 1) {
    key_pos_.push_back(1);  // a field's guard (S-11): HEXISTS key field
  }
  const bool unsafe = source::isReplayUnsafe(spec);
  if (key_pos_.empty()) {
    const int where =
        isOneOf(name, {"flushall", "flushdb", "function", "script"}) ? kBroadcast : kAnyNode;
    Slice& s = slice(where);
    s.bytes.append(raw);
    ++s.commands;
    s.unsafe = s.unsafe || unsafe;
    return;
  }
  const int first = cluster::keySlot(args[key_pos_[0]]);
  bool one_slot = true;
  for (uint16_t p : key_pos_) one_slot = one_slot && cluster::keySlot(args[p]) == first;
  if (one_slot) {
    Slice& s = slice(first);
    while (next_watch_ < raw_watches_.size() && raw_watches_[next_watch_].first < raw_index_) {
      ++next_watch_;  // on a command not written here (another db, split): not watched
    }
    while (next_watch_ < raw_watches_.size() && raw_watches_[next_watch_].first == raw_index_) {
      s.watched.emplace_back(static_cast<uint32_t>(s.commands), raw_watches_[next_watch_++].second);
    }
    s.bytes.append(raw);
    ++s.commands;
    s.unsafe = s.unsafe || unsafe;
    for (uint16_t p : key_pos_) s.noteKey(args[p]);
    return;
  }
  // Keys in several slots: split what can be split, per slot, keeping the keys' order.
  const bool del = isOneOf(name, {"del", "unlink"});
  const bool mset = isOneOf(name, {"mset", "msetnx"});
  if (!del && !mset) {
    ++stats_.target_write_failures["cross_slot"];
    uint64_t suppressed = 0;
    if (fail_log_.allow(suppressed)) {
      spdlog::error(
          "{}: {} on keys of different slots (\"{}\" and more) cannot run on a Redis Cluster "
          "target: NOT written (counted in xdcr_target_write_failures_total{{reason="
          "\"cross_slot\"}}); give the keys one hash tag on the source, or a key_rewrite that "
          "keeps them in one slot{}",
          label_, name, args[key_pos_[0]],
          suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
    }
    return;
  }
  split_ = true;
  std::vector<int> done;
  for (uint16_t p : key_pos_) {
    const int slot = cluster::keySlot(args[p]);
    if (std::find(done.begin(), done.end(), slot) != done.end()) continue;
    done.push_back(slot);
    size_t n = 0;
    for (uint16_t q : key_pos_) n += cluster::keySlot(args[q]) == slot ? 1 : 0;
    reencoded_.clear();
    resp::appendArrayHeader(reencoded_, 1 + n * (mset ? 2 : 1));
    resp::appendBulk(reencoded_, del ? std::string_view(name) : std::string_view("MSET"));
    for (uint16_t q : key_pos_) {
      if (cluster::keySlot(args[q]) != slot) continue;
      resp::appendBulk(reencoded_, args[q]);
      if (mset) resp::appendBulk(reencoded_, args[q + 1]);
    }
    Slice& s = slice(slot);
    s.bytes.append(reencoded_);
    ++s.commands;
    for (uint16_t q : key_pos_) {
      if (cluster::keySlot(args[q]) == slot) s.noteKey(args[q]);
    }
  }
}

void ClusterSink::flushGroup(const source::ResolvedUnit& unit, bool write, bool transaction) {
  size_t keyed = 0;
  for (size_t i = 0; i < used_slices_; ++i) keyed += slices_[i].slot >= 0 ? 1 : 0;
  if ((transaction && keyed > 1) || split_) ++stats_.cross_slot_splits;
  split_ = false;
  for (size_t i = 0; i < used_slices_ && write; ++i) {
    Slice& s = slices_[i];
    if (s.commands == 0) continue;
    const bool stamped = s.unsafe && s.slot >= 0 && !unit.snapshot && !unit.replid.empty();
    if (s.slot >= 0 && !unit.snapshot && !restoring_ &&
        unit.offset_end <= slot_skip_[static_cast<size_t>(s.slot)]) {
      // The target applied it before the restart: the slot's replay stamp is at or past it, and
      // a slot's writes reach its master in order, so everything of that slot up to the stamp
      // was applied — idempotent writes too (sending those again would put them after the
      // replay-unsafe ones they preceded).
      continue;
    }
    const bool wrap = stamped || (transaction && s.commands > 1);
    std::string_view bytes = s.bytes;
    size_t commands = s.commands;
    if (wrap) {
      reencoded_.clear();
      resp::appendCommand(reencoded_, {"MULTI"});
      reencoded_.append(s.bytes);
      if (stamped) {
        resp::appendCommand(
            reencoded_, {"SET", fmt::format("{}{{{}}}", stamp_prefix_, cluster::slotTag(s.slot)),
                         fmt::format("{}:{}", unit.replid, unit.offset_end)});
        ++commands;
      }
      resp::appendCommand(reencoded_, {"EXEC"});
      commands += 2;
      bytes = reencoded_;
    }
    if (s.slot >= 0) {
      // A stamped MULTI writes its stamp key too.
      target_.appendToSlot(s.slot, bytes, commands, stamped || s.multi_key, std::nullopt,
                           sliceWatch(s, wrap, commands));
    } else if (s.slot == kBroadcast) {
      for (size_t m = 0; m < target_.slotMap().masters().size(); ++m) {
        target_.appendToNode(m, bytes, commands);
      }
    } else {
      target_.appendToNode(0, bytes, commands);
    }
  }
  used_slices_ = 0;
}

void ClusterSink::route(const source::ResolvedUnit& unit, bool write) {
  std::string_view data = scratch_;
  size_t pos = 0;
  bool in_multi = false;
  used_slices_ = 0;
  raw_index_ = 0;
  for (; pos < data.size(); ++raw_index_) {
    auto pr = resp::parseCommand(data.substr(pos), spans_);
    if (pr.status != resp::ParseStatus::Complete) {
      // The applier's own output: cannot happen unless the applier is broken.
      spdlog::critical("{}: internal error: cannot parse the applier's output at byte {}: {}",
                       label_, pos, pr.error);
      std::abort();
    }
    const std::string_view raw = data.substr(pos, pr.consumed);
    args_.clear();
    for (const auto& a : spans_) args_.push_back(raw.substr(a.pos, a.len));
    pos += pr.consumed;
    const std::string_view name = args_[0];
    if (resp::iequals(name, "select")) {
      // A cluster has db 0 only: what the key space maps to another db cannot be written
      // (validation warns about a pipeline without a dbs map into a cluster).
      selected_db_ = args_.size() > 1 && args_[1] == "0" ? 0 : 1;
      continue;
    }
    if (selected_db_ != 0 && !resp::iequals(name, "multi") && !resp::iequals(name, "exec")) {
      ++stats_.target_write_failures["db"];
      uint64_t suppressed = 0;
      if (fail_log_.allow(suppressed)) {
        spdlog::error(
            "{}: a write into a db other than 0 cannot go to a Redis Cluster target: NOT written "
            "(counted in xdcr_target_write_failures_total{{reason=\"db\"}}); map that source db "
            "to 0 in the pipeline's dbs{}",
            label_, suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
      }
      continue;
    }
    if (resp::iequals(name, "multi")) {
      in_multi = true;
      continue;
    }
    if (resp::iequals(name, "exec")) {
      flushGroup(unit, write, true);
      in_multi = false;
      continue;
    }
    addCommand(raw, args_);
    if (!in_multi) flushGroup(unit, write, false);
  }
  if (used_slices_ > 0) flushGroup(unit, write, in_multi);
}

void ClusterSink::appendMarker(std::string_view token, uint64_t offset) {
  const SlotMap& map = target_.slotMap();
  // A new marker: the previous one's WAITs no longer hold anything (its checkpoint was written
  // or given up: the link begins a marker only then).
  ++marker_epoch_;
  marker_waits_open_ = 0;
  marker_since_ = clock_.monotonicNow();
  // Records of restored copies a durable checkpoint has passed (CopyRepairBook::prunable).
  for (const auto& [record_key, fields] : book_.prunable(offset)) {
    std::vector<std::string_view> args{"HDEL", record_key};
    for (const std::string& f : fields) args.push_back(f);
    reencoded_.clear();
    resp::appendCommand(reencoded_, args);
    target_.appendToSlot(cluster::keySlot(record_key), reencoded_, 1);
  }
  own_tokens_.emplace_back(token);
  if (own_tokens_.size() > 4) own_tokens_.erase(own_tokens_.begin());
  for (size_t m = 0; m < map.masters().size(); ++m) {
    const std::string key = markerKeyFor(m);
    auto it = std::find_if(last_markers_.begin(), last_markers_.end(),
                           [&](const auto& e) { return e.first == key; });
    std::optional<std::string> previous;
    if (it != last_markers_.end()) previous = it->second;
    reencoded_.clear();
    resp::appendCommand(reencoded_, {"SET", key, token, "GET"});
    // The previous value must be what this agent left: anything else is another writer of this
    // pipeline's markers (a second agent replicating the same pipeline into this target). A key
    // this sink has not read (a master that took the slot after a reshard) may hold nothing or
    // one of this agent's own tokens.
    ClusterTarget::Expect expect;
    expect.value = previous;
    expect.on_mismatch =
        [this, key, ours = std::string(token)](const std::optional<std::string>& found) -> Status {
      if (!found ||
          std::find(own_tokens_.begin(), own_tokens_.end(), *found) != own_tokens_.end()) {
        return Status{};
      }
      const std::string what = fmt::format(
          "pipeline {}: another writer replaced this pipeline's marker {} on target {} since "
          "this agent last wrote it (found \"{}\"): two agents (or two pipelines of this name) "
          "replicate into the same target",
          pipeline_.name, key, target_cluster_.name, *found);
      if (markerWriterIsNewer(*found, ours)) {
        uint64_t suppressed = 0;
        if (conflict_log_.allow(suppressed)) {
          spdlog::error("{}; the one that started later stops, this one goes on", what);
        }
        return Status{};
      }
      return fail(Error::conflict(what + "; this agent started later, so this pipeline stops — "
                                         "stop the other writer first, then restart this agent"));
    };
    auto rebind = [key_prefix = marker_prefix_, token = std::string(token)](int slot) {
      std::string bytes;
      resp::appendCommand(
          bytes,
          {"SET", fmt::format("{}{{{}}}", key_prefix, cluster::slotTag(slot)), token, "GET"});
      return bytes;
    };
    target_.appendMarkerPart(m, map.lowestSlot(m), reencoded_, std::move(expect),
                             std::move(rebind));
    // The checkpoint counts once a replica of each master has it too (WAIT 1), so a failover
    // to that replica keeps everything the checkpoint covers and the next session replays from
    // it rather than resyncing. A WAIT answered 0 (the replica lags: under load, more than
    // kMarkerReplicaWait) is sent again and the checkpoint held (markerSettled); a master whose
    // replica does not catch up within kMarkerReplicaPatience (gone, or far behind) lets the
    // checkpoint count without it, with a warning (the marker check then decides).
    if (map.masters()[m].replicas > 0) {
      ++marker_waits_open_;
      appendMarkerWait(map.lowestSlot(m), map.masters()[m].address());
    }
    if (it != last_markers_.end()) {
      it->second = std::string(token);
    } else {
      last_markers_.emplace_back(key, std::string(token));
    }
  }
  target_.commitUnit(offset);
  last_offset_ = std::max(last_offset_, offset);
}

void ClusterSink::appendMarkerWait(int slot, const std::string& master) {
  reencoded_.clear();
  const std::string wait_ms = std::to_string(cluster_limits::kMarkerReplicaWait.count());
  resp::appendCommand(reencoded_, {"WAIT", "1", wait_ms});
  auto pw = std::make_shared<ClusterTarget::PartWatch>();
  pw->replies.push_back(0);
  pw->done = [this, slot, master, epoch = marker_epoch_](const std::vector<resp::ReplyInfo>& got) {
    if (!got.empty()) onMarkerWait(slot, master, epoch, got.front());
  };
  target_.appendToSlot(slot, reencoded_, 1, false, std::nullopt, std::move(pw));
}

void ClusterSink::onMarkerWait(int slot, const std::string& master, uint64_t epoch,
                               const resp::ReplyInfo& reply) {
  if (epoch != marker_epoch_ || marker_waits_open_ == 0) return;  // an older marker's
  if (reply.type != resp::ReplyType::Integer) {
    // Refused by the ACL: nothing to wait for (the checkpoint counts, as without replicas).
    // Any other error (a master that became a replica answers WAIT with one): what it holds is
    // no proof of anything; the checkpoint waits, and the session ends on the failover.
    const bool noperm = reply.text.rfind("NOPERM", 0) == 0;
    uint64_t suppressed = 0;
    if (wait_log_.allow(suppressed)) {
      spdlog::warn("{}: WAIT after the checkpoint's marker on master {} answered \"{}\"; {}{}",
                   label_, master, reply.text,
                   noperm ? "the checkpoint counts without a replica (grant +wait to the "
                            "target's user)"
                          : "the checkpoint waits",
                   suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
    }
    if (noperm) --marker_waits_open_;
    return;
  }
  const bool caught_up = reply.integer >= 1;
  const auto waited = clock_.monotonicNow() - marker_since_;
  const auto given_up = std::find(wait_given_up_.begin(), wait_given_up_.end(), master);
  const bool was_given_up = given_up != wait_given_up_.end();
  if (caught_up && was_given_up) wait_given_up_.erase(given_up);
  if (caught_up || was_given_up) {
    --marker_waits_open_;
    return;
  }
  if (waited >= cluster_limits::kMarkerReplicaPatience) {
    uint64_t suppressed = 0;
    if (wait_log_.allow(suppressed)) {
      spdlog::warn(
          "{}: no replica of master {} acknowledged the checkpoint's marker within {} s: the "
          "checkpoint counts without it, and later ones do not wait for it until it catches up "
          "(a failover to that replica now would cost a full resync){}",
          label_, master, std::chrono::duration_cast<std::chrono::seconds>(waited).count(),
          suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
    }
    wait_given_up_.push_back(master);
    --marker_waits_open_;
    return;
  }
  // The replica lags: ask again, behind what was sent since (the checkpoint waits meanwhile).
  appendMarkerWait(slot, master);
  target_.commitUnit(last_offset_);
}

void ClusterSink::restoreCopies(const source::DocumentRead& read) {
  for (const auto& [key, why] : read.unreadable) {
    if (book_.claim(key)) book_.unrecoverable(key, why);
  }
  source::RdbPayload payload;
  source::ResolvedUnit unit;  // routed as one transaction, after everything appended so far
  unit.transaction = true;
  unit.offset_end = last_offset_;
  for (const source::SourceDocument& doc : read.docs) {
    const source::DocumentKey key{doc.db, doc.key};
    const std::optional<CopyRepairBook::Asked> asked = book_.claim(key);
    if (!asked) continue;  // another pipeline's
    documentAsSnapshotKey(doc, payload, judged_);
    const source::Event& ev = judged_.events.front();
    filter_.judge(judged_);
    if (!ev.pass) continue;  // outside the key space now (a reload changed it)
    // The record in the key's own slot (after key_rewrite: the slot it is written to).
    const std::string_view target_key = ev.key;
    const std::string record_key = recordKeyFor(target_key);
    scratch_.clear();
    applier_.beginUnit(true);
    if (!applier_.appendRestoredCopy(judged_, doc.exists, record_key, read.offset)) {
      // Not writable to this target (a value it cannot take): its writes go on as they come.
      book_.unrecoverable(key, applier_.lastSnapshotError());
      continue;
    }
    applier_.finishUnit(scratch_);
    applier_.watches().clear();
    restoring_ = true;
    restore_key_ = key;
    restore_reason_ = asked->reason;
    restore_write_offset_ = asked->write_offset;
    book_.sent(asked->write_offset);
    route(unit, true);
    restoring_ = false;
    target_.commitUnit(last_offset_);
    book_.restored(doc.db, doc.key, read.offset, record_key, *asked, target_clock_.nowMs(),
                   doc.exists);
    ++book_.restoredCounter(asked->reason);
  }
}

Status ClusterSink::beginSnapshot(bool /*record_keys*/) {
  counts_ = SnapshotCounts{};
  // A new history: the offsets of restored copies' records mean nothing in it (the snapshot
  // writes every key whole). The record keys this sink knows of are deleted.
  const std::vector<std::string> records = book_.recordKeys();
  for (const std::string& record_key : records) {
    reencoded_.clear();
    resp::appendCommand(reencoded_, {"DEL", record_key});
    target_.appendToSlot(cluster::keySlot(record_key), reencoded_, 1);
  }
  if (!records.empty()) target_.commitUnit(target_.ackedOffset());
  book_.clear();
  if (FirstSeenStore* fs = applier_.firstSeenStore()) fs->beginSweep();
  std::fill(slot_skip_.begin(), slot_skip_.end(), 0);
  max_slot_skip_ = 0;
  return Status{};
}

net::awaitable<Result<uint64_t>> ClusterSink::deleteStaleKeys(uint64_t /*offset*/) {
  if (!pipeline_.delete_stale_keys) co_return uint64_t{0};
  co_return fail(Error::refused(fmt::format(
      "pipeline {}: full_sync.delete_stale_keys is not supported on a Redis Cluster target yet; "
      "remove it from the pipeline",
      pipeline_.name)));
}

}  // namespace xdcr::target
