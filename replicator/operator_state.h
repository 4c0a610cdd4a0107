#pragma once
// What the operator asked of a pipeline that must outlive the process, kept in agent.state_dir
// beside its checkpoints (issue 18: a pause was lost on restart and dropped by a reload):
//
//   <pipeline>.paused   the operator paused it (POST /pipelines/NAME/pause, `xdcr-agent pause`);
//                       every instance of the pipeline starts paused while the file exists
//   <pipeline>.resync   the operator asked for a full sync (POST /pipelines/NAME/resync,
//                       `xdcr-agent resync`); honoured before the pipeline next starts: every
//                       checkpoint of the pipeline (each source shard's too) is dropped, then the
//                       request. A crash in between honours it at the next start.
//
// Each file is one line saying when and why, for the operator who finds it; written to a
// temporary file, fsynced and renamed (a crash leaves it or not, never half of it).

#include <cstdint>
#include <string>

#include "common/error.h"

namespace xdcr::replicator {

class OperatorState {
 public:
  OperatorState(std::string state_dir, std::string pipeline);

  /** The pause file exists. */
  bool paused() const;
  /** Writes (on) or removes (off) the pause file. */
  Status setPaused(bool on, int64_t now_ms);
  const std::string& pausedPath() const { return paused_path_; }

  bool resyncRequested() const;
  Status requestResync(int64_t now_ms);
  /**
   * Drops every checkpoint of the pipeline — `<pipeline>.ckpt` and `.journal`, and those of its
   * source shards, `<pipeline>@ID.*` — then the request. Returns how many files it removed.
   */
  Result<size_t> honourResync();

 private:
  std::string dir_, pipeline_, paused_path_, resync_path_;
};

}  // namespace xdcr::replicator
