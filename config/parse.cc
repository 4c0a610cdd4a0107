// Structural pass of the config loader: walks the YAML tree once, section by section, turning
// every node into the typed structs of config.h and reporting every problem it can see locally
// (types, ranges, unknown and duplicate keys, missing required keys, secrets, regexes, buckets).
// It never stops at the first problem: a bad value is reported and skipped, and the walk goes on,
// so that `validate` can list every error in one run.
//
// Nodes are read with Scalar()/Type() only, never with as<>(), so yaml-cpp's conversion
// exceptions cannot happen and each message can say exactly what was expected.
//
// Relative paths (agent.state_dir, TLS files, clock.nts_ca_file, {file: PATH} secrets) are
// resolved against ParseContext::base_dir: the directory of the config file, or the current
// directory for loadConfigString(). The agent may be started from anywhere (systemd, a test
// harness); paths that follow the file keep one config valid regardless.

#include <re2/re2.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/internal.h"

#include <pwd.h>
#include <unistd.h>

namespace xdcr::config::internal {
namespace {

// Redis's `databases` is configurable (default 16), so 0..15 would reject valid setups; 1023 is
// a sanity bound that still catches typos such as a port number written as a db.
constexpr int64_t kMaxDb = 1023;
// agent.threads: more than links can use is a mistake (a link runs on one thread).
constexpr int64_t kMaxThreads = 64;
constexpr uint16_t kDefaultRedisPort = 6379;
constexpr uint16_t kDefaultMemcachedPort = 11211;
constexpr uint16_t kDefaultSentinelPort = 26379;
constexpr uint16_t kDefaultNtpPort = 123;

/** One `key: value` pair of a mapping, with positions. */
struct Entry {
  std::string key;
  YAML::Node value;
  Mark key_mark;
  Mark value_mark;  // the key's position when the value is an implicit null
};

std::string describeNode(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "the value " + quote(node.Scalar());
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Undefined:
      break;
  }
  return "undefined";
}

Mark valueMark(const YAML::Node& value, Mark key_mark) {
  // yaml-cpp places an implicit null ("key:" with nothing after it) at the next token, often on
  // a later line or at a closing "}"; the key is where the user has to look.
  if (value.IsNull()) {
    return key_mark;
  }
  return markOf(value);
}

/** The pairs of `map` in file order, duplicates included; non-scalar keys are reported. */
std::vector<Entry> entriesOf(const YAML::Node& map, Diagnostics& diags) {
  std::vector<Entry> entries;
  for (auto it = map.begin(); it != map.end(); ++it) {
    YAML::Node key = it->first;
    YAML::Node value = it->second;
    Mark key_mark = markOf(key);
    if (!key.IsScalar()) {
      diags.error(key_mark, "a key must be a plain name, not " + describeNode(key) +
                                "; write each entry as name: value");
      continue;
    }
    entries.push_back({key.Scalar(), value, key_mark, valueMark(value, key_mark)});
  }
  return entries;
}

/**
 * A mapping with a fixed set of keys. Unknown and duplicate keys are reported on construction;
 * the first occurrence of each known key is kept.
 */
class MapReader {
 public:
  MapReader(const YAML::Node& map, std::string where, std::vector<std::string> allowed,
            Diagnostics& diags)
      : mark_(markOf(map)), where_(std::move(where)) {
    std::map<std::string, Mark> seen;
    for (Entry& entry : entriesOf(map, diags)) {
      bool known = false;
      for (const auto& key : allowed) {
        known = known || key == entry.key;
      }
      if (!known) {
        had_unknown_ = true;
        diags.error(entry.key_mark, unknownKeyMessage(entry.key, allowed));
        continue;
      }
      auto [it, inserted] = seen.emplace(entry.key, entry.key_mark);
      if (!inserted) {
        diags.error(entry.key_mark, "duplicate key " + quote(entry.key) + " " + where_ +
                                        " (first at line " + std::to_string(it->second.line) +
                                        "); remove one of them");
        continue;
      }
      entries_.push_back(std::move(entry));
    }
  }

  /** The entry for `key`, even when its value is null; nullptr when absent. */
  const Entry* find(std::string_view key) const {
    for (const auto& entry : entries_) {
      if (entry.key == key) {
        return &entry;
      }
    }
    return nullptr;
  }

  /** The entry for `key` when it has a value; an empty value counts as "not set". */
  const Entry* get(std::string_view key) const {
    const Entry* entry = find(key);
    return entry != nullptr && !entry->value.IsNull() ? entry : nullptr;
  }

  /**
   * The entry for a required key. Reports a missing key at this mapping (where it should be
   * added) and an empty one at the key itself. `example` is a line to add, e.g. "name: p1".
   */
  const Entry* require(std::string_view key, std::string_view example, Diagnostics& diags) const {
    const Entry* entry = find(key);
    if (entry == nullptr) {
      diags.error(mark_, "missing required key " + quote(key) + " " + where_ + "; add " +
                             std::string(example));
      return nullptr;
    }
    if (entry->value.IsNull()) {
      diags.error(entry->value_mark, quote(key) + " has no value; write " + std::string(example));
      return nullptr;
    }
    return entry;
  }

  Mark mark() const { return mark_; }
  bool hadUnknown() const { return had_unknown_; }

 private:
  std::string unknownKeyMessage(const std::string& key, const std::vector<std::string>& allowed) {
    if (key == "<<") {
      return "YAML merge keys (\"<<\") are not supported " + where_ + "; write the keys out";
    }
    std::string message = "unknown key " + quote(key) + " " + where_;
    if (auto suggestion = closestMatch(key, allowed)) {
      return message + "; did you mean " + quote(*suggestion) + "?";
    }
    return message + "; valid keys are: " + joinNames(allowed);
  }

  Mark mark_;
  std::string where_;
  std::vector<Entry> entries_;
  bool had_unknown_ = false;
};

// ---- Scalars ------------------------------------------------------------------------------

bool expectMap(const YAML::Node& node, Mark mark, std::string_view label, Diagnostics& diags) {
  if (node.IsMap()) {
    return true;
  }
  diags.error(mark, std::string(label) + " must be a mapping of key: value pairs, not " +
                        describeNode(node));
  return false;
}

bool expectList(const Entry& entry, Diagnostics& diags) {
  if (entry.value.IsSequence()) {
    return true;
  }
  diags.error(entry.value_mark, entry.key + " must be a list, not " + describeNode(entry.value) +
                                    "; write one \"- item\" per line or [item, ...]");
  return false;
}

std::optional<std::string> readString(const YAML::Node& node, Mark mark, std::string_view label,
                                      Diagnostics& diags) {
  if (node.IsScalar()) {
    return node.Scalar();
  }
  std::string message = std::string(label) + " must be a string, not " + describeNode(node);
  if (node.IsSequence() || node.IsMap()) {
    // `address: [::1]:6379` is a flow list to YAML; quoting is the fix.
    message += "; quote the value if it starts with \"[\" or \"{\"";
  }
  diags.error(mark, message);
  return std::nullopt;
}

std::optional<std::string> readString(const Entry& entry, Diagnostics& diags) {
  return readString(entry.value, entry.value_mark, entry.key, diags);
}

/** A string that must not be empty (names, patterns, paths that are required). */
std::optional<std::string> readNonEmpty(const Entry& entry, std::string_view what_to_do,
                                        Diagnostics& diags) {
  auto text = readString(entry, diags);
  if (text && text->empty()) {
    diags.error(entry.value_mark, quote(entry.key) + " is empty; " + std::string(what_to_do));
    return std::nullopt;
  }
  return text;
}

std::optional<bool> readBool(const Entry& entry, Diagnostics& diags) {
  if (!entry.value.IsScalar()) {
    diags.error(entry.value_mark,
                entry.key + " must be true or false, not " + describeNode(entry.value));
    return std::nullopt;
  }
  const std::string& text = entry.value.Scalar();
  // YAML 1.2 core schema booleans only: yes/no/on/off are YAML 1.1 and surprise people
  // ("on_skew: no" vs "nts: no"), so they get a clear error instead of a guess.
  if (text == "true" || text == "True" || text == "TRUE") {
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return false;
  }
  diags.error(entry.value_mark,
              "invalid value " + quote(text) + " for " + entry.key + ": use true or false");
  return std::nullopt;
}

std::optional<int64_t> parseInteger(std::string_view text) {
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
  }
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

/** An integer scalar within [min, max]; `label` names it in messages ("db", "source db"). */
std::optional<int64_t> readInt(const YAML::Node& node, Mark mark, std::string_view label,
                               int64_t min, int64_t max, Diagnostics& diags) {
  std::string range = "use an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!node.IsScalar()) {
    diags.error(
        mark, std::string(label) + " must be an integer, not " + describeNode(node) + "; " + range);
    return std::nullopt;
  }
  auto value = parseInteger(node.Scalar());
  if (!value) {
    diags.error(mark, "invalid " + std::string(label) + " " + quote(node.Scalar()) + ": " + range);
    return std::nullopt;
  }
  if (*value < min || *value > max) {
    diags.error(mark, std::string(label) + " " + node.Scalar() + " is out of range: " + range);
    return std::nullopt;
  }
  return value;
}

