#pragma once
// Key-by-key checks of a target against what a test's model expects: presence, type, logical
// contents (as readKeyStates() renders them) and an absolute deadline within a window. The model
// (which keys a pipeline passes, whose contents, which deadline rule) stays in each test, stated
// there; this only compares and reports.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/dataset.h"

namespace xdcr::test {

/** What a target must hold for one key. */
struct ExpectedKey {
  bool present = false;
  std::string type;      // TYPE, when present
  std::string contents;  // KeyState::contents, when present
  /** Inclusive range for PEXPIRETIME when present; nullopt: no deadline (-1). */
  std::optional<std::pair<int64_t, int64_t>> deadline;
  /** The model's reasoning, shown with a mismatch ("M=1800s, E=none, written now+0..1s"). */
  std::string why;
};

/** A key the target must not hold. */
ExpectedKey absentKey(std::string why);

/**
 * A key the target must hold as `source` holds it (type and contents), with the deadline that
 * rule 4 (specClamp) gives the source deadline `e` (0 = none) under the maxTTL `m_ms`, for a
 * target write at some `now` in [now_lo, now_hi]: the clamp is non-decreasing in `now`, so the
 * window's ends bound it. The range is widened by `tolerance_ms` on both sides.
 */
ExpectedKey replicatedKey(const KeyState& source, int64_t e, int64_t m_ms, int64_t now_lo,
                          int64_t now_hi, int64_t tolerance_ms, std::string why = {});

struct KeyCheckReport {
  int64_t checked = 0;
  int64_t missing = 0;               // expected present, absent
  int64_t unexpected = 0;            // expected absent, present
  int64_t contents = 0;              // present as expected, other type or contents
  int64_t deadlines = 0;             // present as expected, PEXPIRETIME outside the expected range
  std::vector<std::string> details;  // the first `max_details` mismatches

  bool ok() const { return checked > 0 && missing + unexpected + contents + deadlines == 0; }
  /** One line of counts, then the details, one per line. */
  std::string summary() const;
};

/**
 * Compares `actual[i]` (readKeyStates() of the target) with `expected[i]` for `keys[i]`; the
 * three vectors have the same length. `read_ms` (when the target was read) only serves to show
 * deadlines as "now+Ns".
 */
KeyCheckReport checkKeys(const std::vector<const DatasetKey*>& keys,
                         const std::vector<ExpectedKey>& expected,
                         const std::vector<KeyState>& actual, int64_t read_ms,
                         size_t max_details = 20);

/** "1712345678901 (now+600.0s)": an absolute deadline and its distance from `now_ms`. */
std::string describeDeadline(int64_t deadline_ms, int64_t now_ms);

}  // namespace xdcr::test
