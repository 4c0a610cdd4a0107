// Entry points of the config loader and the small helpers every pass shares. The work is split:
// parse.cc checks each section on its own (types, ranges, unknown keys), validate.cc checks what
// spans sections (pipeline -> cluster references), redact.cc renders the config for humans.

#include "config/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "config/internal.h"

namespace xdcr::config {
namespace internal {

void Diagnostics::error(Mark mark, std::string message) {
  list_.push_back({Diagnostic::Severity::Error, file_, mark, std::move(message)});
  ++errors_;
}

void Diagnostics::warning(Mark mark, std::string message) {
  list_.push_back({Diagnostic::Severity::Warning, file_, mark, std::move(message)});
}

std::vector<Diagnostic> Diagnostics::take() {
  // The passes run section by section and cross-checks run last, so the raw order is not the
  // file order a user reads top to bottom. Stable: two findings at one spot keep their order.
  std::stable_sort(list_.begin(), list_.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::pair(a.mark.line, a.mark.column) < std::pair(b.mark.line, b.mark.column);
  });
  errors_ = 0;
  return std::move(list_);
}

Mark markOf(const YAML::Node& node) {
  try {
    if (!node.IsDefined()) {
      return {};
    }
    YAML::Mark m = node.Mark();
    if (m.is_null() || m.line < 0 || m.column < 0) {
      return {};
    }
    return {m.line + 1, m.column + 1};
  } catch (const std::exception&) {
    return {};  // an invalid (zombie) node has no position
  }
}

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) {
    if (!out.empty()) {
      out += ", ";
    }
    out += name;
  }
  return out;
}

namespace {

// Optimal string alignment distance: Levenshtein plus adjacent transpositions, which are the
// most common typo ("adderss").
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                            std::tolower(static_cast<unsigned char>(b[j - 1]))
                        ? 0
                        : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closestMatch(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  // About one typo per three characters: "sorce" -> "source", but "foo" suggests nothing
  // rather than something unrelated.
  size_t limit = std::max<size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    size_t distance = editDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string joinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) {
    return "[" + host + "]:" + std::to_string(port);
  }
  return host + ":" + std::to_string(port);
}

}  // namespace internal

namespace {

using internal::Diagnostics;

/**
 * yaml-cpp 0.7 (Debian 12) never returns from LoadAll(), and fills memory, when a document's node
 * would start at a ',' (e.g. a file that is just ","): its parser then yields an empty document
 * without consuming the token, forever (jbeder/yaml-cpp#1040, fixed upstream by #1319). This
 * walks the documents with the parser's events first and throws the ParserException LoadAll
 * should have thrown when two empty documents in a row start at the same token; LoadAll runs
 * only on text this walk has shown it finishes.
 */
class DocumentProgress : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    start_ = mark;
    empty_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { empty_ = false; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    empty_ = false;
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    empty_ = false;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    empty_ = false;
  }
  void OnMapEnd() override {}

  const YAML::Mark& start() const { return start_; }
  bool empty() const { return empty_; }

 private:
  YAML::Mark start_;
  bool empty_ = true;
};

void throwIfLoadAllWouldNotEnd(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentProgress doc;
  bool previous_empty = false;
  int previous_pos = -1;
  while (parser.HandleNextDocument(doc)) {
    if (doc.empty() && previous_empty && doc.start().pos == previous_pos) {
      const auto at = static_cast<size_t>(doc.start().pos);
      throw YAML::ParserException(
          doc.start(), "unexpected " + (at < text.size() ? internal::quote(text.substr(at, 1))
                                                         : std::string("end of input")));
    }
    previous_empty = doc.empty();
    previous_pos = doc.start().pos;
  }
}

LoadResult loadFromText(const std::string& text, const std::string& name,
                        const std::filesystem::path& base_dir, const LoadOptions& options) {
  Diagnostics diags(name);
  LoadResult result;
  // Nothing below is expected to throw (parse.cc reads nodes without as<>()), but yaml-cpp and
  // the standard library can; the contract is "never throws", so a surprise becomes a diagnostic.
  try {
    std::vector<YAML::Node> documents;
    try {
      throwIfLoadAllWouldNotEnd(text);
      documents = YAML::LoadAll(text);
    } catch (const YAML::ParserException& e) {
      Mark mark;
      if (!e.mark.is_null() && e.mark.line >= 0 && e.mark.column >= 0) {
        mark = {e.mark.line + 1, e.mark.column + 1};
      }
      diags.error(mark, "YAML syntax error: " + e.msg +
                            "; fix the YAML at this position (check indentation, quotes, "
                            "brackets and that tabs are not used for indentation)");
      result.diagnostics = diags.take();
      return result;
    }

    internal::ParsedConfig parsed;
    parsed.config.path = name;
    internal::ParseContext ctx{base_dir, options.resolve_environment,
                               options.resolve_environment && options.check_files};
    YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
    // Only the first document is read; a second one with content would be silently ignored,
    // which is worse than an error. An empty trailing "---" is harmless.
    for (size_t i = 1; i < documents.size(); ++i) {
      if (!documents[i].IsNull()) {
        diags.error(internal::markOf(documents[i]),
                    "the file holds more than one YAML document (\"---\"); put the whole "
                    "configuration in a single document");
        break;
      }
    }
    internal::parseRoot(root, ctx, parsed, diags);
    internal::validateReferences(parsed, diags);
    if (!diags.hasErrors()) {
      result.config = std::make_shared<const Config>(std::move(parsed.config));
    }
  } catch (const std::exception& e) {
    diags.error({}, std::string("internal error while loading the configuration (") + e.what() +
                        "); please report this with the file that caused it");
  } catch (...) {
    diags.error({},
                "internal error while loading the configuration; please report this with "
                "the file that caused it");
  }
  if (diags.hasErrors()) {
    result.config = nullptr;  // "config is null iff there is an error", even after a late throw
  }
  result.diagnostics = diags.take();
  return result;
}

}  // namespace