enum class DurationRule { NonNegative, Positive };

std::optional<Duration> readDuration(const Entry& entry, DurationRule rule, Diagnostics& diags) {
  if (!entry.value.IsScalar()) {
    diags.error(entry.value_mark,
                entry.key + " must be a duration such as 30s, not " + describeNode(entry.value));
    return std::nullopt;
  }
  const std::string& text = entry.value.Scalar();
  if (!text.empty() && text.front() == '-' && parseDuration(text.substr(1))) {
    if (entry.key == "max_ttl") {
      diags.error(entry.value_mark, "max_ttl must not be negative (got " + quote(text) +
                                        "); use 0 for no limit or a positive duration such "
                                        "as 10m");
    } else {
      diags.error(entry.value_mark, entry.key + " must not be negative (got " + quote(text) +
                                        "); use a positive duration such as 30s");
    }
    return std::nullopt;
  }
  auto duration = parseDuration(text);
  if (!duration) {
    diags.error(entry.value_mark, "invalid duration " + quote(text) + " for " + entry.key +
                                      ": use an integer number of seconds or a number with ms, "
                                      "s, m, h or d");
    return std::nullopt;
  }
  if (rule == DurationRule::Positive && duration->count() == 0) {
    diags.error(entry.value_mark, entry.key + " must be greater than 0 (got " + quote(text) +
                                      "); use a positive duration such as 1s");
    return std::nullopt;
  }
  return duration;
}

/**
 * Bytes (a size), or with `per_second` bytes per second: an integer, or a number (a fraction too)
 * with a unit — B, KB (or kB), MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of
 * 1024), a rate optionally followed by "/s" ("20MB", "1.5GiB/s", "500 KB"). A lower-case b is not
 * taken: "Mb" usually means megabits. nullopt when it is none of these or too large.
 */
std::optional<uint64_t> parseBytes(std::string_view text, bool per_second) {
  auto trim = [](std::string_view& t) {
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  };
  trim(text);
  if (per_second && text.size() >= 2 && (text.ends_with("/s") || text.ends_with("/S"))) {
    text.remove_suffix(2);
    trim(text);
  }
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  size_t end = digits;
  if (end < text.size() && text[end] == '.') {
    ++end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  }
  if (digits == 0 || end == digits + 1) return std::nullopt;  // no integer part, or "5."
  const std::string_view number = text.substr(0, end);
  std::string_view unit = text.substr(end);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  struct Unit {
    std::string_view name;
    uint64_t bytes;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1000},
      {"kB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
      {"KiB", 1ULL << 10},
      {"MiB", 1ULL << 20},
      {"GiB", 1ULL << 30},
      {"TiB", 1ULL << 40},
  };
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (unit == u.name) found = &u;
  }
  if (found == nullptr) return std::nullopt;
  if (end == digits) {  // an integer: exact
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    uint64_t total = 0;
    if (ec != std::errc() || __builtin_mul_overflow(n, found->bytes, &total)) return std::nullopt;
    return total;
  }
  if (found->bytes == 1) return std::nullopt;  // a fraction of a byte
  const double value = std::strtod(std::string(number).c_str(), nullptr) * double(found->bytes);
  if (!(value < 9.0e18)) return std::nullopt;
  return static_cast<uint64_t>(value);
}

std::optional<uint64_t> parseBytesPerSecond(std::string_view text) {
  return parseBytes(text, true);
}

/** bandwidth_limit: bytes per second, 0 = none (parseBytesPerSecond). */
std::optional<uint64_t> readBandwidth(const Entry& entry, Diagnostics& diags) {
  constexpr std::string_view kHow =
      "use 0 for no limit, an integer number of bytes per second, or a number with a unit: "
      "20MB, 500KB, 1GB (powers of 1000) or 64KiB, 20MiB, 1GiB (powers of 1024)";
  if (!entry.value.IsScalar()) {
    diags.error(entry.value_mark, entry.key + " must be bytes per second such as 20MB, not " +
                                      describeNode(entry.value) + "; " + std::string(kHow));
    return std::nullopt;
  }
  const std::string& text = entry.value.Scalar();
  std::string_view body = text;
  while (!body.empty() && body.front() == ' ') body.remove_prefix(1);
  if (!body.empty() && body.front() == '-' && parseBytesPerSecond(body.substr(1))) {
    diags.error(entry.value_mark, entry.key + " must not be negative (got " + quote(text) + "); " +
                                      std::string(kHow));
    return std::nullopt;
  }
  auto value = parseBytesPerSecond(text);
  if (!value) {
    diags.error(entry.value_mark,
                "invalid " + entry.key + " " + quote(text) + ": " + std::string(kHow));
    return std::nullopt;
  }
  return value;
}

/** spool_limit and other sizes: bytes (parseBytes), 0 allowed. */
std::optional<uint64_t> readSize(const Entry& entry, std::string_view zero_means,
                                 Diagnostics& diags) {
  const std::string how = "use 0 for " + std::string(zero_means) +
                          ", an integer number of bytes, or a number with a unit: 4GB, 500MB "
                          "(powers of 1000) or 4GiB, 512MiB (powers of 1024)";
  if (!entry.value.IsScalar()) {
    diags.error(entry.value_mark, entry.key + " must be a size such as 4GB, not " +
                                      describeNode(entry.value) + "; " + how);
    return std::nullopt;
  }
  const std::string& text = entry.value.Scalar();
  std::string_view body = text;
  while (!body.empty() && body.front() == ' ') body.remove_prefix(1);
  if (!body.empty() && body.front() == '-' && parseBytes(body.substr(1), false)) {
    diags.error(entry.value_mark,
                entry.key + " must not be negative (got " + quote(text) + "); " + how);
    return std::nullopt;
  }
  auto value = parseBytes(text, false);
  if (!value) {
    diags.error(entry.value_mark, "invalid " + entry.key + " " + quote(text) + ": " + how);
    return std::nullopt;
  }
  return value;
}

template <class T>
std::optional<T> readEnum(const Entry& entry, const std::vector<std::pair<std::string, T>>& choices,
                          Diagnostics& diags) {
  std::vector<std::string> names;
  for (const auto& [name, value] : choices) {
    names.push_back(name);
  }
  if (!entry.value.IsScalar()) {
    diags.error(entry.value_mark, entry.key + " must be one of " + joinNames(names) + ", not " +
                                      describeNode(entry.value));
    return std::nullopt;
  }
  const std::string& text = entry.value.Scalar();
  for (const auto& [name, value] : choices) {
    if (text == name) {
      return value;
    }
  }
  std::string message =
      "invalid " + entry.key + " " + quote(text) + ": use one of " + joinNames(names);
  if (auto suggestion = closestMatch(text, names)) {
    message += " (did you mean " + quote(*suggestion) + "?)";
  }
  diags.error(entry.value_mark, message);
  return std::nullopt;
}

std::string resolvePath(const ParseContext& ctx, const std::string& path) {
  if (path.empty()) {
    return path;
  }
  std::filesystem::path p(path);
  if (p.is_absolute() || ctx.base_dir.empty()) {
    return path;
  }
  return (ctx.base_dir / p).lexically_normal().string();
}

// ---- Addresses ----------------------------------------------------------------------------

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

/**
 * Splits "host:port", "[v6]:port", or "host" / "[v6]" when `default_port` is given. On failure
 * sets `why` to a reason that reads after "invalid address "X": ".
 */
