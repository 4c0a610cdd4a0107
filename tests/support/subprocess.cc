#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace xdcr::test {
std::optional<std::string> findInPath(const std::string& name) {
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) {
      end = path.size();
    }
    std::string dir = path.substr(begin, end - begin);
    if (dir.empty()) {
      dir = ".";
    }
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    begin = end + 1;
  }
  return std::nullopt;
}

namespace {

std::string errnoText(int err) {
  return std::strerror(err);
}

// Resolves the program before fork(): PATH lookup allocates, which is not safe in the child of a
// multi-threaded parent.
std::string resolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return name;
  }
  if (auto found = findInPath(name)) {
    return *found;
  }
  const char* path_env = std::getenv("PATH");
  throw std::runtime_error("cannot start '" + name + "': not found in PATH (" +
                           (path_env != nullptr ? path_env : "") + ")");
}

ExitStatus decodeStatus(int raw) {
  ExitStatus status;
  if (WIFEXITED(raw)) {
    status.exited = true;
    status.code = WEXITSTATUS(raw);
  } else if (WIFSIGNALED(raw)) {
    status.signal = WTERMSIG(raw);
  }
  return status;
}

}  // namespace

std::string ExitStatus::describe() const {
  std::string text;
  if (exited) {
    text = "exited with status " + std::to_string(code);
  } else {
    text = "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  if (forced) {
    text += " after not stopping within the grace period";
  }
  return text;
}

Subprocess Subprocess::start(const std::vector<std::string>& argv, const std::string& log_path) {
  return start(argv, log_path, {});
}

Subprocess Subprocess::start(const std::vector<std::string>& argv, const std::string& log_path,
                             const std::vector<std::pair<std::string, std::string>>& extra_env) {
  if (argv.empty()) {
    throw std::invalid_argument("Subprocess::start: empty argv");
  }
  const std::string program = resolveProgram(argv[0]);

  // Everything the child needs is prepared here, before fork(): between fork() and exec() the
  // child of a multi-threaded process may only make async-signal-safe calls.
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (const auto& arg : argv) {
    c_argv.push_back(const_cast<char*>(arg.c_str()));
  }
  c_argv.push_back(nullptr);

  // The child's environment: ours, with `extra_env` replacing or adding variables. Built here,
  // before fork(), for the same reason as argv.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : extra_env) {
      replaced = replaced || key == name;
    }
    if (!replaced) {
      env_strings.push_back(std::move(entry));
    }
  }
  for (const auto& [key, value] : extra_env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      throw std::invalid_argument("Subprocess::start: bad environment variable name '" + key + "'");
    }
    env_strings.push_back(key + "=" + value);
  }
  std::vector<char*> c_env;
  c_env.reserve(env_strings.size() + 1);
  for (auto& entry : env_strings) {
    c_env.push_back(entry.data());
  }
  c_env.push_back(nullptr);

  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    throw std::runtime_error("cannot open log file " + log_path + ": " + errnoText(errno));
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    int err = errno;
    ::close(log_fd);
    throw std::runtime_error("cannot open /dev/null: " + errnoText(err));
  }
  // The child reports a failed exec() through this pipe; a successful exec() closes it (CLOEXEC),
  // so the parent reads EOF.
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(log_fd);
    ::close(null_fd);
    throw std::runtime_error("pipe2 failed: " + errnoText(err));
  }

  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(log_fd);
    ::close(null_fd);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    throw std::runtime_error("fork failed: " + errnoText(err));
  }
  if (pid == 0) {
    // Child. Die with the test: a crashed test binary must not leave servers running.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) {
      ::_exit(127);
    }
    // Signal dispositions set to "ignore" and the signal mask survive exec(); start clean.
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
      ::sigaction(sig, &dfl, nullptr);
    }
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    // Do not leak the test's sockets and files into the child (best effort; needs Linux 5.11).
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(program.c_str(), c_argv.data(), c_env.data());
    int err = errno;
    ssize_t ignored = ::write(err_pipe[1], &err, sizeof(err));
    (void)ignored;
    ::_exit(127);
  }

  ::close(err_pipe[1]);
  ::close(log_fd);
  ::close(null_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  Subprocess process(pid);
  if (n > 0) {
    process.reap(/*block=*/true);
    throw std::runtime_error("cannot execute " + program + ": " + errnoText(child_errno));
  }
  return process;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_) {
    kill();
  }
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), status_(std::move(other.status_)) {
  other.pid_ = -1;
  other.status_.reset();
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) {
      kill();
    }
    pid_ = other.pid_;
    status_ = std::move(other.status_);
    other.pid_ = -1;
    other.status_.reset();
  }
  return *this;
}

bool Subprocess::reap(bool block) {
  if (pid_ <= 0 || status_) {
    return true;
  }
  int raw = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &raw, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    status_ = decodeStatus(raw);
    return true;
  }
  if (r < 0) {
    // ECHILD: someone else reaped it (should not happen); treat it as gone.
    status_ = ExitStatus{};
    return true;
  }
  return false;
}

bool Subprocess::running() {
  return pid_ > 0 && !reap(/*block=*/false);
}

bool Subprocess::sendSignal(int sig) {
  // Only signal a child we have not reaped: until then the PID cannot be reused by another process.
  if (!running()) {
    return false;
  }
  return ::kill(pid_, sig) == 0;
}

std::optional<ExitStatus> Subprocess::waitFor(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) {
    return std::nullopt;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reap(/*block=*/false)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_;
}

ExitStatus Subprocess::stop(int sig, std::chrono::milliseconds grace) {
  if (pid_ <= 0) {
    return ExitStatus{};
  }
  if (sendSignal(sig)) {
    if (auto status = waitFor(grace)) {
      return *status;
    }
    ExitStatus status = kill();
    status.forced = true;
    status_ = status;
    return status;
  }
  reap(/*block=*/true);
  return *status_;
}

ExitStatus Subprocess::kill() {
  if (pid_ <= 0) {
    return ExitStatus{};
  }
  if (running()) {
    ::kill(pid_, SIGKILL);
    // SIGKILL cannot be caught, so this ends as soon as the kernel has torn the process down; the
    // bound only matters for a process stuck in uninterruptible I/O.
    if (!waitFor(std::chrono::seconds(30))) {
      ExitStatus unknown;
      unknown.signal = SIGKILL;
      unknown.forced = true;
      return unknown;
    }
  }
  return *status_;
}

StoppedProcess::StoppedProcess(pid_t pid) : pid_(pid) {
  if (pid_ <= 0 || ::kill(pid_, SIGSTOP) != 0) {
    throw std::runtime_error("cannot SIGSTOP pid " + std::to_string(pid_) + ": " +
                             std::strerror(errno));
  }
  stopped_ = true;
}

StoppedProcess::~StoppedProcess() {
  resume();
}

void StoppedProcess::resume() {
  if (stopped_) {
    ::kill(pid_, SIGCONT);
    stopped_ = false;
  }
}

}  // namespace xdcr::test
