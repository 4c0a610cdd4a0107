// Fuzz target: the config loader (config/config.h: loadConfigString). The input is a YAML file.
// Secrets are not resolved (LoadOptions::resolve_environment = false, as `validate
// --no-environment`): the fuzzer must not read the environment or arbitrary files.
//
// Properties checked (beyond "no crash, no ASan/UBSan report"):
//  C1 loadConfigString never throws, and no diagnostic is an "internal error" (the loader's
//     catch-all for an exception it did not expect: a bug);
//  C2 config is non-null exactly when no diagnostic is an error;
//  C3 every error points into the file: 1 <= line <= the file's lines + 1 and column >= 1,
//     except a whole-file error (line 0), which only a YAML syntax error without a position
//     may be; warnings obey the same rule;
//  C4 format() is "fuzz.yaml:LINE:COL: error: MESSAGE" (or without LINE:COL for a whole-file
//     error) and the message is not empty;
//  C5 diagnostics come in file order;
//  C6 a loaded config is usable: every pipeline names clusters that exist, redactedJson() is
//     valid JSON, pipelineFingerprint() is deterministic; loading the same text again gives the
//     same diagnostics.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "fuzz/fuzz_check.h"

namespace {

using namespace xdcr::config;

/** Lines as a YAML reader counts them: LF, CRLF, or a lone CR each end one. */
int countLines(const std::string& text) {
  int lines = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'))) {
      ++lines;
    }
  }
  return lines;
}

std::vector<std::string> formatted(const LoadResult& r) {
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.format());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string text(reinterpret_cast<const char*>(bytes), size);
  LoadOptions options;
  options.resolve_environment = false;

  LoadResult result;
  try {  // C1
    result = loadConfigString(text, "fuzz.yaml", options);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, std::string("loadConfigString threw: ") + e.what());
  } catch (...) {
    FUZZ_CHECK(false, "loadConfigString threw a non-exception");
  }

  const int lines = countLines(text);
  bool any_error = false;
  std::pair<int, int> previous{0, 0};
  for (const Diagnostic& d : result.diagnostics) {
    const bool error = d.severity == Diagnostic::Severity::Error;
    any_error |= error;
    const std::string f = d.format();
    FUZZ_CHECK(d.message.rfind("internal error", 0) != 0, f);  // C1
    FUZZ_CHECK(!d.message.empty(), f);
    FUZZ_CHECK(d.file == "fuzz.yaml", f);
    if (d.mark.line == 0) {  // C3: a whole-file error
      FUZZ_CHECK(error && d.message.rfind("YAML syntax error", 0) == 0,
                 "a diagnostic without a line: " + f);
      FUZZ_CHECK(f.rfind("fuzz.yaml: error: ", 0) == 0, f);  // C4
    } else {
      FUZZ_CHECK(d.mark.line >= 1 && d.mark.line <= lines + 1 && d.mark.column >= 1,
                 "position outside the file (" + std::to_string(lines) + " lines): " + f);
      const std::string prefix = "fuzz.yaml:" + std::to_string(d.mark.line) + ":" +
                                 std::to_string(d.mark.column) +
                                 (error ? ": error: " : ": warning: ");
      FUZZ_CHECK(f.rfind(prefix, 0) == 0, f);  // C4
    }
    std::pair<int, int> at{d.mark.line, d.mark.column};
    FUZZ_CHECK(previous <= at, "diagnostics out of file order at " + f);  // C5
    previous = at;
  }
  FUZZ_CHECK(result.ok() == !any_error,
             "config present although there are errors, or absent "
             "without one");  // C2

  if (result.ok()) {  // C6
    const Config& config = *result.config;
    for (const auto& p : config.pipelines) {
      FUZZ_CHECK(config.cluster(p.source) != nullptr, "pipeline " + p.name + " source");
      FUZZ_CHECK(config.cluster(p.target) != nullptr, "pipeline " + p.name + " target");
      FUZZ_CHECK(pipelineFingerprint(config, p) == pipelineFingerprint(config, p));
    }
    std::string json = redactedJson(config);
    FUZZ_CHECK(nlohmann::json::accept(json), "redactedJson is not JSON: " + json.substr(0, 200));
  }
  // Deterministic: a reload (SIGHUP) of an unchanged file says the same things.
  if (size < 2048) {
    LoadResult again = loadConfigString(text, "fuzz.yaml", options);
    FUZZ_CHECK(formatted(again) == formatted(result), "a second load differs");
    FUZZ_CHECK(again.ok() == result.ok());
  }
  return 0;
}