std::optional<HostPort> splitHostPort(std::string_view text, std::optional<uint16_t> default_port,
                                      std::string& why) {
  if (text.empty()) {
    why = "it is empty";
    return std::nullopt;
  }
  if (text.find("://") != std::string_view::npos) {
    why = "remove the scheme (such as \"redis://\")";
    return std::nullopt;
  }
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '/') {
      why = "it contains whitespace or \"/\"";
      return std::nullopt;
    }
  }
  std::string_view host;
  std::optional<std::string_view> port_text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      why = "\"]\" is missing after the IPv6 address";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        why = "unexpected text after \"]\"";
        return std::nullopt;
      }
      port_text = rest.substr(1);
    }
  } else {
    size_t colon = text.find(':');
    if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos) {
      why = "put an IPv6 address in brackets, e.g. \"[::1]:6379\"";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
    }
  }
  if (host.empty()) {
    why = "the host is empty";
    return std::nullopt;
  }
  HostPort result{std::string(host), 0};
  if (!port_text) {
    if (!default_port) {
      why = "the port is missing";
      return std::nullopt;
    }
    result.port = *default_port;
    return result;
  }
  auto port = parseInteger(*port_text);
  if (!port || port_text->front() == '+' || port_text->front() == '-') {
    why = "port " + quote(*port_text) + " is not a number";
    return std::nullopt;
  }
  if (*port < 1 || *port > 65535) {
    why = "port " + std::string(*port_text) + " is out of range 1..65535";
    return std::nullopt;
  }
  result.port = static_cast<uint16_t>(*port);
  return result;
}

// ---- Secrets ------------------------------------------------------------------------------

/** Reads a whole file; on failure returns nullopt and sets `why` from errno. */
std::optional<std::string> readWholeFile(const std::string& path, std::string& why) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) {
    text.append(buf, n);
  }
  bool failed = std::ferror(file) != 0;
  int saved_errno = errno;
  std::fclose(file);
  if (failed) {
    why = std::strerror(saved_errno != 0 ? saved_errno : EIO);  // EISDIR for a directory
    return std::nullopt;
  }
  return text;
}

/** "user NAME (uid N)": who the agent runs as, for messages about files it cannot read or write. */
std::string runningUser() {
  const uid_t uid = ::geteuid();
  const struct passwd* pw = ::getpwuid(uid);  // NOLINT(concurrency-mt-unsafe): at load, once
  return "user " + std::string(pw != nullptr ? pw->pw_name : "?") + " (uid " + std::to_string(uid) +
         ")";
}

/** A secret file's contents without the final newline editors and `echo` add. */
void stripFinalNewline(std::string& text) {
  if (!text.empty() && text.back() == '\n') {
    text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
}

/**
 * {credential: NAME}: $CREDENTIALS_DIRECTORY/NAME, the file systemd's LoadCredential= (or
 * SetCredential=, LoadCredentialEncrypted=) gives the service, readable by its DynamicUser.
 */
void readCredential(const Entry& entry, const Entry& credential, const std::string& name,
                    Secret& secret, Diagnostics& diags) {
  const std::string unit_line = "LoadCredential=" + name + ":/etc/xdcr-agent/" + name;
  const char* dir = std::getenv("CREDENTIALS_DIRECTORY");  // NOLINT(concurrency-mt-unsafe)
  if (dir == nullptr || *dir == '\0') {
    diags.error(credential.value_mark,
                entry.key + " {credential: " + name +
                    "}: CREDENTIALS_DIRECTORY is not set, so there are no systemd credentials "
                    "(the agent was not started by systemd with one); put the secret in "
                    "/etc/xdcr-agent/" +
                    name + " (root-owned, mode 0600) and add \"" + unit_line +
                    "\" to the unit's [Service] section (systemctl edit xdcr-agent), or outside "
                    "systemd use {env: NAME} or {file: PATH}");
    return;
  }
  const std::string path = std::string(dir) + "/" + name;
  std::string why;
  auto contents = readWholeFile(path, why);
  if (!contents) {
    diags.error(credential.value_mark,
                entry.key + " {credential: " + name + "}: cannot read " + path + ": " + why +
                    "; the unit passes no credential " + quote(name) + ": add \"" + unit_line +
                    "\" to its [Service] section (systemctl edit xdcr-agent), with the secret in "
                    "/etc/xdcr-agent/" +
                    name);
    return;
  }
  stripFinalNewline(*contents);
  if (contents->empty()) {
    diags.error(credential.value_mark, entry.key + " {credential: " + name + "}: " + path +
                                           " is empty; write the " + entry.key +
                                           " into the file LoadCredential= names");
  }
  secret.value = std::move(*contents);
}

// Messages here name the variable or file, never the value: they end up in logs.
Secret readSecret(const Entry& entry, const ParseContext& ctx, Diagnostics& diags) {
  Secret secret;
  secret.mark = entry.value_mark;
  const YAML::Node& node = entry.value;
  if (node.IsScalar()) {
    if (node.Scalar().empty()) {
      diags.error(entry.value_mark, entry.key + " is empty; remove the key for no " + entry.key +
                                        ", or use {env: NAME}, {file: PATH} or {credential: NAME}");
      return secret;
    }
    secret.kind = Secret::Kind::Plain;
    secret.value = node.Scalar();
    return secret;
  }
  if (!node.IsMap()) {
    diags.error(entry.value_mark,
                entry.key +
                    " must be a string, {env: NAME}, {file: PATH} or {credential: NAME}, not " +
                    describeNode(node));
    return secret;
  }
  MapReader reader(node, "in " + entry.key, {"env", "file", "credential"}, diags);
  const Entry* env = reader.find("env");
  const Entry* file = reader.find("file");
  const Entry* credential = reader.find("credential");
  const int given = (env != nullptr) + (file != nullptr) + (credential != nullptr);
  if (given > 1) {
    diags.error(reader.mark(),
                entry.key + " takes one of env, file or credential, not several; keep one");
    return secret;
  }
  if (given == 0) {
    if (!reader.hadUnknown()) {
      diags.error(reader.mark(), entry.key +
                                     " must be {env: NAME}, {file: PATH} or {credential: NAME}; "
                                     "add one of them");
    }
    return secret;
  }
  if (credential != nullptr) {
    auto name = readNonEmpty(*credential, "name the credential (LoadCredential=NAME:PATH)", diags);
    if (!name) return secret;
    if (name->find('/') != std::string::npos || *name == "." || *name == "..") {
      diags.error(credential->value_mark,
                  "credential name " + quote(*name) +
                      " is not a file name; use the NAME of LoadCredential=NAME:PATH (no '/')");
      return secret;
    }
    secret.kind = Secret::Kind::Credential;
    secret.ref = *name;
    if (ctx.resolve_environment) readCredential(entry, *credential, *name, secret, diags);
    return secret;
  }
  if (env != nullptr) {
    auto name = readNonEmpty(*env, "name the environment variable that holds the secret", diags);
    if (!name) {
      return secret;
    }
    secret.kind = Secret::Kind::Env;
    secret.ref = *name;
    if (ctx.resolve_environment) {
      const char* value = std::getenv(name->c_str());
      if (value == nullptr) {
        diags.error(env->value_mark, "environment variable " + quote(*name) +
                                         " is not set; export it before starting the agent (or "
                                         "check the file with validate --no-environment)");
      } else if (*value == '\0') {
        diags.error(env->value_mark,
                    "environment variable " + quote(*name) + " is empty; export the " + entry.key +
                        " in it (an empty " + entry.key + " is never valid), or remove the key");
      } else {
        secret.value = value;
      }
    }
    return secret;
  }
  auto path = readNonEmpty(*file, "give the path of the file that holds the secret", diags);
  if (!path) {
    return secret;
  }
  secret.kind = Secret::Kind::File;
  secret.ref = *path;
  if (ctx.resolve_environment) {
    std::string resolved = resolvePath(ctx, *path);
    std::string why;
    auto contents = readWholeFile(resolved, why);
    if (!contents) {
      std::string shown = quote(*path);
      if (resolved != *path) {
        shown += " (" + resolved + ")";
      }
      diags.error(file->value_mark,
                  "cannot read " + entry.key + " file " + shown + " as " + runningUser() + ": " +
                      why +
                      "; create it or fix the path, or under systemd pass it as a credential: "
                      "LoadCredential=NAME:" +
                      resolved +
                      " in the unit and {credential: NAME} "
                      "here (a DynamicUser= service cannot read a root-owned 0600 file)");
    } else {
      // Editors and `echo` add a final newline that is never part of the password.
      stripFinalNewline(*contents);
      if (contents->empty()) {
        diags.error(file->value_mark, entry.key + " file " + quote(*path) +
                                          " is empty; write the " + entry.key +
                                          " into it, or remove the key");
      }
      secret.value = std::move(*contents);
    }
  }
  return secret;
}

/**
 * `run` creates agent.state_dir if needed and writes its checkpoints there: a directory it cannot
 * create or write (a read-only file system under systemd's ProtectSystem=strict, a directory of
 * another user) is an error now, at validate and before run starts, not a failure of run that a
 * restart loop repeats. Nothing is created here.
 */
void checkStateDir(const std::string& dir, Mark mark, Diagnostics& diags) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path existing = fs::path(dir);
  while (!existing.empty() && !fs::exists(existing, ec) && !ec) {
    existing = existing.parent_path();
  }
  std::string why;
  if (ec) {
    why = "cannot look at " + existing.string() + ": " + ec.message();
  } else if (existing.empty()) {
    why = "no part of the path exists";
  } else if (!fs::is_directory(existing, ec)) {
    why = existing.string() + " is not a directory";
  } else if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    why = (existing == fs::path(dir) ? "cannot write " : "cannot create it in ") +
          existing.string() + ": " + std::strerror(err);
  }
  if (why.empty()) return;
  diags.error(mark, "agent.state_dir " + quote(dir) + " cannot be created or written as " +
                        runningUser() + ": " + why +
                        "; under systemd the unit's StateDirectory=xdcr-agent gives the agent "
                        "/var/lib/xdcr-agent: set agent.state_dir: /var/lib/xdcr-agent; "
                        "elsewhere choose a directory this user can write");
}

