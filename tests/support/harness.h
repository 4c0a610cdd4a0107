#pragma once
// Everything an integration test needs: real redis-servers, a RESP client, the agent process.
// All processes are started with fork/exec, listen on 127.0.0.1 only, and are stopped by PID.

#include "tests/support/agent_command.h"     // IWYU pragma: export
#include "tests/support/agent_process.h"     // IWYU pragma: export
#include "tests/support/chrony_server.h"     // IWYU pragma: export
#include "tests/support/cluster_client.h"    // IWYU pragma: export
#include "tests/support/cluster_load.h"      // IWYU pragma: export
#include "tests/support/dataset.h"           // IWYU pragma: export
#include "tests/support/faketime.h"          // IWYU pragma: export
#include "tests/support/key_check.h"         // IWYU pragma: export
#include "tests/support/log_watcher.h"       // IWYU pragma: export
#include "tests/support/memcached_server.h"  // IWYU pragma: export
#include "tests/support/net.h"               // IWYU pragma: export
#include "tests/support/redis_cluster.h"     // IWYU pragma: export
#include "tests/support/redis_server.h"      // IWYU pragma: export
#include "tests/support/resp_client.h"       // IWYU pragma: export
#include "tests/support/sentinel_set.h"      // IWYU pragma: export
#include "tests/support/subprocess.h"        // IWYU pragma: export
#include "tests/support/target_layout.h"     // IWYU pragma: export
#include "tests/support/temp_dir.h"          // IWYU pragma: export
#include "tests/support/test_ca.h"           // IWYU pragma: export
#include "tests/support/wait.h"              // IWYU pragma: export
