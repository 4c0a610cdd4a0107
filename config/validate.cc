// Cross-section checks: what needs the whole file (clusters may be written after the pipelines
// that use them). Runs after parse.cc on whatever parsed cleanly; fields that failed there are
// empty or flagged and are skipped here, so one mistake gives one message, not a cascade.

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/internal.h"

namespace xdcr::config::internal {
namespace {

bool sameHost(const std::string& a, const std::string& b) {
  // Host names are case-insensitive. No DNS here (validate must not touch the network), so
  // "localhost" and "127.0.0.1" count as different: this catches the obvious copy-paste mistake,
  // not every alias.
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void checkClusterReference(const ParsedConfig& parsed, const std::string& role,
                           const std::string& name, Mark mark, Diagnostics& diags) {
  if (name.empty() || parsed.config.cluster(name) != nullptr) {
    return;
  }
  std::vector<std::string> known;
  for (const auto& [cluster_name, cluster] : parsed.config.clusters) {
    known.push_back(cluster_name);
  }
  std::string message = role + " " + quote(name) + " is not a defined cluster; ";
  if (known.empty()) {
    message += "no clusters are defined: add it under clusters:";
  } else {
    if (auto suggestion = closestMatch(name, known)) {
      message += "did you mean " + quote(*suggestion) + "? ";
    }
    message += "Defined clusters: " + joinNames(known);
  }
  diags.error(mark, message);
}

void checkSelfReplication(const ParsedConfig& parsed, const PipelineConfig& pipeline,
                          const PipelineMarks& marks, Diagnostics& diags) {
  const ClusterConfig* source = parsed.config.cluster(pipeline.source);
  const ClusterConfig* target = parsed.config.cluster(pipeline.target);
  if (source == nullptr || target == nullptr) {
    return;
  }
  auto source_info = parsed.cluster_info.find(pipeline.source);
  auto target_info = parsed.cluster_info.find(pipeline.target);
  if (source_info == parsed.cluster_info.end() || !source_info->second.address_ok ||
      target_info == parsed.cluster_info.end() || !target_info->second.address_ok) {
    return;  // a bad address was already reported
  }
  if (!sameHost(source->host, target->host) || source->port != target->port) {
    return;
  }
  std::string address = joinHostPort(source->host, source->port);
  std::string who = pipeline.name.empty() ? "this pipeline" : "pipeline " + quote(pipeline.name);
  if (pipeline.dbs.empty()) {
    diags.error(marks.target,
                who + " replicates " + address + " onto itself: source " + quote(source->name) +
                    " and target " + quote(target->name) +
                    " have the same address and without a dbs map every db maps to itself; use "
                    "another target or add a dbs map to different databases");
    return;
  }
  for (const auto& [from, to] : pipeline.dbs) {
    if (from != to) {
      continue;
    }
    auto it = marks.dbs.find(from);
    Mark mark = it != marks.dbs.end() ? it->second : marks.target;
    diags.error(mark, who + " replicates db " + std::to_string(from) + " of " + address +
                          " onto itself (source " + quote(source->name) + " and target " +
                          quote(target->name) +
                          " have the same address); map it to a different db or use another "
                          "target");
  }
}

}  // namespace

void validateReferences(const ParsedConfig& parsed, Diagnostics& diags) {
  if (!parsed.root_is_map) {
    return;  // an empty or non-mapping file was reported as such
  }
  const Config& config = parsed.config;
  if (parsed.pipeline_items == 0) {
    if (parsed.has_pipelines_key) {
      diags.error(parsed.pipelines_mark,
                  "pipelines is empty; define at least one pipeline (- name: ..., source: ..., "
                  "target: ...)");
    } else {
      diags.error(parsed.root,
                  "no pipelines are defined; add a pipelines: list with at least one pipeline");
    }
  }

  std::map<std::string, Mark> names;
  for (size_t i = 0; i < config.pipelines.size(); ++i) {
    const PipelineConfig& pipeline = config.pipelines[i];
    const PipelineMarks& marks = parsed.pipeline_marks[i];
    if (!pipeline.name.empty()) {
      auto [it, inserted] = names.emplace(pipeline.name, marks.name);
      if (!inserted) {
        diags.error(marks.name, "duplicate pipeline name " + quote(pipeline.name) +
                                    " (first defined at line " + std::to_string(it->second.line) +
                                    "); give each pipeline a unique name");
      }
    }
    checkClusterReference(parsed, "source", pipeline.source, marks.source, diags);
    checkClusterReference(parsed, "target", pipeline.target, marks.target, diags);
    checkSelfReplication(parsed, pipeline, marks, diags);
  }
}

}  // namespace xdcr::config::internal