// ---- Sections -----------------------------------------------------------------------------

void parseAgent(const Entry& section, const ParseContext& ctx, AgentConfig& agent,
                Diagnostics& diags) {
  if (!expectMap(section.value, section.value_mark, "agent", diags)) {
    return;
  }
  MapReader reader(section.value, "in agent",
                   {"admin_listen", "admin_token", "state_dir", "log_level", "log_format",
                    "threads", "watch_config"},
                   diags);
  if (const Entry* e = reader.get("admin_listen")) {
    if (auto text = readString(*e, diags)) {
      std::string why;
      if (splitHostPort(*text, std::nullopt, why)) {
        agent.admin_listen = *text;
      } else {
        diags.error(e->value_mark, "invalid admin_listen " + quote(*text) + ": " + why +
                                       "; use host:port, e.g. 127.0.0.1:9464");
      }
    }
  }
  if (const Entry* e = reader.get("admin_token")) {
    agent.admin_token = readSecret(*e, ctx, diags);
    if (agent.admin_token.present() && !agent.admin_listen) {
      diags.warning(e->value_mark,
                    "admin_token has no effect without admin_listen (no admin server runs)");
    }
  }
  if (const Entry* e = reader.get("state_dir")) {
    if (auto text = readNonEmpty(*e, "give a directory, e.g. ./xdcr-state", diags)) {
      agent.state_dir = *text;
    }
  }
  if (const Entry* e = reader.get("log_level")) {
    if (auto level = readEnum<LogLevel>(*e,
                                        {{"trace", LogLevel::Trace},
                                         {"debug", LogLevel::Debug},
                                         {"info", LogLevel::Info},
                                         {"warn", LogLevel::Warn},
                                         {"error", LogLevel::Error}},
                                        diags)) {
      agent.log_level = *level;
    }
  }
  if (const Entry* e = reader.get("log_format")) {
    if (auto format = readEnum<LogFormat>(
            *e, {{"text", LogFormat::Text}, {"json", LogFormat::Json}}, diags)) {
      agent.log_format = *format;
    }
  }
  if (const Entry* e = reader.get("threads")) {
    if (auto n = readInt(e->value, e->value_mark, "threads", 1, kMaxThreads, diags)) {
      agent.threads = static_cast<int>(*n);
    }
  }
  if (const Entry* e = reader.get("watch_config")) {
    if (auto d = readDuration(*e, DurationRule::NonNegative, diags)) agent.watch_config = *d;
  }
}

void parseClock(const Entry& section, const ParseContext& ctx, ClockConfig& clock,
                Diagnostics& diags) {
  if (!expectMap(section.value, section.value_mark, "clock", diags)) {
    return;
  }
  MapReader reader(section.value, "in clock",
                   {"ntp_servers", "nts", "nts_ca_file", "check_interval", "max_skew", "on_skew"},
                   diags);
  if (const Entry* e = reader.get("ntp_servers"); e != nullptr && expectList(*e, diags)) {
    for (const auto& item : e->value) {
      Mark mark = markOf(item);
      auto text = readString(item, mark, "an NTP server", diags);
      if (!text) {
        continue;
      }
      std::string why;
      if (splitHostPort(*text, kDefaultNtpPort, why)) {
        clock.ntp_servers.push_back(*text);
      } else {
        diags.error(mark, "invalid NTP server " + quote(*text) + ": " + why +
                              "; use host or host:port, e.g. 127.0.0.1:123");
      }
    }
  }
  if (const Entry* e = reader.get("nts")) {
    if (auto value = readBool(*e, diags)) {
      clock.nts = *value;
    }
  }
  if (const Entry* e = reader.get("nts_ca_file")) {
    if (auto text = readString(*e, diags)) {
      clock.nts_ca_file = resolvePath(ctx, *text);
    }
  }
  if (const Entry* e = reader.get("check_interval")) {
    if (auto d = readDuration(*e, DurationRule::Positive, diags)) {
      clock.check_interval = *d;
    }
  }
  if (const Entry* e = reader.get("max_skew")) {
    if (auto d = readDuration(*e, DurationRule::NonNegative, diags)) {
      clock.max_skew = *d;
    }
  }
  if (const Entry* e = reader.get("on_skew")) {
    if (auto action = readEnum<SkewAction>(*e,
                                           {{"warn", SkewAction::Warn},
                                            {"pause", SkewAction::Pause},
                                            {"compensate", SkewAction::Compensate}},
                                           diags)) {
      clock.on_skew = *action;
    }
  }
}

std::optional<TlsConfig> parseTls(const Entry& section, const ParseContext& ctx,
                                  Diagnostics& diags) {
  if (!expectMap(section.value, section.value_mark, "tls", diags)) {
    return std::nullopt;
  }
  TlsConfig tls;
  MapReader reader(section.value, "in tls",
                   {"ca_file", "cert_file", "key_file", "server_name", "verify"}, diags);
  // A file that cannot be read now will not be readable at the first connection either: say so
  // at load time (with LoadOptions::check_files, as the command line loads; not with validate
  // --no-environment: files may be mounted only where the agent runs).
  auto readPath = [&](const char* key, std::string& out) -> const Entry* {
    const Entry* e = reader.get(key);
    if (e != nullptr) {
      if (auto text = readNonEmpty(*e, std::string("give a PEM file, or remove ") + key, diags)) {
        out = resolvePath(ctx, *text);
        std::string why;
        if (ctx.check_files && !readWholeFile(out, why)) {
          std::string shown = quote(*text);
          if (out != *text) {
            shown += " (" + out + ")";
          }
          diags.error(e->value_mark, std::string("cannot read tls.") + key + " " + shown + ": " +
                                         why + "; create it or fix the path");
        }
      }
    }
    return e;
  };
  readPath("ca_file", tls.ca_file);
  const Entry* cert = readPath("cert_file", tls.cert_file);
  const Entry* key = readPath("key_file", tls.key_file);
  if (const Entry* e = reader.get("server_name")) {
    if (auto text = readNonEmpty(*e,
                                 "give the name in the server's certificate, or remove "
                                 "server_name to check the address's host",
                                 diags)) {
      tls.server_name = *text;
    }
  }
  if (const Entry* e = reader.get("verify")) {
    if (auto value = readBool(*e, diags)) {
      tls.verify = *value;
    }
  }
  // A half-configured client certificate is a mistake in the file itself. (An entry that is
  // present but invalid was reported above.)
  if (!tls.cert_file.empty() && key == nullptr) {
    diags.error(cert->value_mark,
                "cert_file is set but key_file is not; a client certificate needs both: add "
                "key_file or remove cert_file");
  } else if (!tls.key_file.empty() && cert == nullptr) {
    diags.error(key->value_mark,
                "key_file is set but cert_file is not; a client certificate needs both: add "
                "cert_file or remove key_file");
  }
  return tls;
}

