#include "tests/support/resp_client.h"

#include "target/marker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace xdcr::test {
namespace {

constexpr size_t kPipelineChunk = 1000;
constexpr int kMaxDepth = 32;
// Far above anything a test stores; a larger length means the stream is out of step.
constexpr int64_t kMaxBulk = 512LL * 1024 * 1024;

int64_t parseInteger(const std::string& text, bool* ok) {
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  *ok = ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
  return value;
}

}  // namespace

RespValue RespValue::simpleString(std::string text) {
  RespValue v;
  v.type_ = Type::SimpleString;
  v.text_ = std::move(text);
  return v;
}

RespValue RespValue::error(std::string text) {
  RespValue v;
  v.type_ = Type::Error;
  v.text_ = std::move(text);
  return v;
}

RespValue RespValue::integer(int64_t value) {
  RespValue v;
  v.type_ = Type::Integer;
  v.integer_ = value;
  return v;
}

RespValue RespValue::bulk(std::string bytes) {
  RespValue v;
  v.type_ = Type::Bulk;
  v.text_ = std::move(bytes);
  return v;
}

RespValue RespValue::null() {
  return RespValue();
}

RespValue RespValue::array(std::vector<RespValue> items) {
  RespValue v;
  v.type_ = Type::Array;
  v.items_ = std::move(items);
  return v;
}

const std::string& RespValue::str() const& {
  if (type_ != Type::SimpleString && type_ != Type::Bulk && type_ != Type::Error) {
    throw std::logic_error("RespValue::str() on " + toString());
  }
  return text_;
}

std::string RespValue::str() && {
  static_cast<const RespValue&>(*this).str();  // throws on another type
  return std::move(text_);
}

int64_t RespValue::integer() const {
  if (type_ != Type::Integer) {
    throw std::logic_error("RespValue::integer() on " + toString());
  }
  return integer_;
}

const std::vector<RespValue>& RespValue::array() const& {
  if (type_ != Type::Array) {
    throw std::logic_error("RespValue::array() on " + toString());
  }
  return items_;
}

std::vector<RespValue> RespValue::array() && {
  static_cast<const RespValue&>(*this).array();  // throws on another type
  return std::move(items_);
}

std::string RespValue::toString() const {
  switch (type_) {
    case Type::SimpleString:
      return text_;
    case Type::Error:
      return "(error) " + text_;
    case Type::Integer:
      return "(integer) " + std::to_string(integer_);
    case Type::Bulk:
      return "\"" + text_ + "\"";
    case Type::Null:
      return "(nil)";
    case Type::Array: {
      std::string out = "[";
      for (size_t i = 0; i < items_.size(); ++i) {
        out += (i == 0 ? "" : ", ") + items_[i].toString();
      }
      return out + "]";
    }
  }
  return "?";
}

