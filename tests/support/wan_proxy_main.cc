// xdcr-wan-proxy: the test harness's WAN simulator (wan_proxy.h) as a program, for bench scripts
// that put a slow, far or broken link between the agent and a Redis without netem.
//
//   xdcr-wan-proxy --listen PORT --upstream PORT [--delay-ms N] [--rate BYTES_PER_S] [--name NAME]
//
// Prints `listening on 127.0.0.1:PORT` (PORT 0 = a free port, printed here), then reads one
// command per line on stdin and answers each with one line on stdout, "ok ..." or "error ...":
//   cut | blackhole | heal | delay MS | rate BYTES_PER_S | stats | quit
// `stats` prints `stats name=.. state=.. bytes_up=.. bytes_down=.. accepted=.. refused=.. open=..
// delay_ms=.. rate=..`. The program exits on `quit` or at the end of stdin, so a script that dies
// takes the proxy with it.

#include <signal.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "tests/support/wan_proxy.h"

namespace {

using xdcr::test::WanProxy;

constexpr const char* kUsage =
    "usage: xdcr-wan-proxy --listen PORT --upstream PORT [--delay-ms N] [--rate BYTES_PER_S] "
    "[--name NAME]\n"
    "stdin commands: cut | blackhole | heal | delay MS | rate BYTES_PER_S | stats | quit\n";

std::optional<uint64_t> parseNumber(std::string_view text, uint64_t max) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

void reply(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string statsLine(const WanProxy& proxy) {
  WanProxy::Stats s = proxy.stats();
  return fmt::format(
      "stats name={} state={} bytes_up={} bytes_down={} accepted={} refused={} open={} "
      "delay_ms={} rate={}",
      proxy.name(), xdcr::test::toString(s.state), s.bytes_up, s.bytes_down, s.connections_accepted,
      s.connections_refused, s.open_connections, proxy.delay().count(), proxy.rate());
}

/** Runs one stdin command; false for quit. */
bool command(WanProxy& proxy, const std::string& line) {
  std::istringstream words(line);
  std::string verb;
  std::string arg;
  std::string extra;
  words >> verb >> arg >> extra;
  if (verb.empty()) return true;
  if (!extra.empty()) {
    reply("error too many arguments: " + line);
    return true;
  }
  bool takes_arg = verb == "delay" || verb == "rate";
  if (takes_arg == arg.empty()) {
    reply(fmt::format("error {} takes {} argument", verb, takes_arg ? "one" : "no"));
    return true;
  }
  if (verb == "quit") {
    reply("ok quit");
    return false;
  } else if (verb == "cut") {
    proxy.cut();
  } else if (verb == "blackhole") {
    proxy.blackhole();
  } else if (verb == "heal") {
    proxy.heal();
  } else if (verb == "stats") {
    reply(statsLine(proxy));
    return true;
  } else if (verb == "delay") {
    auto ms = parseNumber(arg, 3'600'000);
    if (!ms) {
      reply("error delay wants milliseconds (0..3600000): " + arg);
      return true;
    }
    proxy.setDelay(std::chrono::milliseconds(*ms));
  } else if (verb == "rate") {
    auto rate = parseNumber(arg, UINT64_MAX);
    if (!rate) {
      reply("error rate wants bytes per second (0 = unlimited): " + arg);
      return true;
    }
    proxy.setRate(*rate);
  } else {
    reply("error unknown command: " + verb);
    return true;
  }
  reply(arg.empty() ? "ok " + verb : "ok " + verb + " " + arg);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  std::optional<uint64_t> listen;
  std::optional<uint64_t> upstream;
  WanProxy::Options options;
  options.name = "xdcr-wan-proxy";
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "xdcr-wan-proxy: %s needs a value\n%s", argv[i], kUsage);
      return 2;
    }
    std::string_view value = argv[++i];
    std::optional<uint64_t> number;
    if (flag != "--name") {
      number = parseNumber(value, flag == "--rate"       ? UINT64_MAX
                                  : flag == "--delay-ms" ? 3'600'000
                                                         : 65535);
      if (!number) {
        std::fprintf(stderr, "xdcr-wan-proxy: bad value for %s: %s\n", argv[i - 1], argv[i]);
        return 2;
      }
    }
    if (flag == "--listen") {
      listen = number;
    } else if (flag == "--upstream") {
      upstream = number;
    } else if (flag == "--delay-ms") {
      options.delay = std::chrono::milliseconds(*number);
    } else if (flag == "--rate") {
      options.rate = *number;
    } else if (flag == "--name") {
      options.name = value;
    } else {
      std::fprintf(stderr, "xdcr-wan-proxy: unknown option %s\n%s", argv[i - 1], kUsage);
      return 2;
    }
  }
  if (!listen || !upstream || *upstream == 0) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  options.listen_port = static_cast<uint16_t>(*listen);

  try {
    auto proxy = WanProxy::start(static_cast<uint16_t>(*upstream), options);
    reply(fmt::format("listening on 127.0.0.1:{}", proxy->port()));
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!command(*proxy, line)) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xdcr-wan-proxy: %s\n", e.what());
    return 1;
  }
  return 0;
}