/** true if every key matching `later` also matches `earlier`, for the cases that are cheap. */
bool globCovers(const std::string& earlier, const std::string& later) {
  if (earlier == later || earlier == "*") {
    return true;
  }
  // "LITERAL*" covers every pattern whose literal prefix starts with LITERAL.
  auto isMeta = [](char c) { return c == '*' || c == '?' || c == '[' || c == '\\'; };
  if (earlier.size() < 2 || earlier.back() != '*') {
    return false;
  }
  std::string_view prefix(earlier.data(), earlier.size() - 1);
  for (char c : prefix) {
    if (isMeta(c)) {
      return false;
    }
  }
  size_t literal = 0;
  while (literal < later.size() && !isMeta(later[literal])) {
    ++literal;
  }
  return std::string_view(later).substr(0, literal).starts_with(prefix);
}

/** The expiry policies of a collection beside max_ttl (expiry-semantics.md §8). */
void parseCollectionPolicies(const MapReader& reader, CollectionConfig& collection,
                             Diagnostics& diags) {
  const Entry* default_ttl = reader.get("default_ttl");
  if (default_ttl != nullptr) {
    const std::string text = default_ttl->value.IsScalar() ? default_ttl->value.Scalar() : "";
    if (text == "-1") {
      collection.default_ttl = CollectionConfig::kNoDefault;
    } else if (!text.empty() && text.front() == '-') {
      diags.error(default_ttl->value_mark,
                  "default_ttl " + quote(text) +
                      " is neither -1 nor a positive duration; use -1 (documents never expire "
                      "unless their ttl_field says so) or a duration such as 1h");
    } else if (auto d = readDuration(*default_ttl, DurationRule::NonNegative, diags)) {
      if (d->count() == 0) {
        diags.error(default_ttl->value_mark,
                    "default_ttl must not be 0 (Cosmos DB takes -1 or a positive number); use -1 "
                    "for no default, a positive duration such as 1h, or remove default_ttl for "
                    "no policy");
      } else {
        collection.default_ttl = *d;
      }
    }
  }
  auto field = [&](const char* key) -> std::optional<std::string> {
    const Entry* e = reader.get(key);
    if (e == nullptr) return std::nullopt;
    return readNonEmpty(*e, "name the JSON field of the document, such as ttl or expireAt", diags);
  };
  if (auto f = field("ttl_field")) collection.ttl_field = *f;
  if (auto f = field("expire_at_field")) collection.expire_at_field = *f;
  const Entry* expire_after = reader.get("expire_after");
  if (expire_after != nullptr) {
    if (auto d = readDuration(*expire_after, DurationRule::NonNegative, diags)) {
      collection.expire_after = *d;
    }
  }
  if (const Entry* e = reader.get("max_lifetime")) {
    if (auto d = readDuration(*e, DurationRule::NonNegative, diags)) collection.max_lifetime = *d;
  }
  const Entry* ttl_field = reader.get("ttl_field");
  const Entry* expire_at = reader.get("expire_at_field");
  if (ttl_field != nullptr && expire_at != nullptr) {
    diags.error(expire_at->key_mark,
                "ttl_field (line " + std::to_string(ttl_field->key_mark.line) +
                    ") and expire_at_field are both set on this collection: a document's "
                    "deadline comes from one of them; keep ttl_field (Cosmos DB) or "
                    "expire_at_field (ArangoDB), or put the keys in two collections");
  }
  if (ttl_field != nullptr && default_ttl == nullptr) {
    diags.error(ttl_field->key_mark,
                "ttl_field needs default_ttl on the same collection (Cosmos DB ignores a "
                "document's ttl when its container has no DefaultTTL); add default_ttl: -1 to "
                "apply the documents' ttl and nothing else, or default_ttl: DURATION for a "
                "default");
  }
  if (expire_after != nullptr && expire_at == nullptr) {
    diags.error(expire_after->key_mark,
                "expire_after is added to the date in expire_at_field, which this collection "
                "does not set; add expire_at_field: NAME or remove expire_after");
  }
}

void parseCollections(const Entry& section, BucketConfig& bucket, Diagnostics& diags) {
  if (!expectList(section, diags)) {
    return;
  }
  struct Seen {
    std::string name;
    std::string keys;
    int line;
  };
  std::vector<Seen> seen;
  for (const auto& item : section.value) {
    Mark mark = markOf(item);
    if (!expectMap(item, mark, "a collection", diags)) {
      continue;
    }
    MapReader reader(item, "in collection",
                     {"name", "keys", "max_ttl", "default_ttl", "ttl_field", "expire_at_field",
                      "expire_after", "max_lifetime"},
                     diags);
    CollectionConfig collection;
    collection.mark = mark;
    const Entry* name_entry = reader.require("name", "name: sessions", diags);
    const Entry* keys_entry = reader.require("keys", "keys: \"sess:*\"", diags);
    std::optional<std::string> name;
    std::optional<std::string> keys;
    if (name_entry != nullptr) {
      name = readNonEmpty(*name_entry, "give the collection a name", diags);
    }
    if (keys_entry != nullptr) {
      keys = readNonEmpty(*keys_entry, "give a glob such as \"sess:*\"", diags);
    }
    if (const Entry* e = reader.get("max_ttl")) {
      if (auto d = readDuration(*e, DurationRule::NonNegative, diags)) {
        collection.max_ttl = *d;
      }
    }
    parseCollectionPolicies(reader, collection, diags);
    if (!name || !keys) {
      continue;
    }
    bool duplicate = false;
    for (const Seen& other : seen) {
      if (other.name == *name) {
        diags.error(name_entry->value_mark, "duplicate collection name " + quote(*name) +
                                                " in this bucket (first at line " +
                                                std::to_string(other.line) +
                                                "); give each collection a unique name");
        duplicate = true;
        break;
      }
    }
    if (!duplicate) {
      // First match wins (expiry-semantics.md §3), so a pattern fully covered by an earlier one
      // is dead configuration. Legal, hence only a warning.
      for (const Seen& other : seen) {
        if (globCovers(other.keys, *keys)) {
          diags.warning(keys_entry->value_mark,
                        "collection " + quote(*name) + " (keys " + quote(*keys) +
                            ") never matches anything: collection " + quote(other.name) +
                            " (line " + std::to_string(other.line) + ", keys " + quote(other.keys) +
                            ") comes first and matches every key it would; reorder or remove one");
          break;
        }
      }
    }
    collection.name = *name;
    collection.keys = *keys;
    seen.push_back({*name, *keys, mark.line});
    bucket.collections.push_back(std::move(collection));
  }
}

/** `only_db0`: a Redis Cluster, whose one database is db 0. */
void parseBuckets(const Entry& section, const std::string& cluster_name, const char* only_db0,
                  std::vector<BucketConfig>& buckets, Diagnostics& diags) {
  if (!expectList(section, diags)) {
    return;
  }
  std::map<int, Mark> seen_dbs;
  for (const auto& item : section.value) {
    Mark mark = markOf(item);
    if (!expectMap(item, mark, "a bucket", diags)) {
      continue;
    }
    MapReader reader(item, "in bucket", {"db", "max_ttl", "collections"}, diags);
    BucketConfig bucket;
    bucket.mark = mark;
    // -1 = not given or invalid (a plain int: GCC 12 warns falsely about optional<int64_t> here).
    int64_t db_value = -1;
    if (const Entry* e = reader.require("db", "db: 0", diags)) {
      std::optional<int64_t> db = readInt(e->value, e->value_mark, "db", 0, kMaxDb, diags);
      if (db && only_db0 != nullptr && *db != 0) {
        diags.error(e->value_mark, "bucket for db " + std::to_string(*db) + " in cluster " +
                                       quote(cluster_name) + ": " + only_db0 +
                                       " has only db 0; use db: 0 (and "
                                       "collections to tell key sets apart)");
        db.reset();
      }
      if (db) {
        db_value = *db;
        auto [it, inserted] = seen_dbs.emplace(static_cast<int>(*db), e->value_mark);
        if (!inserted) {
          diags.error(e->value_mark, "duplicate bucket for db " + std::to_string(*db) +
                                         " in cluster " + quote(cluster_name) + " (first at line " +
                                         std::to_string(it->second.line) +
                                         "); merge them into one bucket");
          db.reset();
        }
      }
    }
    if (const Entry* e = reader.get("max_ttl")) {
      if (auto d = readDuration(*e, DurationRule::NonNegative, diags)) {
        bucket.max_ttl = *d;
      }
    }
    if (const Entry* e = reader.get("collections")) {
      parseCollections(*e, bucket, diags);
    }
    if (db_value >= 0) {
      bucket.db = static_cast<int>(db_value);
      buckets.push_back(std::move(bucket));
    }
  }
}

