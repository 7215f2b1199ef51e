#!/usr/bin/env python3
"""Tiny CQL readiness probe: speaks the Cassandra native protocol v4 with the
Python standard library only (no driver, no cqlsh).

  cql_check.py [--host 127.0.0.1] [--port 9042] [--timeout 5] [--lwt]

Default: STARTUP, then `SELECT release_version FROM system.local`; prints the
version and exits 0. With --lwt it also creates a throwaway keyspace, runs
`INSERT ... IF NOT EXISTS` twice (expects [applied] true, then false) and drops
the keyspace again. Any failure: message on stderr, exit 1.
"""
import argparse
import socket
import struct
import sys
import uuid

VERSION = 0x04
OP_ERROR, OP_STARTUP, OP_READY, OP_AUTHENTICATE, OP_QUERY, OP_RESULT = 0x00, 0x01, 0x02, 0x03, 0x07, 0x08
CL_ONE, CL_QUORUM = 0x0001, 0x0004


class CqlError(Exception):
    pass


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise CqlError("truncated frame")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def short(self):
        return struct.unpack(">H", self.take(2))[0]

    def string(self):
        return self.take(self.short()).decode("utf-8")

    def bytes(self):
        n = self.int()
        return None if n < 0 else self.take(n)

    def option(self):
        """Reads a column type [option]; returns its id (sub-types skipped)."""
        tid = self.short()
        if tid == 0x0000:          # custom
            self.string()
        elif tid in (0x0020, 0x0022):  # list, set
            self.option()
        elif tid == 0x0021:        # map
            self.option()
            self.option()
        elif tid == 0x0030:        # udt
            self.string()
            self.string()
            for _ in range(self.short()):
                self.string()
                self.option()
        elif tid == 0x0031:        # tuple
            for _ in range(self.short()):
                self.option()
        return tid


def string_bytes(s):
    b = s.encode("utf-8")
    return struct.pack(">H", len(b)) + b


class Conn:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.stream = 0

    def recv_exact(self, n):
        chunks, got = [], 0
        while got < n:
            c = self.sock.recv(n - got)
            if not c:
                raise CqlError("connection closed by server")
            chunks.append(c)
            got += len(c)
        return b"".join(chunks)

    def request(self, opcode, body):
        self.stream = (self.stream + 1) % 32768
        self.sock.sendall(struct.pack(">BBhBi", VERSION, 0, self.stream, opcode, len(body)) + body)
        while True:
            ver, flags, stream, op, length = struct.unpack(">BBhBi", self.recv_exact(9))
            payload = self.recv_exact(length)
            if stream != self.stream:      # e.g. server events (stream -1): skip
                continue
            if flags & 0x01:
                raise CqlError("compressed frame not expected")
            r = Reader(payload)
            if flags & 0x02:               # tracing id
                r.take(16)
            if flags & 0x08:               # warnings [string list]
                for _ in range(r.short()):
                    r.string()
            if flags & 0x04:               # custom payload [bytes map]
                for _ in range(r.short()):
                    r.string()
                    r.bytes()
            if op == OP_ERROR:
                code = r.int()
                raise CqlError("server error 0x%04x: %s" % (code, r.string()))
            return op, r

    def startup(self):
        body = struct.pack(">H", 1) + string_bytes("CQL_VERSION") + string_bytes("3.0.0")
        op, _ = self.request(OP_STARTUP, body)
        if op == OP_AUTHENTICATE:
            raise CqlError("server requires authentication")
        if op != OP_READY:
            raise CqlError("unexpected reply to STARTUP: opcode %d" % op)

    def query(self, cql, consistency=CL_ONE):
        q = cql.encode("utf-8")
        body = struct.pack(">i", len(q)) + q + struct.pack(">HB", consistency, 0)
        op, r = self.request(OP_QUERY, body)
        if op != OP_RESULT:
            raise CqlError("unexpected reply to QUERY: opcode %d" % op)
        kind = r.int()
        if kind != 0x0002:                 # Void, Set_keyspace, Schema_change...
            return [], []
        flags, ncols = r.int(), r.int()
        if flags & 0x0002:                 # has_more_pages
            r.bytes()
        names = []
        if not flags & 0x0004:             # metadata present
            global_spec = flags & 0x0001
            if global_spec:
                r.string()
                r.string()
            for _ in range(ncols):
                if not global_spec:
                    r.string()
                    r.string()
                names.append(r.string())
                r.option()
        rows = [[r.bytes() for _ in range(ncols)] for _ in range(r.int())]
        return names, rows

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def lwt_check(conn):
    ks = "qim_stack_selftest"
    conn.query("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = "
               "{'class': 'SimpleStrategy', 'replication_factor': 1}" % ks, CL_ONE)
    try:
        conn.query("CREATE TABLE IF NOT EXISTS %s.t (k uuid PRIMARY KEY, v text)" % ks, CL_ONE)
        key = uuid.uuid4()
        results = []
        for value in ("first", "second"):
            names, rows = conn.query("INSERT INTO %s.t (k, v) VALUES (%s, '%s') IF NOT EXISTS"
                                     % (ks, key, value), CL_QUORUM)
            applied = rows[0][names.index("[applied]")]
            results.append(applied == b"\x01")
        if results != [True, False]:
            raise CqlError("LWT gave [applied] = %s, expected [True, False]" % results)
        names, rows = conn.query("SELECT v FROM %s.t WHERE k = %s" % (ks, key), CL_QUORUM)
        if not rows or rows[0][0] != b"first":
            raise CqlError("LWT row not readable back: %r" % rows)
    finally:
        conn.query("DROP KEYSPACE IF EXISTS %s" % ks, CL_ONE)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9042)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--lwt", action="store_true", help="also check lightweight transactions")
    args = ap.parse_args()
    conn = None
    try:
        conn = Conn(args.host, args.port, args.timeout)
        conn.startup()
        names, rows = conn.query("SELECT release_version FROM system.local")
        if not rows or rows[0][0] is None:
            raise CqlError("system.local returned no row")
        version = rows[0][0].decode("utf-8")
        if args.lwt:
            lwt_check(conn)
            print("%s (LWT ok)" % version)
        else:
            print(version)
        return 0
    except (OSError, CqlError, struct.error, ValueError, IndexError) as e:
        print("cql_check: %s:%d: %s" % (args.host, args.port, e), file=sys.stderr)
        return 1
    finally:
        if conn is not None:
            conn.close()


if __name__ == "__main__":
    sys.exit(main())
