#include "replicator/operator_state.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/fd_io.h"

namespace xdcr::replicator {
namespace {

std::string stamp(int64_t now_ms, const char* what) {
  return fmt::format("{} at unix ms {}\n", what, now_ms);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Status failed(const char* action, const std::string& path, int err) {
  return fail(Error::storage(
      fmt::format("cannot {} {}: {}; check agent.state_dir", action, path, std::strerror(err))));
}

}  // namespace

OperatorState::OperatorState(std::string state_dir, std::string pipeline)
    : dir_(std::move(state_dir)), pipeline_(std::move(pipeline)) {
  paused_path_ = (std::filesystem::path(dir_) / (pipeline_ + ".paused")).string();
  resync_path_ = (std::filesystem::path(dir_) / (pipeline_ + ".resync")).string();
}

bool OperatorState::paused() const {
  return exists(paused_path_);
}

Status OperatorState::setPaused(bool on, int64_t now_ms) {
  if (on) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);  // (a pause before the first start)
    const int err = replaceFileDurably(paused_path_, stamp(now_ms, "paused by the operator"), 0644);
    return err == 0 ? Status{} : failed("write", paused_path_, err);
  }
  const int err = removeFileDurably(paused_path_);
  return err == 0 ? Status{} : failed("remove", paused_path_, err);
}

bool OperatorState::resyncRequested() const {
  return exists(resync_path_);
}

Status OperatorState::requestResync(int64_t now_ms) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const int err =
      replaceFileDurably(resync_path_, stamp(now_ms, "full sync requested by the operator"), 0644);
  return err == 0 ? Status{} : failed("write", resync_path_, err);
}

Result<size_t> OperatorState::honourResync() {
  size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if (ext != ".ckpt" && ext != ".journal") continue;
    const std::string stem = entry.path().stem().string();
    if (stem != pipeline_ && stem.rfind(pipeline_ + "@", 0) != 0) continue;
    if (const int err = removeFileDurably(entry.path().string()); err != 0) {
      return fail(failed("remove checkpoint", entry.path().string(), err).error());
    }
    ++removed;
  }
  if (ec) {
    return fail(
        Error::storage(fmt::format("cannot list agent.state_dir {}: {}", dir_, ec.message())));
  }
  if (const int err = removeFileDurably(resync_path_); err != 0) {
    return fail(failed("remove", resync_path_, err).error());
  }
  return removed;
}

}  // namespace xdcr::replicator