/**
 * A list of "host:port" nodes (`addresses`, `sentinels`): at least one, each valid, none twice.
 * `what` names one item in messages ("seed node", "Sentinel"). Returns false when the list is
 * unusable (reported).
 */
bool parseNodeList(const Entry& entry, std::string_view what, uint16_t default_port,
                   std::string_view example, std::vector<NodeAddress>& out, Diagnostics& diags) {
  if (!expectList(entry, diags)) {
    return false;
  }
  if (entry.value.size() == 0) {
    diags.error(entry.value_mark, entry.key + " is empty; list at least one " + std::string(what) +
                                      ", e.g. " + std::string(example));
    return false;
  }
  bool ok = true;
  std::map<std::string, int> seen;  // "host:port" (host lower-cased) -> line
  for (const auto& item : entry.value) {
    Mark mark = markOf(item);
    auto text = readString(item, mark, "a " + std::string(what), diags);
    if (!text) {
      ok = false;
      continue;
    }
    std::string why;
    auto hp = splitHostPort(*text, default_port, why);
    if (!hp) {
      diags.error(mark, "invalid address " + quote(*text) + " in " + entry.key + ": " + why +
                            "; use host:port, e.g. " + std::string(example));
      ok = false;
      continue;
    }
    std::string lower = hp->host;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto [it, inserted] = seen.emplace(joinHostPort(lower, hp->port), mark.line);
    if (!inserted) {
      diags.error(mark, quote(*text) + " is listed twice in " + entry.key + " (first at line " +
                            std::to_string(it->second) + "); remove one of them");
      ok = false;
      continue;
    }
    out.push_back({hp->host, hp->port});
  }
  return ok && !out.empty();
}

/** The keys of one cluster kind that another kind does not take, with what to use instead. */
void refuseForeignKeys(const MapReader& reader, const std::string& type, Diagnostics& diags) {
  struct Foreign {
    const char* key;
    const char* kind;  // the type that takes it
  };
  static constexpr Foreign kForeign[] = {
      {"address", "redis"},
      {"addresses", "redis_cluster"},
      {"read_from", "redis_cluster"},
      {"slots", "redis_cluster"},
      {"sentinels", "redis_sentinel"},
      {"master_name", "redis_sentinel"},
      {"sentinel_username", "redis_sentinel"},
      {"sentinel_password", "redis_sentinel"},
  };
  for (const auto& f : kForeign) {
    const Entry* e = reader.find(f.key);
    if (e == nullptr || type == f.kind) {
      continue;
    }
    if (type == "memcached" && std::string_view(f.key) == "address") continue;  // it takes one
    std::string key = f.key;
    std::string message = key;
    message.append(" is not used by a cluster of type ")
        .append(type)
        .append(" (it is for type ")
        .append(f.kind)
        .append("); ");
    if (type == "redis") {
      message += key == "addresses"
                     ? "a single server takes address: host:port; for a Redis Cluster set "
                       "type: redis_cluster"
                 : key == "read_from" || key == "slots"
                     ? "remove it, or set type: redis_cluster"
                     : "for a Sentinel-managed master set type: redis_sentinel (with sentinels "
                       "and master_name)";
    } else if (type == "redis_cluster") {
      message += key == "address" ? "list the seed nodes as addresses: [host:port, ...]"
                                  : "remove it (a Redis Cluster is reached through addresses:)";
    } else if (type == "memcached") {
      message += key == "addresses" || key == "sentinels"
                     ? "a memcached target is one server: write address: host:port"
                     : "remove it";
    } else {  // redis_sentinel
      message += key == "address"     ? "list the Sentinels as sentinels: [host:port, ...]; the "
                                        "master's address comes from them"
                 : key == "addresses" ? "list the Sentinels as sentinels: [host:port, ...]"
                                      : "remove it";
    }
    diags.error(e->key_mark, message);
  }
}

/** One `slots` entry: "N" or "A-B" (a YAML integer N too). nullopt: invalid (reported). */
std::optional<std::pair<int, int>> parseSlotRange(const YAML::Node& item, const Mark& mark,
                                                  const std::string& where, Diagnostics& diags) {
  auto text = readString(item, mark, "a slot range", diags);
  if (!text) return std::nullopt;
  auto number = [](std::string_view s) -> std::optional<int> {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    int v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
  };
  const size_t dash = text->find('-');
  const auto lo = number(std::string_view(*text).substr(0, dash));
  const auto hi = dash == std::string::npos ? lo : number(std::string_view(*text).substr(dash + 1));
  if (!lo || !hi) {
    diags.error(mark, "invalid slot range " + quote(*text) + " in " + where +
                          "; write \"FIRST-LAST\" or one slot, e.g. \"0-8191\"");
    return std::nullopt;
  }
  if (*lo < 0 || *hi > 16383 || *lo > *hi) {
    diags.error(mark, "slot range " + quote(*text) + " in " + where +
                          " is not within 0-16383 with FIRST <= LAST; a Redis Cluster has the "
                          "slots 0 to 16383");
    return std::nullopt;
  }
  return std::make_pair(*lo, *hi);
}

