#pragma once
#include <string>

namespace xdcr {

/** Version string of this build, e.g. "0.1.0". */
const char* version();
/** Short git revision the build was made from, or "unknown". */
const char* gitRevision();
/** CMake build type (Release, Debug, ...). */
const char* buildType();

}  // namespace xdcr
