#include "common/version.h"

namespace xdcr {

const char* version() {
  return XDCR_VERSION;
}
const char* gitRevision() {
  return XDCR_GIT_REVISION;
}
const char* buildType() {
  return XDCR_BUILD_TYPE;
}

}  // namespace xdcr