/** `slots`: a list of slot ranges, sorted into `out`; overlaps are refused. */
void parseSlotRanges(const Entry& entry, const std::string& cluster,
                     std::vector<std::pair<int, int>>& out, Diagnostics& diags) {
  if (!expectList(entry, diags)) return;
  const std::string where = "slots of cluster " + quote(cluster);
  if (entry.value.size() == 0) {
    diags.error(entry.value_mark, where +
                                      " is empty; list the slot ranges this agent replicates, e.g. "
                                      "[\"0-8191\"], or remove slots to replicate every slot");
    return;
  }
  std::vector<std::pair<std::pair<int, int>, Mark>> ranges;
  for (const auto& item : entry.value) {
    const Mark mark = markOf(item);
    if (auto r = parseSlotRange(item, mark, where, diags)) ranges.emplace_back(*r, mark);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  auto text = [](const std::pair<int, int>& r) {
    return r.first == r.second ? std::to_string(r.first)
                               : std::to_string(r.first) + "-" + std::to_string(r.second);
  };
  for (const auto& [range, mark] : ranges) {
    // (sorted by start: a range overlaps an earlier one iff it starts before the end of the one
    // that reaches furthest, which is the last one kept)
    if (!out.empty() && range.first <= out.back().second) {
      diags.error(mark, "slot range " + text(range) + " overlaps " + text(out.back()) + " in " +
                            where + "; list each slot once");
      continue;
    }
    out.push_back(range);
  }
}

void parseCluster(const Entry& entry, const ParseContext& ctx, ClusterConfig& cluster,
                  ClusterInfo& info, Diagnostics& diags) {
  cluster.name = entry.key;
  cluster.mark = entry.key_mark;
  if (entry.value.IsNull()) {
    diags.error(entry.key_mark,
                "cluster " + quote(entry.key) + " is empty; give it at least address: host:port");
    return;
  }
  if (!expectMap(entry.value, entry.value_mark, "cluster " + quote(entry.key), diags)) {
    return;
  }
  MapReader reader(entry.value, "in cluster",
                   {"type", "address", "addresses", "read_from", "slots", "sentinels",
                    "master_name", "sentinel_username", "sentinel_password", "link_timeout",
                    "spool_limit", "username", "password", "tls", "buckets", "non_strings"},
                   diags);
  bool type_ok = true;
  if (const Entry* e = reader.get("type")) {
    info.type = e->value_mark;
    type_ok = false;
    if (auto kind = readEnum<ClusterKind>(*e,
                                          {{"redis", ClusterKind::Redis},
                                           {"redis_cluster", ClusterKind::RedisCluster},
                                           {"redis_sentinel", ClusterKind::RedisSentinel},
                                           {"memcached", ClusterKind::Memcached}},
                                          diags)) {
      cluster.kind = *kind;
      cluster.type = e->value.Scalar();
      type_ok = true;
    }
  }
  // Of an unknown type nothing more is required: its keys may be right for the type meant.
  if (type_ok) {
    refuseForeignKeys(reader, cluster.type, diags);
  }
  // A node list written for another kind was reported above with what to write instead; a
  // second "missing key" message for the same mistake would only add noise.
  const bool other_nodes = reader.find("address") != nullptr ||
                           reader.find("addresses") != nullptr ||
                           reader.find("sentinels") != nullptr;
  const bool memcached = type_ok && cluster.kind == ClusterKind::Memcached;
  if (memcached) cluster.port = kDefaultMemcachedPort;
  if (type_ok && (cluster.kind == ClusterKind::Redis || memcached) &&
      (reader.find("address") != nullptr || !other_nodes)) {
    if (const Entry* e = reader.require("address", "address: host:port", diags)) {
      if (auto text = readString(*e, diags)) {
        std::string why;
        if (auto hp =
                splitHostPort(*text, memcached ? kDefaultMemcachedPort : kDefaultRedisPort, why)) {
          cluster.host = hp->host;
          cluster.port = hp->port;
          info.address_ok = true;
        } else {
          diags.error(e->value_mark, "invalid address " + quote(*text) + ": " + why +
                                         "; use host:port, e.g. 127.0.0.1:6379");
        }
      }
    }
  }
  if (type_ok && cluster.kind == ClusterKind::RedisCluster &&
      (reader.find("addresses") != nullptr || !other_nodes)) {
    if (const Entry* e = reader.require(
            "addresses", "addresses: [host:port, ...] (any nodes of the cluster)", diags)) {
      if (parseNodeList(*e, "seed node", kDefaultRedisPort, "127.0.0.1:7000", cluster.seeds,
                        diags)) {
        cluster.host = cluster.seeds.front().host;
        cluster.port = cluster.seeds.front().port;
        info.address_ok = true;
      }
    }
  }
  if (type_ok && cluster.kind == ClusterKind::RedisCluster) {
    if (const Entry* e = reader.get("read_from")) {
      info.read_from = e->key_mark;
      if (auto from = readEnum<ReadFrom>(
              *e, {{"master", ReadFrom::Master}, {"replica", ReadFrom::Replica}}, diags)) {
        cluster.read_from = *from;
      }
    }
    if (const Entry* e = reader.get("slots")) {
      info.slots = e->key_mark;
      parseSlotRanges(*e, entry.key, cluster.slots, diags);
    }
  }
  if (type_ok && cluster.kind == ClusterKind::RedisSentinel) {
    bool sentinels_ok = false;
    const Entry* e_sentinels =
        reader.find("sentinels") != nullptr || !other_nodes
            ? reader.require("sentinels", "sentinels: [host:port, ...]", diags)
            : nullptr;
    if (const Entry* e = e_sentinels) {
      sentinels_ok = parseNodeList(*e, "Sentinel", kDefaultSentinelPort, "127.0.0.1:26379",
                                   cluster.sentinels, diags);
    }
    bool name_ok = false;
    if (const Entry* e = reader.require(
            "master_name", "master_name: NAME (the name the Sentinels monitor it by)", diags)) {
      if (auto name =
              readNonEmpty(*e, "give the name the Sentinels monitor the master by", diags)) {
        cluster.master_name = *name;
        name_ok = true;
      }
    }
    if (sentinels_ok) {
      cluster.host = cluster.sentinels.front().host;
      cluster.port = cluster.sentinels.front().port;
      info.address_ok = name_ok;
    }
    if (const Entry* e = reader.get("sentinel_username")) {
      if (auto text = readString(*e, diags)) {
        cluster.sentinel_username = *text;
      }
    }
    if (const Entry* e = reader.get("sentinel_password")) {
      cluster.sentinel_password = readSecret(*e, ctx, diags);
    }
    if (!cluster.sentinel_username.empty() && !cluster.sentinel_password.present()) {
      if (const Entry* e = reader.find("sentinel_username")) {
        diags.warning(e->value_mark,
                      "sentinel_username has no effect without sentinel_password (AUTH needs "
                      "both); add sentinel_password or remove sentinel_username");
      }
    }
  }
  if (const Entry* e = reader.get("link_timeout")) {
    info.link_timeout = e->value_mark;
    if (auto d = readDuration(*e, DurationRule::Positive, diags)) {
      cluster.link_timeout = *d;
    }
  }
  if (const Entry* e = reader.get("spool_limit")) {
    info.spool_limit = e->key_mark;
    if (auto v = readSize(*e, "no spool (the source read at the targets' pace)", diags)) {
      cluster.spool_limit = *v;
    }
  }
  if (const Entry* e = reader.get("username")) {
    if (auto text = readString(*e, diags)) {
      cluster.username = *text;
    }
  }
  if (const Entry* e = reader.get("password")) {
    cluster.password = readSecret(*e, ctx, diags);
  }
  if (const Entry* e = reader.get("tls")) {
    cluster.tls = parseTls(*e, ctx, diags);
  }
  if (!cluster.username.empty() && !cluster.password.present()) {
    if (const Entry* e = reader.find("username")) {
      diags.warning(e->value_mark,
                    "username has no effect without password (AUTH needs both); "
                    "add password or remove username");
    }
  }
  if (const Entry* e = reader.get("buckets")) {
    const char* only_db0 = !type_ok                                    ? nullptr
                           : cluster.kind == ClusterKind::RedisCluster ? "a Redis Cluster"
                           : memcached                                 ? "memcached"
                                                                       : nullptr;
    parseBuckets(*e, cluster.name, only_db0, cluster.buckets, diags);
  }
  if (memcached) {
    // memcached 1.6 has no TLS or SASL on the text/meta protocol as the agent speaks it.
    for (const char* key : {"username", "password", "tls"}) {
      if (const Entry* e = reader.find(key)) {
        diags.error(
            e->key_mark,
            std::string(key) +
                " is not supported for a cluster of type memcached (the "
                "agent speaks memcached's plain meta protocol, without TLS or SASL); remove " +
                key + " and reach memcached over a trusted network or a tunnel");
      }
    }
  }
  if (const Entry* e = reader.get("non_strings")) {
    if (!memcached) {
      if (type_ok) {
        diags.error(e->key_mark,
                    "non_strings is for a cluster of type memcached (what a value "
                    "that is not a string becomes there); remove it");
      }
    } else if (auto v = readEnum<NonStrings>(*e,
                                             {{"refuse", NonStrings::Refuse},
                                              {"dump", NonStrings::Dump},
                                              {"json", NonStrings::Json}},
                                             diags)) {
      cluster.non_strings = *v;
    }
  }
}

void parseClusters(const Entry& section, const ParseContext& ctx, ParsedConfig& out,
                   Diagnostics& diags) {
  if (!expectMap(section.value, section.value_mark, "clusters", diags)) {
    return;
  }
  // yaml-cpp keeps every pair of a mapping (duplicates included) in file order; walking the
  // pairs is the only way to notice a cluster defined twice.
  for (const Entry& entry : entriesOf(section.value, diags)) {
    if (entry.key.empty()) {
      diags.error(entry.key_mark, "a cluster name is empty; give the cluster a name");
      continue;
    }
    if (const ClusterConfig* first = out.config.cluster(entry.key)) {
      diags.error(entry.key_mark,
                  "duplicate cluster name " + quote(entry.key) + " (first defined at line " +
                      std::to_string(first->mark.line) + "); give each cluster a unique name");
      continue;
    }
    ClusterConfig cluster;
    ClusterInfo info;
    parseCluster(entry, ctx, cluster, info, diags);
    out.cluster_info[entry.key] = info;
    out.config.clusters.emplace(entry.key, std::move(cluster));
  }
}

void parseRegexList(const Entry& entry, std::vector<Located<std::string>>& out,
                    Diagnostics& diags) {
  if (!expectList(entry, diags)) {
    return;
  }
  for (const auto& item : entry.value) {
    Mark mark = markOf(item);
    auto text = readString(item, mark, "a regular expression", diags);
    if (!text) {
      continue;
    }
    RE2::Options options;
    options.set_log_errors(false);  // the error goes into the diagnostic, not to stderr
    RE2 re(*text, options);
    if (!re.ok()) {
      diags.error(mark, "invalid regular expression " + quote(*text) + " in " + entry.key + ": " +
                            re.error() + "; fix it (RE2 syntax)");
      continue;
    }
    out.push_back({*text, mark});
  }
}

void parseFilters(const Entry& section, FilterConfig& filters, Diagnostics& diags) {
  if (!expectMap(section.value, section.value_mark, "filters", diags)) {
    return;
  }
  MapReader reader(section.value, "in filters",
                   {"include_keys", "exclude_keys", "drop_expirations", "drop_deletions",
                    "strip_ttl", "replicate_flush"},
                   diags);
  if (const Entry* e = reader.get("include_keys")) {
    parseRegexList(*e, filters.include_keys, diags);
  }
  if (const Entry* e = reader.get("exclude_keys")) {
    parseRegexList(*e, filters.exclude_keys, diags);
  }
  std::pair<const char*, bool*> flags[] = {
      {"drop_expirations", &filters.drop_expirations},
      {"drop_deletions", &filters.drop_deletions},
      {"strip_ttl", &filters.strip_ttl},
      {"replicate_flush", &filters.replicate_flush},
  };
  for (auto& [key, field] : flags) {
    if (const Entry* e = reader.get(key)) {
      if (auto value = readBool(*e, diags)) {
        *field = *value;
      }
    }
  }
}

void parseKeyRewrite(const Entry& section, std::vector<KeyRewrite>& rewrites, Diagnostics& diags) {
  if (!expectList(section, diags)) {
    return;
  }
  for (const auto& item : section.value) {
    Mark mark = markOf(item);
    if (!expectMap(item, mark, "a key_rewrite item", diags)) {
      continue;
    }
    MapReader reader(item, "in key_rewrite item", {"from", "to"}, diags);
    KeyRewrite rewrite;
    rewrite.mark = mark;
    std::optional<std::string> from;
    std::optional<std::string> to;
    if (const Entry* e = reader.require("from", "from: \"prefix:\"", diags)) {
      from = readNonEmpty(*e, "give the key prefix to replace", diags);
    }
    // `to: ""` is allowed: it strips the prefix.
    if (const Entry* e =
            reader.require("to", "to: \"new-prefix:\" (or to: \"\" to strip it)", diags)) {
      to = readString(*e, diags);
    }
    if (from && to) {
      rewrite.from = *from;
      rewrite.to = *to;
      rewrites.push_back(std::move(rewrite));
    }
  }
}

void parseDbs(const Entry& section, PipelineConfig& pipeline, PipelineMarks& marks,
              Diagnostics& diags) {
  if (!expectMap(section.value, section.value_mark, "dbs", diags)) {
    return;
  }
  for (const Entry& entry : entriesOf(section.value, diags)) {
    auto source = readInt(YAML::Node(entry.key), entry.key_mark, "source db", 0, kMaxDb, diags);
    auto target = readInt(entry.value, entry.value_mark, "target db", 0, kMaxDb, diags);
    if (!source) {
      continue;
    }
    auto [it, inserted] = marks.dbs.emplace(static_cast<int>(*source), entry.key_mark);
    if (!inserted) {
      diags.error(entry.key_mark, "duplicate source db " + std::to_string(*source) +
                                      " in dbs (first at line " + std::to_string(it->second.line) +
                                      "); map each source db once");
      continue;
    }
    if (target) {
      pipeline.dbs[static_cast<int>(*source)] = static_cast<int>(*target);
    }
  }
}

bool validPipelineName(const std::string& name) {
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return !name.empty();
}

void parsePipelines(const Entry& section, ParsedConfig& out, Diagnostics& diags) {
  if (!expectList(section, diags)) {
    out.pipeline_items = -1;  // reported; do not also complain that there are none
    return;
  }
  out.pipeline_items = static_cast<int>(section.value.size());
  for (const auto& item : section.value) {
    Mark mark = markOf(item);
    if (!expectMap(item, mark, "a pipeline", diags)) {
      continue;
    }
    MapReader reader(item, "in pipeline",
                     {"name", "source", "target", "dbs", "filters", "key_rewrite",
                      "checkpoint_interval", "full_sync", "bandwidth_limit"},
                     diags);
    PipelineConfig pipeline;
    PipelineMarks marks;
    pipeline.mark = mark;
    if (const Entry* e = reader.require("name", "name: east-to-west", diags)) {
      if (auto name = readNonEmpty(*e, "give the pipeline a name", diags)) {
        // Names appear in URLs (/pipelines/NAME/pause), metric labels and state file names.
        if (validPipelineName(*name)) {
          pipeline.name = *name;
          marks.name = e->value_mark;
        } else {
          diags.error(e->value_mark, "invalid pipeline name " + quote(*name) +
                                         ": use only letters, digits, \"-\", \"_\" and \".\" "
                                         "(it is used in URLs and file names)");
        }
      }
    }
    if (const Entry* e = reader.require("source", "source: CLUSTER", diags)) {
      if (auto name = readNonEmpty(*e, "name a cluster defined under clusters:", diags)) {
        pipeline.source = *name;
        marks.source = e->value_mark;
      }
    }
    if (const Entry* e = reader.require("target", "target: CLUSTER", diags)) {
      if (auto name = readNonEmpty(*e, "name a cluster defined under clusters:", diags)) {
        pipeline.target = *name;
        marks.target = e->value_mark;
      }
    }
    if (const Entry* e = reader.get("dbs")) {
      parseDbs(*e, pipeline, marks, diags);
    }
    if (const Entry* e = reader.get("filters")) {
      parseFilters(*e, pipeline.filters, diags);
    }
    if (const Entry* e = reader.get("key_rewrite")) {
      parseKeyRewrite(*e, pipeline.key_rewrite, diags);
    }
    if (const Entry* e = reader.get("checkpoint_interval")) {
      if (auto d = readDuration(*e, DurationRule::Positive, diags)) {
        pipeline.checkpoint_interval = *d;
      }
    }
    if (const Entry* e = reader.get("full_sync")) {
      if (expectMap(e->value, e->value_mark, "full_sync", diags)) {
        MapReader fs(e->value, "in full_sync", {"delete_stale_keys"}, diags);
        if (const Entry* d = fs.get("delete_stale_keys")) {
          if (auto v = readBool(*d, diags)) pipeline.delete_stale_keys = *v;
        }
      }
    }
    if (const Entry* e = reader.get("bandwidth_limit")) {
      if (auto v = readBandwidth(*e, diags)) pipeline.bandwidth_limit = *v;
    }
    out.config.pipelines.push_back(std::move(pipeline));
    out.pipeline_marks.push_back(std::move(marks));
  }
}

}  // namespace

