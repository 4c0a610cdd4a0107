// Folds the JSON of stream_bench (drain, lag, cost, fanout, catchup; and, run with --wan-delay-ms,
// its wan_drain and wan_lag), of cluster_bench and of full_sync_bench into ONE table (stdout) and
// one JSON file: the benchmarks' own results unchanged under "stream", "wan", "cluster" and
// "full_sync", plus the table's rows under "table".
//
//   bench_report [--stream FILE] [--wan FILE] [--cluster FILE] [--full-sync FILE] [--json OUT]
//
// --wan: stream_bench's output of a run across a WAN proxy (wan_drain, wan_lag); without it the
// WAN rows come from the --stream file when that holds them.
//
// A missing or unreadable input only leaves its rows out (they are listed as not run).

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

std::optional<double> num(const json& j, const std::vector<std::string>& path) {
  const json* at = &j;
  for (const auto& p : path) {
    if (!at->is_object() || !at->contains(p)) return std::nullopt;
    at = &(*at)[p];
  }
  if (!at->is_number()) return std::nullopt;
  return at->get<double>();
}

std::string fmt(const std::optional<double>& v, int precision, double scale = 1.0) {
  if (!v) return "-";
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "%.*f", precision, *v * scale);
  return buffer;
}

/** 1234567 -> "1,234,567". */
std::string thousands(const std::optional<double>& v) {
  if (!v) return "-";
  std::string digits = std::to_string(static_cast<long long>(std::llround(*v)));
  std::string out;
  const size_t lead = digits.size() % 3 == 0 ? 3 : digits.size() % 3;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (i - lead) % 3 == 0 && i >= lead) out += ',';
    out += digits[i];
  }
  return out;
}

struct Row {
  std::string metric, native, on, off, ratio_on, ratio_off, target, verdict;
};

std::string verdictOf(const std::vector<std::optional<double>>& values, bool at_most,
                      double bound) {
  bool any = false;
  for (const auto& v : values) {
    if (!v) continue;
    any = true;
    if (at_most ? *v > bound : *v < bound) return "MISSED";
  }
  return any ? "met" : "-";
}

/** "quiet" when every reading is under 0.25 cores, else "NOISY" (the figures above are suspect). */
std::string quiet(const std::vector<std::optional<double>>& cores) {
  bool any = false;
  for (const auto& c : cores) {
    if (!c) continue;
    any = true;
    if (*c >= 0.25) return "NOISY";
  }
  return any ? "quiet" : "-";
}