std::vector<std::string> securityWarnings(const Config& config) {
  std::vector<std::string> out;
  for (const auto& [name, cluster] : config.clusters) {
    if (cluster.tls && !cluster.tls->verify) {
      out.push_back("cluster " + name + " (" + cluster.address() +
                    "): tls.verify is false: the server's certificate and name are NOT checked, "
                    "so anyone on the network path can impersonate it and read the password and "
                    "the data; remove verify: false (and set tls.ca_file) outside tests");
    }
  }
  return out;
}

std::string ClusterConfig::slotsText() const {
  std::string out;
  for (const auto& [lo, hi] : slots) {
    if (!out.empty()) out += ",";
    out += lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
  }
  return out;
}

std::string ClusterConfig::address() const {
  auto join = [](const std::vector<NodeAddress>& nodes) {
    std::string out;
    for (const auto& n : nodes) {
      out += (out.empty() ? "" : ",") + internal::joinHostPort(n.host, n.port);
    }
    return out;
  };
  if (kind == ClusterKind::RedisCluster && !seeds.empty()) {
    return join(seeds);
  }
  if (kind == ClusterKind::RedisSentinel && !sentinels.empty()) {
    return master_name + " via " + join(sentinels);
  }
  // Unbracketed, as checkpoints have always recorded it (replicator/pipeline.cc compares them).
  return host + ":" + std::to_string(port);
}

RedisEndpoint ClusterConfig::endpoint() const {
  RedisEndpoint e;
  e.cluster = name;
  e.host = host;
  e.port = port;
  e.username = username;
  e.memcached = isMemcached();
  if (password.present()) e.password = password.value;
  if (tls) {
    e.tls = TlsOptions{tls->ca_file, tls->cert_file, tls->key_file, tls->server_name, tls->verify};
  }
  return e;
}

RedisEndpoint ClusterConfig::endpointAt(const std::string& node_host, uint16_t node_port) const {
  RedisEndpoint e = endpoint();
  e.host = node_host;
  e.port = node_port;
  return e;
}

RedisEndpoint ClusterConfig::sentinelEndpoint(const NodeAddress& s) const {
  RedisEndpoint e = endpoint();
  e.host = s.host;
  e.port = s.port;
  e.username = sentinel_username;
  e.password.reset();
  if (sentinel_password.present()) e.password = sentinel_password.value;
  return e;
}

std::string Secret::describe() const {
  switch (kind) {
    case Kind::None:
      return "";
    case Kind::Plain:
      return "<redacted>";
    case Kind::Env:
      return "{env: " + ref + "}";
    case Kind::File:
      return "{file: " + ref + "}";
    case Kind::Credential:
      return "{credential: " + ref + "}";
  }
  return "";
}

std::string Diagnostic::format() const {
  std::string out = file;
  if (mark.line > 0) {
    out += ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column);
  }
  out += severity == Severity::Error ? ": error: " : ": warning: ";
  out += message;
  return out;
}

LoadResult loadConfigFile(const std::string& path, const LoadOptions& options) {
  try {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    std::string text;
    int read_errno = 0;
    if (file == nullptr) {
      read_errno = errno;
    } else {
      char buf[65536];
      size_t n = 0;
      while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) {
        text.append(buf, n);
      }
      if (std::ferror(file)) {
        read_errno = errno != 0 ? errno : EIO;  // e.g. EISDIR for a directory
      }
      std::fclose(file);
    }
    if (read_errno != 0) {
      LoadResult result;
      result.diagnostics.push_back({Diagnostic::Severity::Error, path, Mark{},
                                    std::string("cannot read the configuration file: ") +
                                        std::strerror(read_errno) +
                                        "; check the path given with -c/--config"});
      return result;
    }
    // Relative paths inside the file are relative to the file's directory, not to wherever the
    // agent was started from, so that one config works from any working directory.
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    std::filesystem::path base_dir =
        ec ? std::filesystem::path(path).parent_path() : absolute.lexically_normal().parent_path();
    return loadFromText(text, path, base_dir, options);
  } catch (const std::exception& e) {
    LoadResult result;
    result.diagnostics.push_back({Diagnostic::Severity::Error, path, Mark{},
                                  std::string("cannot load the configuration file: ") + e.what()});
    return result;
  }
}

LoadResult loadConfigString(const std::string& yaml, const std::string& name,
                            const LoadOptions& options) {
  try {
    // Text has no directory of its own: relative paths are relative to the current directory.
    std::error_code ec;
    std::filesystem::path base_dir = std::filesystem::current_path(ec);
    return loadFromText(yaml, name, ec ? std::filesystem::path() : base_dir, options);
  } catch (const std::exception& e) {
    LoadResult result;
    result.diagnostics.push_back({Diagnostic::Severity::Error, name, Mark{},
                                  std::string("cannot load the configuration: ") + e.what()});
    return result;
  }
}

}  // namespace xdcr::config