void RespClient::openSocket(int domain) {
  fd_ = ::socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    fail(std::string("socket: ") + std::strerror(errno));
  }
  timeval tv{};
  tv.tv_sec = io_timeout_.count() / 1000;
  tv.tv_usec = (io_timeout_.count() % 1000) * 1000;
  // SO_SNDTIMEO also bounds a blocking connect() on Linux.
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void RespClient::connectTo(const sockaddr* addr, socklen_t len) {
  int rc;
  do {
    rc = ::connect(fd_, addr, len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    fail(std::string("connect: ") + std::strerror(errno));
  }
}

RespClient::RespClient(uint16_t port, std::chrono::milliseconds io_timeout)
    : port_(port), io_timeout_(io_timeout) {
  openSocket(AF_INET);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  connectTo(reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
}

RespClient::RespClient(std::chrono::milliseconds io_timeout, std::string unix_path)
    : unix_path_(std::move(unix_path)), io_timeout_(io_timeout) {
  openSocket(AF_UNIX);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (unix_path_.size() >= sizeof(addr.sun_path)) {
    fail("socket path longer than " + std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, unix_path_.c_str(), unix_path_.size() + 1);
  connectTo(reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
}

RespClient RespClient::unixSocket(const std::string& path, std::chrono::milliseconds io_timeout) {
  return RespClient(io_timeout, path);
}

RespClient::~RespClient() {
  close();
}

RespClient::RespClient(RespClient&& other) noexcept
    : port_(other.port_),
      unix_path_(std::move(other.unix_path_)),
      fd_(other.fd_),
      io_timeout_(other.io_timeout_),
      buffer_(std::move(other.buffer_)),
      read_pos_(other.read_pos_) {
  other.fd_ = -1;
}

RespClient& RespClient::operator=(RespClient&& other) noexcept {
  if (this != &other) {
    close();
    port_ = other.port_;
    unix_path_ = std::move(other.unix_path_);
    fd_ = other.fd_;
    io_timeout_ = other.io_timeout_;
    buffer_ = std::move(other.buffer_);
    read_pos_ = other.read_pos_;
    other.fd_ = -1;
  }
  return *this;
}

void RespClient::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void RespClient::fail(const std::string& what) {
  close();  // the stream position is unknown now; the client cannot be reused
  throw RespIoError("RESP " +
                    (unix_path_.empty() ? "127.0.0.1:" + std::to_string(port_) : unix_path_) +
                    ": " + what);
}

void RespClient::appendCommand(std::string& out, const RespCommand& args) const {
  out += "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& arg : args) {
    out += "$" + std::to_string(arg.size()) + "\r\n";
    out += arg;
    out += "\r\n";
  }
}

void RespClient::sendAll(const std::string& data) {
  if (fd_ < 0) {
    fail("connection is closed after an earlier error");
  }
  size_t sent = 0;
  while (sent < data.size()) {
    // MSG_NOSIGNAL: a server that went away must give an error, not SIGPIPE the test binary.
    ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        fail("send timed out after " + std::to_string(io_timeout_.count()) + " ms");
      }
      fail(std::string("send: ") + std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }
}

void RespClient::fill() {
  if (fd_ < 0) {
    fail("connection is closed after an earlier error");
  }
  if (read_pos_ > 0 && read_pos_ == buffer_.size()) {
    buffer_.clear();
    read_pos_ = 0;
  } else if (read_pos_ > (1 << 20)) {
    buffer_.erase(0, read_pos_);
    read_pos_ = 0;
  }
  char chunk[64 * 1024];
  while (true) {
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return;
    }
    if (n == 0) {
      fail("connection closed by the server");
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      fail("no reply within " + std::to_string(io_timeout_.count()) + " ms");
    }
    fail(std::string("recv: ") + std::strerror(errno));
  }
}

std::string RespClient::readLine() {
  while (true) {
    size_t end = buffer_.find("\r\n", read_pos_);
    if (end != std::string::npos) {
      std::string line = buffer_.substr(read_pos_, end - read_pos_);
      read_pos_ = end + 2;
      return line;
    }
    fill();
  }
}

RespValue RespClient::readValue(int depth) {
  if (depth > kMaxDepth) {
    fail("reply nested too deeply");
  }
  std::string line = readLine();
  if (line.empty()) {
    fail("empty reply line");
  }
  const char kind = line[0];
  const std::string rest = line.substr(1);
  bool ok = false;
  switch (kind) {
    case '+':
      return RespValue::simpleString(rest);
    case '-':
      return RespValue::error(rest);
    case ':': {
      int64_t value = parseInteger(rest, &ok);
      if (!ok) {
        fail("bad integer reply: " + line);
      }
      return RespValue::integer(value);
    }
    case '$': {
      int64_t len = parseInteger(rest, &ok);
      if (!ok || len < -1 || len > kMaxBulk) {
        fail("bad bulk length: " + line);
      }
      if (len == -1) {
        return RespValue::null();
      }
      const size_t need = static_cast<size_t>(len) + 2;
      while (buffer_.size() - read_pos_ < need) {
        fill();
      }
      std::string bytes = buffer_.substr(read_pos_, static_cast<size_t>(len));
      if (buffer_.compare(read_pos_ + static_cast<size_t>(len), 2, "\r\n") != 0) {
        fail("bulk string not terminated by CRLF");
      }
      read_pos_ += need;
      return RespValue::bulk(std::move(bytes));
    }
    case '*': {
      int64_t count = parseInteger(rest, &ok);
      if (!ok || count < -1) {
        fail("bad array length: " + line);
      }
      if (count == -1) {
        return RespValue::null();
      }
      std::vector<RespValue> items;
      items.reserve(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        items.push_back(readValue(depth + 1));
      }
      return RespValue::array(std::move(items));
    }
    default:
      fail("unexpected reply type byte in: " + line.substr(0, 80));
  }
}

RespValue RespClient::command(const RespCommand& args) {
  std::string out;
  appendCommand(out, args);
  sendAll(out);
  return readValue();
}

std::vector<RespValue> RespClient::pipeline(const std::vector<RespCommand>& commands) {
  std::vector<RespValue> replies;
  replies.reserve(commands.size());
  for (size_t begin = 0; begin < commands.size(); begin += kPipelineChunk) {
    const size_t end = std::min(commands.size(), begin + kPipelineChunk);
    std::string out;
    for (size_t i = begin; i < end; ++i) {
      appendCommand(out, commands[i]);
    }
    sendAll(out);
    for (size_t i = begin; i < end; ++i) {
      replies.push_back(readValue());
    }
  }
  return replies;
}

std::map<std::string, std::string> RespClient::info(const std::string& section) {
  RespValue reply = section.empty() ? command({"INFO"}) : command({"INFO", section});
  if (reply.type() != RespValue::Type::Bulk) {
    fail("INFO returned " + reply.toString());
  }
  std::map<std::string, std::string> fields;
  const std::string& text = reply.str();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) {
      end = text.size();
    }
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (line.empty() || line[0] == '#') {
      continue;
    }
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      fields[line.substr(0, colon)] = line.substr(colon + 1);
    }
  }
  return fields;
}

void RespClient::select(int db) {
  RespValue reply = command({"SELECT", std::to_string(db)});
  if (reply.isError()) {
    fail("SELECT " + std::to_string(db) + ": " + reply.str());
  }
}

bool isAgentMarkerKey(std::string_view key) {
  return target::isMarkerKey(key);
}

int64_t dataDbSize(RespClient& client) {
  const int64_t size = client.command({"DBSIZE"}).integer();
  const RespValue markers = client.command({"KEYS", std::string(target::kMarkerPrefix) + "*"});
  return size - static_cast<int64_t>(markers.isArray() ? markers.array().size() : 0);
}

}  // namespace xdcr::test