bool readJson(const std::string& path, json* out) {
  if (path.empty()) return false;
  std::ifstream file(path);
  if (!file) {
    std::cerr << "bench_report: cannot read " << path << "\n";
    return false;
  }
  try {
    *out = json::parse(file);
    return true;
  } catch (const std::exception& e) {
    std::cerr << "bench_report: " << path << ": " << e.what() << "\n";
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string stream_path, wan_path, cluster_path, full_sync_path, out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "usage: bench_report [--stream FILE] [--wan FILE] [--cluster FILE] "
                   "[--full-sync FILE] [--json OUT]\n";
      return 2;
    }
    if (arg == "--stream") {
      stream_path = argv[++i];
    } else if (arg == "--wan") {
      wan_path = argv[++i];
    } else if (arg == "--cluster") {
      cluster_path = argv[++i];
    } else if (arg == "--full-sync") {
      full_sync_path = argv[++i];
    } else if (arg == "--json") {
      out_path = argv[++i];
    } else {
      std::cerr << "bench_report: unknown option " << arg << "\n";
      return 2;
    }
  }
  json stream, wan, cluster, full;
  const bool have_stream = readJson(stream_path, &stream);
  bool have_wan = readJson(wan_path, &wan);
  if (!have_wan && have_stream && (stream.contains("wan_drain") || stream.contains("wan_lag"))) {
    wan = stream;
    have_wan = true;
  }
  const bool have_cluster = readJson(cluster_path, &cluster);
  const bool have_full = readJson(full_sync_path, &full);

  std::vector<Row> rows;
  std::vector<std::string> not_run;
  const std::vector<std::string> consumers = {"native", "agent_clamp_on", "agent_clamp_off"};

  if (have_stream && stream.contains("drain")) {
    const json& d = stream["drain"];
    const json& m = d["median"];
    const auto runs = d.contains("runs") ? d["runs"].size() : 0;
    const std::string head = "drain " + thousands(num(d, {"ops"})) + " SET PXAT";
    const auto on = num(m, {"ratio_on"});
    const auto off = num(m, {"ratio_off"});
    rows.push_back({head + ": ops/s (median of " + std::to_string(runs) + ")",
                    thousands(num(m, {"native", "ops_per_s"})),
                    thousands(num(m, {"agent_clamp_on", "ops_per_s"})),
                    thousands(num(m, {"agent_clamp_off", "ops_per_s"})), fmt(on, 2), fmt(off, 2),
                    "agent/native >= 0.8 (aim 0.95)", verdictOf({on, off}, false, 0.8)});
    auto ratio = [](std::optional<double> a, std::optional<double> n) -> std::optional<double> {
      if (!a || !n || *n <= 0) return std::nullopt;
      return *a / *n;
    };
    {
      const auto n = num(m, {"native", "cpu_s_per_million"});
      const auto a = num(m, {"agent_clamp_on", "cpu_s_per_million"});
      const auto b = num(m, {"agent_clamp_off", "cpu_s_per_million"});
      rows.push_back({"drain: consumer CPU s per 1M events", fmt(n, 2), fmt(a, 2), fmt(b, 2),
                      fmt(ratio(a, n), 2), fmt(ratio(b, n), 2), "", ""});
      rows.push_back({"drain: + the agent's target redis CPU s/1M", "",
                      fmt(num(m, {"agent_clamp_on", "target_cpu_s_per_million"}), 2),
                      fmt(num(m, {"agent_clamp_off", "target_cpu_s_per_million"}), 2), "", "", "",
                      ""});
    }
    rows.push_back({"drain: other load on the machine, cores (max)",
                    fmt(num(m, {"native", "foreign_cores_max"}), 2),
                    fmt(num(m, {"agent_clamp_on", "foreign_cores_max"}), 2),
                    fmt(num(m, {"agent_clamp_off", "foreign_cores_max"}), 2), "", "",
                    "~0 (a quiet machine)",
                    quiet({num(m, {"native", "foreign_cores_max"}),
                           num(m, {"agent_clamp_on", "foreign_cores_max"}),
                           num(m, {"agent_clamp_off", "foreign_cores_max"})})});
    rows.push_back({"drain: consumer peak RSS (VmHWM) MiB",
                    fmt(num(m, {"native", "vmhwm_bytes"}), 1, 1.0 / 1048576),
                    fmt(num(m, {"agent_clamp_on", "vmhwm_bytes"}), 1, 1.0 / 1048576),
                    fmt(num(m, {"agent_clamp_off", "vmhwm_bytes"}), 1, 1.0 / 1048576), "", "", "",
                    ""});
  } else {
    not_run.push_back("drain");
  }

  // Fan-out: the agent's figures (ONE agent, two pipelines of one source into two targets, the
  // first with the clamp on, the second without) go in the "agent clamp on" column; "native" is
  // two replicas of the same source.
  bool fanout = false;
  if (have_stream && stream.contains("fanout")) {
    fanout = true;
    const json& f = stream["fanout"];
    const json& m = f["median"];
    const std::string native = "native_2_replicas";
    const std::string agent = "agent_2_pipelines";
    const auto runs = f.contains("runs") ? f["runs"].size() : 0;
    const std::string head = "fan-out " + thousands(num(f, {"ops"})) + " SET PXAT -> 2 targets";
    const auto ratio = num(m, {"ratio"});
    rows.push_back({head + ": ops/s, both have all (median of " + std::to_string(runs) + ")",
                    thousands(num(m, {native, "ops_per_s"})),
                    thousands(num(m, {agent, "ops_per_s"})), "(same agent)", fmt(ratio, 2), "", "",
                    ""});
    auto each = [&](const std::string& who) {
      std::string out;
      if (m.contains(who) && m[who].contains("target_drain_s") &&
          m[who]["target_drain_s"].is_array()) {
        for (const auto& t : m[who]["target_drain_s"]) {
          out += (out.empty() ? "" : " / ") +
                 fmt(t.is_number() ? std::optional(t.get<double>()) : std::nullopt, 3);
        }
      }
      return out.empty() ? std::string("-") : out;
    };
    rows.push_back({"fan-out: each target done after s (1st / 2nd)", each(native), each(agent), "",
                    "", "", "", ""});
    const auto n_cpu = num(m, {native, "cpu_s"});
    const auto a_cpu = num(m, {agent, "cpu_s"});
    rows.push_back({"fan-out: consumer CPU s (both replicas; the agent)", fmt(n_cpu, 2),
                    fmt(a_cpu, 2), "", n_cpu && a_cpu && *n_cpu > 0 ? fmt(*a_cpu / *n_cpu, 2) : "-",
                    "", "", ""});
    rows.push_back({"fan-out: + the agent's 2 target redis CPU s", "",
                    fmt(num(m, {agent, "target_cpu_s"}), 2), "", "", "", "", ""});
    const auto n_rep = num(m, {native, "source_replicas"});
    const auto a_rep = num(m, {agent, "source_replicas"});
    const auto n_err = num(m, {native, "errors"});
    const auto a_err = num(m, {agent, "errors"});
    const bool one_link = a_rep && *a_rep == 1 && n_rep && *n_rep == 2 && n_err.value_or(1) == 0 &&
                          a_err.value_or(1) == 0;
    rows.push_back({"fan-out: replicas the source lists (INFO connected_slaves)", fmt(n_rep, 0),
                    fmt(a_rep, 0), "", "", "", "agent 1, native 2", one_link ? "met" : "MISSED"});
    rows.push_back(
        {"fan-out: other load on the machine, cores (max)",
         fmt(num(m, {native, "foreign_cores_max"}), 2),
         fmt(num(m, {agent, "foreign_cores_max"}), 2), "", "", "", "~0 (a quiet machine)",
         quiet({num(m, {native, "foreign_cores_max"}), num(m, {agent, "foreign_cores_max"})})});
  } else {
    not_run.push_back("fanout");
  }

  // Cluster: the agent (ONE pipeline of a Redis Cluster source into a Redis Cluster target, one
  // link per source shard, no clamp) goes in the "agent clamp off" column; "native" is one
  // replica per source master.
  std::string cluster_note;
  if (have_cluster && cluster.contains("cluster")) {
    const json& c = cluster["cluster"];
    const json& m = c["median"];
    const std::string native = "native_replicas";
    const std::string agent = "agent_cluster";
    const auto runs = c.contains("runs") ? c["runs"].size() : 0;
    const auto shards = num(c, {"shards"});
    const std::string s = fmt(shards, 0);
    cluster_note = "cluster: native = " + s +
                   " plain redis-servers, one REPLICAOF each source master; agent = ONE agent, "
                   "one pipeline of the " +
                   s + "-master source cluster into a " + s +
                   "-master target cluster (one link per source shard, one thread), no clamp (its "
                   "figures in the 'agent clamp off' column); per shard = the total / " +
                   s;
    const auto ratio = num(m, {"ratio"});
    rows.push_back({"cluster " + s + "->" + s + " shards, drain " + thousands(num(c, {"ops"})) +
                        " SET PXAT: ops/s, all shards (median of " + std::to_string(runs) + ")",
                    thousands(num(m, {native, "ops_per_s"})), "",
                    thousands(num(m, {agent, "ops_per_s"})), "", fmt(ratio, 2), "", ""});
    auto each = [&](const std::string& who) {
      std::string out;
      if (m.contains(who) && m[who].contains("shard_drain_s") &&
          m[who]["shard_drain_s"].is_array()) {
        for (const auto& t : m[who]["shard_drain_s"]) {
          out += (out.empty() ? "" : " / ") +
                 fmt(t.is_number() ? std::optional(t.get<double>()) : std::nullopt, 3);
        }
      }
      return out.empty() ? std::string("-") : out;
    };
    rows.push_back(
        {"cluster: each shard done after s", each(native), "", each(agent), "", "", "", ""});
    const auto n_cpu = num(m, {native, "cpu_s_per_million"});
    const auto a_cpu = num(m, {agent, "cpu_s_per_million"});
    rows.push_back({"cluster: consumer CPU s per 1M events (" + s + " replicas; the agent)",
                    fmt(n_cpu, 2), "", fmt(a_cpu, 2), "",
                    n_cpu && a_cpu && *n_cpu > 0 ? fmt(*a_cpu / *n_cpu, 2) : "-", "", ""});
    rows.push_back({"cluster: consumer CPU s per shard (total / " + s + ")",
                    fmt(num(m, {native, "cpu_s_per_shard"}), 2), "",
                    fmt(num(m, {agent, "cpu_s_per_shard"}), 2), "", "", "", ""});
    rows.push_back({"cluster: + the agent's " + s + " target masters' CPU s/1M", "", "",
                    fmt(num(m, {agent, "target_cpu_s_per_million"}), 2), "", "", "", ""});
    rows.push_back({"cluster: consumer peak RSS (VmHWM) MiB, summed",
                    fmt(num(m, {native, "vmhwm_bytes"}), 1, 1.0 / 1048576), "",
                    fmt(num(m, {agent, "vmhwm_bytes"}), 1, 1.0 / 1048576), "", "", "", ""});
    auto replicas = [&](const std::string& who, bool* one_each) {
      std::string out;
      if (m.contains(who) && m[who].contains("source_replicas") &&
          m[who]["source_replicas"].is_array() && !m[who]["source_replicas"].empty()) {
        for (const auto& r : m[who]["source_replicas"]) {
          out += (out.empty() ? "" : " / ") + r.dump();
          if (!r.is_number() || r.get<double>() != 1) *one_each = false;
        }
      } else {
        *one_each = false;
      }
      return out.empty() ? std::string("-") : out;
    };
    bool one_each =
        num(m, {native, "errors"}).value_or(1) == 0 && num(m, {agent, "errors"}).value_or(1) == 0;
    const std::string n_rep = replicas(native, &one_each);
    const std::string a_rep = replicas(agent, &one_each);
    rows.push_back({"cluster: replicas each source master lists; all keys landed", n_rep, "", a_rep,
                    "", "", "1 each, no error", one_each ? "met" : "MISSED"});
    rows.push_back(
        {"cluster: other load on the machine, cores (max)",
         fmt(num(m, {native, "foreign_cores_max"}), 2), "",
         fmt(num(m, {agent, "foreign_cores_max"}), 2), "", "", "~0 (a quiet machine)",
         quiet({num(m, {native, "foreign_cores_max"}), num(m, {agent, "foreign_cores_max"})})});
  } else {
    not_run.push_back("cluster");
  }

  if (have_stream && stream.contains("lag")) {
    const json& l = stream["lag"];
    const std::string head =
        "lag " + thousands(num(l, {"rate"})) + "/s " + fmt(num(l, {"seconds"}), 0) + " s";
    struct Q {
      const char* key;
      const char* label;
    };
    for (const Q& q : {Q{"p50_ms", "p50 ms"}, Q{"p99_ms", "p99 ms"}, Q{"p999_ms", "p99.9 ms"},
                       Q{"max_ms", "max ms"}}) {
      const auto n = num(l, {"native", q.key});
      const auto a = num(l, {"agent_clamp_on", q.key});
      const auto b = num(l, {"agent_clamp_off", q.key});
      const bool p99 = std::string(q.key) == "p99_ms";
      rows.push_back({head + ": " + q.label, fmt(n, 2), fmt(a, 2), fmt(b, 2), "", "",
                      p99 ? "agent p99 <= 5 ms" : "", p99 ? verdictOf({a, b}, true, 5.0) : ""});
    }
    auto seen = [&](const std::string& c) {
      const auto s = num(l, {c, "seen"});
      const auto t = num(l, {c, "sent"});
      return thousands(s) + "/" + thousands(t);
    };
    bool all = true;
    for (const auto& c : consumers) {
      const auto s = num(l, {c, "seen"});
      const auto t = num(l, {c, "sent"});
      all = all && s && t && *s == *t && *t > 0;
    }
    rows.push_back(
        {head + ": other load on the machine, cores", fmt(num(l, {"native", "foreign_cores"}), 2),
         fmt(num(l, {"agent_clamp_on", "foreign_cores"}), 2),
         fmt(num(l, {"agent_clamp_off", "foreign_cores"}), 2), "", "", "~0 (a quiet machine)",
         quiet({num(l, {"native", "foreign_cores"}), num(l, {"agent_clamp_on", "foreign_cores"}),
                num(l, {"agent_clamp_off", "foreign_cores"})})});
    rows.push_back({head + ": writes seen/sent", seen("native"), seen("agent_clamp_on"),
                    seen("agent_clamp_off"), "", "", "all", all ? "met" : "MISSED"});
  } else {
    not_run.push_back("lag");
  }

  // Across a WAN (stream_bench --wan-delay-ms): a native replica reading its master through a
  // proxy against the clamp-off agent reading the source through one (reads across) or writing
  // its target through one (writes across). One row per placement, the agent in the "agent clamp
  // off" column, the native replica's figure repeated in each.
  std::string wan_note;
  if (have_wan && (wan.contains("wan_drain") || wan.contains("wan_lag"))) {
    const std::string native = "native_across";
    struct Placement {
      const char* consumer;
      const char* label;
      const char* ratio;
      double target;
    };
    const std::vector<Placement> placements = {
        {"agent_reads_across", "reads across", "ratio_reads", 0.95},
        {"agent_writes_across", "writes across", "ratio_writes", 0.9}};
    const json& any = wan.contains("wan_drain") ? wan["wan_drain"] : wan["wan_lag"];
    const std::string delay = fmt(num(any, {"delay_ms"}), 0) + " ms";
    wan_note = "across a WAN: a proxy delays each direction " + delay + " (round trip +" +
               fmt(num(any, {"delay_ms"}), 0, 2.0) +
               " ms); native = a replica whose master is the proxy; agent (clamp off, its "
               "figures in the 'agent clamp off' column) = reads across: its src is the proxy "
               "(the agent in the target's datacenter), writes across: its dst is the proxy (in "
               "the source's)";
    if (wan.contains("wan_drain")) {
      const json& d = wan["wan_drain"];
      const json& m = d["median"];
      const auto runs = d.contains("runs") ? d["runs"].size() : 0;
      const std::string head = "drain " + thousands(num(d, {"ops"})) + " SET PXAT across " + delay;
      std::vector<std::optional<double>> foreign = {num(m, {native, "foreign_cores_max"})};
      std::string agents_foreign;
      for (const Placement& p : placements) {
        if (!m.contains(p.consumer)) continue;
        const auto ratio = num(m, {p.ratio});
        char bound[32];
        std::snprintf(bound, sizeof(bound), "agent/native >= %.2f", p.target);
        rows.push_back({head + ", " + p.label + ": ops/s (median of " + std::to_string(runs) + ")",
                        thousands(num(m, {native, "ops_per_s"})), "",
                        thousands(num(m, {p.consumer, "ops_per_s"})), "", fmt(ratio, 2), bound,
                        verdictOf({ratio}, false, p.target)});
        foreign.push_back(num(m, {p.consumer, "foreign_cores_max"}));
        agents_foreign += (agents_foreign.empty() ? "" : " / ") +
                          fmt(num(m, {p.consumer, "foreign_cores_max"}), 2);
      }
      rows.push_back({"drain across " + delay + ": other load, cores (max; agent: reads / writes)",
                      fmt(num(m, {native, "foreign_cores_max"}), 2), "", agents_foreign, "", "",
                      "~0 (a quiet machine)", quiet(foreign)});
    } else {
      not_run.push_back("wan drain");
    }
    if (wan.contains("wan_lag")) {
      const json& l = wan["wan_lag"];
      const std::string head = "lag " + thousands(num(l, {"rate"})) + "/s " +
                               fmt(num(l, {"seconds"}), 0) + " s across " + delay;
      auto p50p99 = [&](const std::string& c) {
        return fmt(num(l, {c, "p50_ms"}), 1) + " / " + fmt(num(l, {c, "p99_ms"}), 1);
      };
      auto seen = [&](const std::string& c) {
        return thousands(num(l, {c, "seen"})) + "/" + thousands(num(l, {c, "sent"}));
      };
      auto all_seen = [&](const std::string& c) {
        const auto s = num(l, {c, "seen"});
        const auto t = num(l, {c, "sent"});
        return s && t && *s == *t && *t > 0 && l[c].value("error", std::string()).empty();
      };
      std::vector<std::optional<double>> foreign = {num(l, {native, "foreign_cores"})};
      std::string agents_foreign;
      std::string agents_seen;
      bool all = all_seen(native);
      for (const Placement& p : placements) {
        if (!l.contains(p.consumer)) continue;
        rows.push_back({head + ", " + p.label + ": p50 / p99 ms", p50p99(native), "",
                        p50p99(p.consumer), "", "", "", ""});
        foreign.push_back(num(l, {p.consumer, "foreign_cores"}));
        agents_foreign +=
            (agents_foreign.empty() ? "" : " / ") + fmt(num(l, {p.consumer, "foreign_cores"}), 2);
        agents_seen += (agents_seen.empty() ? "" : "; ") + seen(p.consumer);
        all = all && all_seen(p.consumer);
      }
      rows.push_back({head + ": writes seen/sent (agent: reads / writes)", seen(native), "",
                      agents_seen, "", "", "all, none sooner than the delay",
                      all ? "met" : "MISSED"});
      rows.push_back({head + ": other load, cores (agent: reads / writes)",
                      fmt(num(l, {native, "foreign_cores"}), 2), "", agents_foreign, "", "",
                      "~0 (a quiet machine)", quiet(foreign)});
    } else {
      not_run.push_back("wan lag");
    }
  } else {
    not_run.push_back("wan");
  }

  if (have_full && full.contains("median")) {
    const json& m = full["median"];
    const auto on = num(m, {"on", "ratio"});
    const auto off = num(m, {"off", "ratio"});
    const auto runs = full.contains("runs") ? full["runs"].size() : 0;
    rows.push_back({"full sync " + thousands(num(full, {"keys"})) + " mixed: s (median of " +
                        std::to_string(runs) + ")",
                    fmt(num(m, {"native_s"}), 3), fmt(num(m, {"on", "agent_s"}), 3),
                    fmt(num(m, {"off", "agent_s"}), 3), fmt(on, 2), fmt(off, 2),
                    "agent/native <= 1.5", verdictOf({on, off}, true, 1.5)});
    rows.push_back(
        {"full sync: other load on the machine, cores (max)",
         fmt(num(m, {"native_foreign_cores_max"}), 2), fmt(num(m, {"on", "foreign_cores_max"}), 2),
         fmt(num(m, {"off", "foreign_cores_max"}), 2), "", "", "~0 (a quiet machine)",
         quiet({num(m, {"native_foreign_cores_max"}), num(m, {"on", "foreign_cores_max"}),
                num(m, {"off", "foreign_cores_max"})})});
    rows.push_back({"full sync: agent peak RSS (VmHWM) MiB", "",
                    fmt(num(m, {"on", "vmhwm_bytes"}), 1, 1.0 / 1048576),
                    fmt(num(m, {"off", "vmhwm_bytes"}), 1, 1.0 / 1048576), "", "", "", ""});
  } else {
    not_run.push_back("fullsync");
  }

  if (have_stream && stream.contains("cost")) {
    const json& c = stream["cost"];
    const std::string head = "cost";
    const std::string n = thousands(num(c, {"ops_per_phase"}));
    const std::string n2 = thousands(
        num(c, {"ops_per_phase"}) ? std::optional(2 * *num(c, {"ops_per_phase"})) : std::nullopt);
    auto three = [&](const std::string& key, int precision, double scale) {
      return std::vector<std::string>{fmt(num(c, {"native", key}), precision, scale),
                                      fmt(num(c, {"agent_clamp_on", key}), precision, scale),
                                      fmt(num(c, {"agent_clamp_off", key}), precision, scale)};
    };
    auto v = three("cpu_s_per_million_second", 2, 1.0);
    rows.push_back(
        {head + ": CPU s per 1M events (2nd " + n + ")", v[0], v[1], v[2], "", "", "", ""});
    v = three("rss_empty_bytes", 1, 1.0 / 1048576);
    rows.push_back({head + ": RSS caught up, empty index MiB", v[0], v[1], v[2], "", "", "", ""});
    v = three("rss_growth_first_per_million", 1, 1e-6);
    rows.push_back(
        {head + ": RSS growth B/deadline, first " + n, v[0], v[1], v[2], "", "", "", ""});
    // The budget rows: RSS growth per deadline over the 2nd and the 3rd million.
    auto growthRow = [&](const std::string& key, const std::string& which) {
      const auto on = num(c, {"agent_clamp_on", key});
      const auto off = num(c, {"agent_clamp_off", key});
      const auto cells = three(key, 1, 1e-6);
      rows.push_back({head + ": RSS growth B/deadline, " + which + " " + n, cells[0] + " (data)",
                      cells[1], cells[2], "", "", "agent <= 32 B",
                      verdictOf({on ? std::optional(*on / 1e6) : std::nullopt,
                                 off ? std::optional(*off / 1e6) : std::nullopt},
                                true, 32.0)});
    };
    growthRow("rss_growth_second_per_million", "2nd");
    growthRow("rss_growth_third_per_million", "3rd");
    const auto b_on = num(c, {"agent_clamp_on", "index_bytes_per_entry"});
    const auto b_off = num(c, {"agent_clamp_off", "index_bytes_per_entry"});
    rows.push_back({head + ": expiry index B/entry (gauges, " + n2 + ")", "", fmt(b_on, 1),
                    fmt(b_off, 1), "", "", b_on || b_off ? "<= 32 B" : "gauges absent",
                    verdictOf({b_on, b_off}, true, 32.0)});
    v = three("foreign_cores_max", 2, 1.0);
    rows.push_back({head + ": other load on the machine, cores (max)", v[0], v[1], v[2], "", "",
                    "~0 (a quiet machine)",
                    quiet({num(c, {"native", "foreign_cores_max"}),
                           num(c, {"agent_clamp_on", "foreign_cores_max"}),
                           num(c, {"agent_clamp_off", "foreign_cores_max"})})});
    v = three("vmhwm_bytes", 1, 1.0 / 1048576);
    rows.push_back({head + ": peak RSS (VmHWM) MiB, " + n2 + " deadlines", v[0] + " (data)", v[1],
                    v[2], "", "", "", ""});
  } else {
    not_run.push_back("cost");
  }

  if (have_stream && stream.contains("catchup")) {
    // Sliding expiration (expiry-semantics.md §12): the agent's own figures, no native row (a
    // native replica never expires a copy by itself).
    const json& c = stream["catchup"];
    const std::string n = thousands(num(c, {"sessions"}));
    const auto runs = c.contains("runs") ? c["runs"].size() / 2 : 0;
    rows.push_back({"catch-up after a 20 s stop, " + n +
                        " sessions renewed, every copy expired "
                        "(restored): s (median of " +
                        std::to_string(runs) + ")",
                    "", "", fmt(num(c, {"expired_seconds_median"}), 3), "", "", "", ""});
    rows.push_back({"catch-up, the same stream, no copy expired: s", "", "",
                    fmt(num(c, {"alive_seconds_median"}), 3), "", "", "", ""});
    rows.push_back(
        {"catch-up: agent CPU s, expired / none expired", "", "",
         fmt(num(c, {"expired_cpu_s_median"}), 2) + " / " + fmt(num(c, {"alive_cpu_s_median"}), 2),
         "", "", "", ""});
    rows.push_back({"catch-up: time expired / none expired", "", "", fmt(num(c, {"ratio"}), 2), "",
                    "", "", ""});
  } else {
    not_run.push_back("catchup");
  }

  const Row header = {"benchmark / metric", "native",     "agent clamp on", "agent clamp off",
                      "on/native",          "off/native", "target",         "verdict"};
  std::vector<size_t> width(8, 0);
  auto fields = [](const Row& r) {
    return std::vector<const std::string*>{&r.metric,   &r.native,    &r.on,     &r.off,
                                           &r.ratio_on, &r.ratio_off, &r.target, &r.verdict};
  };
  for (const Row* r : {&header}) {
    auto f = fields(*r);
    for (size_t i = 0; i < f.size(); ++i) width[i] = std::max(width[i], f[i]->size());
  }
  for (const auto& r : rows) {
    auto f = fields(r);
    for (size_t i = 0; i < f.size(); ++i) width[i] = std::max(width[i], f[i]->size());
  }
  auto print = [&](const Row& r) {
    auto f = fields(r);
    std::string line = "|";
    for (size_t i = 0; i < f.size(); ++i) {
      const std::string& s = *f[i];
      const std::string pad(width[i] - s.size(), ' ');
      line += " " + (i == 0 || i >= 6 ? s + pad : pad + s) + " |";
    }
    std::cout << line << "\n";
  };
  print(header);
  std::string rule = "|";
  for (size_t w : width) rule += std::string(w + 2, '-') + "|";
  std::cout << rule << "\n";
  for (const auto& r : rows) print(r);
  if (!not_run.empty()) {
    std::cout << "not run:";
    for (const auto& n : not_run) std::cout << " " << n;
    std::cout << "\n";
  }
  if (fanout) {
    std::cout << "fan-out: native = 2 replicas of one source; agent = ONE agent, 2 pipelines of "
                 "that source (one replication link) into 2 targets, the 1st with the clamp on, "
                 "the 2nd without (its figures in the 'agent clamp on' column)\n";
  }
  if (!cluster_note.empty()) {
    std::cout << cluster_note << "\n";
  }
  if (!wan_note.empty()) {
    std::cout << wan_note << "\n";
  }
  if (have_stream || have_wan || have_cluster) {
    const json& from = have_stream ? stream : have_wan ? wan : cluster;
    std::cout << "machine: " << from.value("cpus", 0) << " CPUs, redis "
              << from.value("redis_version", std::string("?")) << ", agent "
              << from.value("agent_binary", std::string("?")) << "\n";
  }

  if (!out_path.empty()) {
    json table = json::array();
    for (const auto& r : rows) {
      table.push_back({{"metric", r.metric},
                       {"native", r.native},
                       {"agent_clamp_on", r.on},
                       {"agent_clamp_off", r.off},
                       {"ratio_on", r.ratio_on},
                       {"ratio_off", r.ratio_off},
                       {"target", r.target},
                       {"verdict", r.verdict}});
    }
    json out = {{"unix_time", static_cast<long long>(std::time(nullptr))},
                {"table", table},
                {"stream", have_stream ? stream : json(nullptr)},
                {"wan", have_wan ? wan : json(nullptr)},
                {"cluster", have_cluster ? cluster : json(nullptr)},
                {"full_sync", have_full ? full : json(nullptr)}};
    std::ofstream file(out_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::cerr << "bench_report: cannot write " << out_path << "\n";
      return 1;
    }
    std::cout << "JSON: " << out_path << "\n";
  }
  return 0;
}
