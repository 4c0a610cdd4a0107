#pragma once
// Internals of the config loader, shared by its translation units (parse.cc, validate.cc,
// config.cc, redact.cc, duration.cc). Not part of the contract: other modules include only
// config/config.h.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace xdcr::config::internal {

/** Collects diagnostics for one file; not thread-safe (one load at a time owns it). */
class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}

  void error(Mark mark, std::string message);
  void warning(Mark mark, std::string message);
  bool hasErrors() const { return errors_ > 0; }
  /** Every diagnostic, stably sorted by position so that they read in file order. */
  std::vector<Diagnostic> take();

 private:
  std::string file_;
  std::vector<Diagnostic> list_;
  int errors_ = 0;
};

/** The 1-based position of `node`, or {0, 0} when yaml-cpp has none. Never throws. */
Mark markOf(const YAML::Node& node);

/** `"text"` with quotes, backslashes and control characters escaped, for messages. */
std::string quote(std::string_view text);

/** "a, b, c" */
std::string joinNames(const std::vector<std::string>& names);

/**
 * The candidate closest to `word` by edit distance (case-insensitive, transpositions count as
 * one edit), if it is close enough to be a plausible typo; nullopt otherwise.
 */
std::optional<std::string> closestMatch(std::string_view word,
                                        const std::vector<std::string>& candidates);

/** The largest unit that divides `d` exactly: "1d", "2h", "10m", "30s", "250ms", "0s". */
std::string formatDuration(Duration d);

/** "host:port", with IPv6 literals in brackets ("[::1]:6379"). */
std::string joinHostPort(const std::string& host, uint16_t port);

/** Positions the cross-checks need that the public structs do not keep. */
struct PipelineMarks {
  Mark name;
  Mark source;  // of the value; line 0 when missing
  Mark target;
  std::map<int, Mark> dbs;  // source db -> position of that entry's key in `dbs`
};

struct ClusterInfo {
  /** false: the address (address, addresses or sentinels) is missing or invalid, or the type is
   *  unknown (already reported); the checks that compare addresses skip the cluster. */
  bool address_ok = false;
  Mark type;          // of the `type` value; line 0 when not written
  Mark read_from;     // of the `read_from` key; line 0 when not written
  Mark slots;         // of the `slots` key; line 0 when not written
  Mark link_timeout;  // of the `link_timeout` value; line 0 when not written
  Mark spool_limit;   // of the `spool_limit` key; line 0 when not written
};

/** The result of the structural pass, before cross-reference checks. */
struct ParsedConfig {
  Config config;
  std::vector<PipelineMarks> pipeline_marks;  // parallel to config.pipelines
  std::map<std::string, ClusterInfo> cluster_info;
  Mark root;                 // position of the top-level mapping
  bool root_is_map = false;  // false: the file is empty or not a mapping (already reported)
  bool has_pipelines_key = false;
  Mark pipelines_mark;     // of the `pipelines` value
  int pipeline_items = 0;  // items in the `pipelines` list; -1 when it is not a list
};

struct ParseContext {
  /** Relative paths in the file (state_dir, TLS files, secret files) are resolved against it. */
  std::filesystem::path base_dir;
  bool resolve_environment = true;
  bool check_files = false;  // LoadOptions::check_files
};

/** Structural pass: types, ranges, unknown keys, per-section rules. Fills `out`. */
void parseRoot(const YAML::Node& root, const ParseContext& ctx, ParsedConfig& out,
               Diagnostics& diags);

/** Cross-section pass: pipeline references, duplicate names, self-replication, cycles. */
void validateReferences(const ParsedConfig& parsed, Diagnostics& diags);

}  // namespace xdcr::config::internal
