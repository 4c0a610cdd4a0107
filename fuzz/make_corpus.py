#!/usr/bin/env python3
"""Regenerates the real-server part of the fuzz seed corpus (fuzz/corpus/rdb/*.rdb and
fuzz/corpus/resp/stream-*, reply-*) from a real redis-server (Debian 12: 7.0) on 127.0.0.1.

A maintainer tool: the corpus is committed and CI never runs this. Needs python3 and
redis-server. Every server it starts listens on 127.0.0.1 only, on a free port, with its files in
a temporary directory, and is stopped by its PID.

    python3 fuzz/make_corpus.py [--out fuzz/corpus]
"""

import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time

DEADLINE_S = 20  # every wait below is bounded


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Conn:
    """A minimal RESP client that also keeps the raw bytes of every reply."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("server closed the connection")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def reply(self):
        """Returns (value, raw bytes)."""
        line = self._line()
        raw = line + b"\r\n"
        t, rest = line[:1], line[1:]
        if t in (b"+", b"-"):
            return rest.decode(errors="replace"), raw
        if t == b":":
            return int(rest), raw
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None, raw
            data = self._exact(n + 2)
            return data[:-2], raw + data
        if t == b"*":
            n = int(rest)
            items = []
            for _ in range(max(n, 0)):
                v, r = self.reply()
                items.append(v)
                raw += r
            return items, raw
        raise ValueError("unexpected reply %r" % line)

    def call(self, *args):
        self.sock.sendall(encode(*args))
        return self.reply()

    def close(self):
        self.sock.close()


class Server:
    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="xdcr-corpus-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--logfile", os.path.join(self.dir, "log"),
             *extra])
        end = time.time() + DEADLINE_S
        while True:
            try:
                c = Conn(self.port)
                if c.call("PING")[0] == "PONG":
                    c.close()
                    break
            except OSError:
                if time.time() > end or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)

    def client(self):
        return Conn(self.port)

    def stop(self):
        self.proc.terminate()  # by PID
        try:
            self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- RDB files ------------------------------------------------------------------------------

LISTPACK_ARGS = ["--hash-max-listpack-entries", "16", "--zset-max-listpack-entries", "16",
                 "--set-max-intset-entries", "16", "--list-max-listpack-size", "8",
                 "--rdbcompression", "yes"]

FUTURE_MS = 4102444800000  # 2100-01-01: a deadline that stays in the future


def rdb_files():
    """name -> (server args, commands)."""
    big_hash = ["HSET", "h:table"] + [x for i in range(20) for x in ("f%d" % i, "v%d" % i)]
    big_set = ["SADD", "set:table"] + ["m%d" % i for i in range(20)]
    big_zset = ["ZADD", "z:skiplist"] + [x for i in range(20) for x in ("%d.5" % i, "m%d" % i)]
    big_list = ["RPUSH", "l:quicklist"] + ["item-%d" % i for i in range(30)]
    return {
        "strings": ([], [
            ["SET", "s:raw", "hello"], ["SET", "s:int", "12345"], ["SET", "s:neg", "-7"],
            ["SET", "s:big-int", "9223372036854775807"], ["SET", "s:lzf", "a" * 200],
            ["SET", "k" * 60 + ":lzf-key", "v"], ["SET", "s:empty", ""],
            ["SET", "s:bin", b"\x00\x01\xff\r\n"],
        ]),
        "ttl": ([], [
            ["SET", "t:px", "v", "PX", "600000"], ["SET", "t:exat", "v", "PXAT", FUTURE_MS],
            ["SET", "t:none", "v"], ["HSET", "t:hash", "f", "v"],
            ["PEXPIREAT", "t:hash", FUTURE_MS], ["SET", "t:lzf", "b" * 100, "EX", "1000"],
        ]),
        "types": (LISTPACK_ARGS, [
            ["HSET", "h:listpack", "f1", "v1", "f2", "v2"], big_hash,
            ["RPUSH", "l:small", "a", "b", "c"], big_list,
            ["SADD", "set:int", "1", "2", "3"], ["SADD", "set:str", "a", "b", "c"], big_set,
            ["ZADD", "z:listpack", "1", "a", "2.5", "b", "-inf", "c"], big_zset,
            ["PFADD", "hll", "a", "b", "c"],
        ]),
        "stream": ([], [
            ["XADD", "x:s", "1-1", "f", "v"], ["XADD", "x:s", "2-1", "f", "w", "g", "x"],
            ["XADD", "x:s", "3-1", "f", "y"], ["XDEL", "x:s", "2-1"],
            ["XGROUP", "CREATE", "x:s", "g1", "0"], ["XGROUP", "CREATE", "x:s", "g2", "$"],
            ["XREADGROUP", "GROUP", "g1", "c1", "COUNT", "2", "STREAMS", "x:s", ">"],
            ["XGROUP", "CREATECONSUMER", "x:s", "g2", "idle"],
            ["XADD", "x:empty", "MAXLEN", "0", "1-1", "f", "v"],
        ]),
        "dbs": ([], [
            ["SET", "db0:a", "1"], ["SELECT", "3"], ["SET", "db3:a", "v", "EX", "1000"],
            ["SELECT", "15"], ["RPUSH", "db15:l", "x"], ["SELECT", "0"],
        ]),
        "function": ([], [
            ["FUNCTION", "LOAD",
             "#!lua name=fuzzlib\nredis.register_function('f1', function() return 1 end)"],
            ["SET", "after:function", "v"],
        ]),
        "lru": (["--maxmemory-policy", "allkeys-lru"], [
            ["SET", "lru:a", "v"], ["SET", "lru:b", "v", "EX", "1000"],
        ]),
        "lfu": (["--maxmemory-policy", "allkeys-lfu"], [
            ["SET", "lfu:a", "v"], ["GET", "lfu:a"], ["GET", "lfu:a"],
            ["SET", "lfu:b", "v", "EX", "1000"],
        ]),
        "empty": ([], []),
    }


def make_rdbs(out):
    os.makedirs(out, exist_ok=True)
    for name, (args, commands) in rdb_files().items():
        server = Server(*args)
        try:
            c = server.client()
            for cmd in commands:
                v, _ = c.call(*cmd)
                if isinstance(v, str) and v.startswith(("ERR", "WRONGTYPE")):
                    raise RuntimeError("%s: %r -> %s" % (name, cmd, v))
            if name == "lru":
                time.sleep(1.1)  # a nonzero idle time
            assert c.call("SAVE")[0] == "OK"
            c.close()
            shutil.copy(os.path.join(server.dir, "dump.rdb"), os.path.join(out, name + ".rdb"))
        finally:
            server.stop()


# ---- the replication stream -----------------------------------------------------------------

STREAMS = {
    # SET with every TTL form arrives as SET ... PXAT (or PEXPIREAT); SELECT first.
    "stream-set-ttl": [
        ["SET", "k", "v"], ["SET", "k", "v", "EX", "100"], ["SET", "k", "v", "PX", "100000"],
        ["SET", "k", "v", "EXAT", "4102444800"], ["SET", "k", "v", "KEEPTTL"],
        ["SETEX", "k2", "100", "v"], ["GETEX", "k2", "PX", "5000"], ["EXPIRE", "k", "100"],
        ["PERSIST", "k"], ["INCRBYFLOAT", "n", "1.5"], ["GETDEL", "k2"],
    ],
    # A MULTI/EXEC block and a script (effects replication: also MULTI/EXEC).
    "stream-multi-exec": [
        ["MULTI"], ["SET", "a", "1"], ["INCR", "a"], ["EXPIRE", "a", "100"], ["EXEC"],
        ["EVAL", "redis.call('SET', KEYS[1], 'x', 'EX', 50); redis.call('DEL', KEYS[2])", "2",
         "s1", "s2"],
        ["SET", "after", "1"],
    ],
    "stream-types": [
        ["HSET", "h", "f", "v"], ["RPUSH", "l", "a", "b"], ["SADD", "s", "m"],
        ["ZADD", "z", "1", "m"], ["XADD", "x", "1-1", "f", "v"], ["PFADD", "p", "a"],
        ["APPEND", "k", "tail"], ["MSET", "m1", "1", "m2", "2"], ["RENAME", "m1", "m3"],
        ["COPY", "m2", "m4"], ["SUNIONSTORE", "s2", "s"], ["DEL", "m3", "m4"], ["UNLINK", "m2"],
    ],
    "stream-select-flush": [
        ["SELECT", "3"], ["SET", "db3", "v"], ["FLUSHDB"], ["SELECT", "0"], ["SET", "k", "v"],
        ["FLUSHALL"],
    ],
}


def replica(port):
    """Attaches as a replica; returns (conn, the bytes from +FULLRESYNC through the snapshot)."""
    r = Conn(port)
    for cmd in (["PING"], ["REPLCONF", "listening-port", "0"],
                ["REPLCONF", "capa", "eof", "capa", "psync2"]):
        r.call(*cmd)
    r.sock.sendall(encode("PSYNC", "?", "-1"))
    head = b""
    end = time.time() + DEADLINE_S
    # +FULLRESYNC line, keepalive newlines, $EOF:<mark> or $<len> header, snapshot.
    while True:
        while b"\r\n" not in r.buf or r.buf.startswith(b"\n"):
            if r.buf.startswith(b"\n"):
                head += b"\n"
                r.buf = r.buf[1:]
                continue
            r._fill()
            if time.time() > end:
                raise RuntimeError("no snapshot")
        line = r._line()
        head += line + b"\r\n"
        if line.startswith(b"$EOF:"):
            mark = line[5:]
            while not r.buf.endswith(mark):
                r._fill()
            head += r.buf
            r.buf = b""
            break
        if line.startswith(b"$"):
            head += r._exact(int(line[1:]))
            break
    # The source enables the stream at the first ACK after the transfer ended (as the agent's
    # once-a-second ACK does): wait for that, then ACK.
    time.sleep(0.3)
    r.sock.sendall(encode("REPLCONF", "ACK", "0"))
    return r, head


def read_stream(r, seconds):
    r.sock.settimeout(0.2)
    data = r.buf
    r.buf = b""
    end = time.time() + seconds
    while time.time() < end:
        try:
            chunk = r.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        except socket.timeout:
            pass
    return data


def make_streams(out):
    os.makedirs(out, exist_ok=True)
    for diskless in ("yes", "no"):
        server = Server("--repl-diskless-sync", diskless, "--repl-diskless-sync-delay", "0",
                        "--repl-ping-replica-period", "1")
        try:
            r, head = replica(server.port)
            framing = "eof" if diskless == "yes" else "len"
            with open(os.path.join(out, "fullresync-%s" % framing), "wb") as f:
                f.write(head)
            if diskless == "no":
                server.stop()
                continue
            c = server.client()
            for name, commands in STREAMS.items():
                read_stream(r, 0.3)  # drop what came before
                for cmd in commands:
                    c.call(*cmd)
                with open(os.path.join(out, name), "wb") as f:
                    f.write(read_stream(r, 0.5))
            # The source's keepalive PING (every second here) and a WAIT's REPLCONF GETACK.
            read_stream(r, 0.3)
            c.sock.sendall(encode("WAIT", "1", "300"))
            data = read_stream(r, 1.5)
            c.reply()
            with open(os.path.join(out, "stream-ping-getack"), "wb") as f:
                f.write(data)
            c.close()
            r.close()
        finally:
            if server.proc.poll() is None:
                server.stop()


def make_replies(out):
    """Real replies of every type, as the agent reads them from a target or in the handshake."""
    server = Server()
    try:
        c = server.client()
        c.call("SET", "k", "v")
        c.call("RPUSH", "l", "a", "b")
        samples = {
            "reply-status": [["SET", "x", "1"], ["PING"]],
            "reply-error": [["INCR", "l"], ["NOSUCHCOMMAND"]],
            "reply-integer-bulk-null": [["INCR", "n"], ["GET", "k"], ["GET", "missing"]],
            "reply-array": [["CONFIG", "GET", "proto-max-bulk-len"], ["TIME"], ["LRANGE", "l", "0", "-1"]],
            "reply-exec": [["MULTI"], ["SET", "a", "1"], ["INCR", "k"], ["EXEC"]],
            "reply-nested": [["XADD", "x", "1-1", "f", "v"], ["XRANGE", "x", "-", "+"]],
        }
        for name, commands in samples.items():
            raw = b""
            for cmd in commands:
                raw += c.call(*cmd)[1]
            with open(os.path.join(out, name), "wb") as f:
                f.write(raw)
        c.close()
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "corpus"))
    args = ap.parse_args()
    make_rdbs(os.path.join(args.out, "rdb"))
    make_streams(os.path.join(args.out, "resp"))
    make_replies(os.path.join(args.out, "resp"))


if __name__ == "__main__":
    main()