void parseRoot(const YAML::Node& root, const ParseContext& ctx, ParsedConfig& out,
               Diagnostics& diags) {
  out.root = markOf(root);
  if (out.root.line == 0) {
    out.root = {1, 1};
  }
  if (!root.IsDefined() || root.IsNull()) {
    diags.error(out.root,
                "the configuration is empty; it needs at least a clusters: mapping and "
                "a pipelines: list");
    return;
  }
  if (!expectMap(root, out.root, "the configuration", diags)) {
    return;
  }
  out.root_is_map = true;
  MapReader reader(root, "at top level", {"agent", "clock", "clusters", "pipelines"}, diags);
  if (const Entry* e = reader.get("agent")) {
    parseAgent(*e, ctx, out.config.agent, diags);
  }
  // The default state_dir is relative too, so resolve after parsing, whatever its origin.
  out.config.agent.state_dir = resolvePath(ctx, out.config.agent.state_dir);
  if (ctx.check_files) {
    Mark mark = out.root;
    // (A const lookup of a missing key gives an invalid node: test it before using it.)
    const YAML::Node agent_node = root["agent"];
    if (agent_node && agent_node.IsMap()) {
      const YAML::Node state_dir_node = agent_node["state_dir"];
      if (state_dir_node) mark = markOf(state_dir_node);
    }
    checkStateDir(out.config.agent.state_dir, mark, diags);
  }
  if (const Entry* e = reader.get("clock")) {
    parseClock(*e, ctx, out.config.clock, diags);
  }
  if (const Entry* e = reader.get("clusters")) {
    parseClusters(*e, ctx, out, diags);
  }
  if (const Entry* e = reader.find("pipelines")) {
    out.has_pipelines_key = true;
    out.pipelines_mark = e->value_mark;
    if (!e->value.IsNull()) {
      parsePipelines(*e, out, diags);
    }
  }
}

}  // namespace xdcr::config::internal
