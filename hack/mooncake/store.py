#!/usr/bin/env python3
"""Drive a real Mooncake store from the command line: put, list and remove objects.

Uses mooncake.store.MooncakeDistributedStore over TCP with P2PHANDSHAKE metadata, the same
client SGLang's HiCache backend uses. Run it with the interpreter of bin/mooncake-venv
(hack/mooncake.sh installs it).

    store.py --master 127.0.0.1:50051 serve --size 4096 --key a --key b   # put, print "ready", stay up
    store.py --master 127.0.0.1:50051 put --size 4096 --keys-file keys.txt
    store.py --admin-url http://127.0.0.1:9003 list [--prefix P]
    store.py --master 127.0.0.1:50051 exists --key a                      # prints {"exists": N}
    store.py --master 127.0.0.1:50051 verify --size 4096 --keys-file k   # prints {"verified": N, ...}
    store.py --master 127.0.0.1:50051 remove-regex '^hc-abc_' --force    # prints {"removed": N}
    store.py --master 127.0.0.1:50051 remove-all --force                 # prints {"removed": N}

Segment lifetime: an object lives in the memory segment of some client. When that client
closes or dies, the master drops its segment and every object in it (after --client_ttl, 10 s,
for a client that died without closing). `put` therefore mounts no memory by default
(--segment-size 0) and needs a live segment elsewhere (a `serve` process, a store service or an
embedded SGLang rank); `serve` mounts its own segment, puts the keys into it and keeps them
alive until it receives SIGTERM or SIGINT.

The client API has no call that lists keys: `list` reads the master's admin endpoint
/get_all_keys (--admin-url), which lists the default tenant only.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import urllib.request

MIB = 1 << 20
BATCH = 256

# Mooncake ErrorCode values (mooncake-store/include/types.h) seen by these commands.
ERROR_NAMES = {
    -1: "INTERNAL_ERROR",
    -10: "BUFFER_OVERFLOW",
    -101: "SEGMENT_NOT_FOUND",
    -400: "INVALID_KEY",
    -600: "INVALID_PARAMS",
    -601: "ILLEGAL_CLIENT",
    -704: "OBJECT_NOT_FOUND",
    -705: "OBJECT_ALREADY_EXISTS",
    -706: "OBJECT_HAS_LEASE",
    -900: "RPC_FAIL",
    -901: "RPC_TIMEOUT",
    -1010: "UNAVAILABLE_IN_CURRENT_STATUS",
    -1011: "UNAVAILABLE_IN_CURRENT_MODE",
    -1700: "TENANT_QUOTA_EXCEEDED",
    -1701: "TENANT_NOT_REGISTERED",
}


class Failure(Exception):
    """An error the user can act on; printed without a traceback."""


def describe(code):
    return "%d (%s)" % (code, ERROR_NAMES.get(code, "see ErrorCode in Mooncake's types.h"))


def split_host_port(addr):
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise Failure("master address %r is not HOST:PORT" % addr)
    return host.strip("[]"), int(port)


ETCD_SCHEME = "etcd://"


def master_endpoints(addr):
    """The (host, port) pairs to reach: the master's, or for masters with HA an etcd:// address's
    etcd endpoints (separated by ';' or ','), in which the client finds the leader."""
    if addr[: len(ETCD_SCHEME)].lower() == ETCD_SCHEME:
        eps = [e.strip() for e in addr[len(ETCD_SCHEME):].replace(",", ";").split(";") if e.strip()]
        if not eps:
            raise Failure("master address %r names no etcd endpoint" % addr)
        return [split_host_port(e) for e in eps]
    return [split_host_port(addr)]


def local_ip_towards(addr):
    """The local address the kernel would use to reach addr (no packet is sent)."""
    host, port = master_endpoints(addr)[0]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def check_reachable(addr, timeout):
    err = None
    for host, port in master_endpoints(addr):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as e:
            err = e
    raise Failure(
        "cannot reach the Mooncake master at %s: %s; check the address and that the master's "
        "--rpc_port (for etcd://, the etcd client port) is reachable from here" % (addr, err.strerror or err)
    ) from None


def connect(args, segment_size, buffer_size):
    # Without this check the client retries for about 90 s before giving up.
    check_reachable(args.master, 5)
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    hostname = args.local_hostname or local_ip_towards(args.master)
    rc = store.setup(
        {
            "local_hostname": hostname,
            "metadata_server": args.metadata_server,
            "global_segment_size": segment_size,
            "local_buffer_size": buffer_size,
            "protocol": args.protocol,
            "master_server_addr": args.master,
            "tenant_id": args.tenant_id,
        }
    )
    if rc != 0:
        raise Failure(
            "could not set up a Mooncake client against %s (setup returned %s); the master's log "
            "and the lines above say why" % (args.master, describe(rc))
        )
    return store


def close(store, args):
    """Closes a client, except a pure one through etcd://, whose close waits about 30 s for its
    leader watch: the process then exits without closing it (see the end of this file)."""
    if not is_etcd(args.master):
        store.close()


def read_keys(args):
    keys = list(args.key or [])
    if args.keys_file:
        with (sys.stdin if args.keys_file == "-" else open(args.keys_file)) as f:
            keys.extend(line.strip() for line in f if line.strip())
    if not keys and args.cmd in ("put", "exists", "verify"):
        raise Failure("no keys given: pass --key K (repeatable) or --keys-file FILE")
    return keys


def put_keys(store, keys, size):
    value = b"\xa5" * size
    # A batch is staged in the client's local buffer (put_buffer_size): keep it within half.
    batch = max(1, min(BATCH, put_buffer_size(size) // (2 * size)))
    for i in range(0, len(keys), batch):
        chunk = keys[i : i + batch]
        rc = store.put_batch(chunk, [value] * len(chunk))
        if rc != 0:
            # Find the key that failed for a useful message.
            for key in chunk:
                krc = store.put(key, value)
                if krc != 0:
                    raise Failure("put %r (%d bytes) failed: %s" % (key, size, describe(krc)))
            raise Failure("put_batch failed: %s" % describe(rc))


def put_buffer_size(size):
    """The local buffer of a client that puts or reads objects of size bytes."""
    return max(16 * MIB, size * 2)


def segment_for(keys, size, requested):
    if requested is not None:
        return requested
    need = len(keys) * size
    return max(16 * MIB, ((need + need // 4 + MIB) // MIB + 1) * MIB)


def cmd_put(args):
    keys = read_keys(args)
    store = connect(args, args.segment_size or 0, put_buffer_size(args.size))
    try:
        put_keys(store, keys, args.size)
    finally:
        close(store, args)
    print(json.dumps({"put": len(keys)}), flush=True)


def cmd_serve(args):
    keys = read_keys(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    store = connect(args, segment_for(keys, args.size, args.segment_size), put_buffer_size(args.size))
    try:
        put_keys(store, keys, args.size)
        print("ready %d" % len(keys), flush=True)
        # Exit when told to, or when the parent that started us goes away (stdin closes).
        if args.exit_on_stdin_eof:
            threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        while not stop.wait(1):
            pass
    finally:
        store.close()


def cmd_exists(args):
    """Probes keys; the master then holds a read lease on each for --default_kv_lease_ttl."""
    keys = read_keys(args)
    store = connect(args, 0, 0)
    try:
        results = store.batch_is_exist(keys)
    finally:
        close(store, args)
    bad = [(k, r) for k, r in zip(keys, results) if r < 0]
    if bad:
        raise Failure("is_exist(%r) failed: %s" % (bad[0][0], describe(bad[0][1])))
    print(json.dumps({"exists": sum(1 for r in results if r == 1)}), flush=True)


def cmd_verify(args):
    """Reads keys back and checks they hold what put wrote (--size bytes of 0xa5 each)."""
    keys = read_keys(args)
    store = connect(args, 0, put_buffer_size(args.size))
    verified = missing = wrong = 0
    try:
        expect = b"\xa5" * args.size
        for key in keys:
            value = store.get(key)
            if not value:
                missing += 1
            elif value != expect:
                wrong += 1
            else:
                verified += 1
    finally:
        close(store, args)
    print(json.dumps({"verified": verified, "missing": missing, "wrong": wrong}), flush=True)


def admin_keys(admin_url):
    url = admin_url.rstrip("/") + "/get_all_keys"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            for raw in resp:
                key = raw.decode("utf-8", "replace").rstrip("\r\n")
                if key:
                    yield key
    except OSError as e:
        raise Failure("cannot list keys from %s: %s" % (url, e)) from None


def cmd_list(args):
    if not args.admin_url:
        raise Failure(
            "the Mooncake client API cannot list keys; pass --admin-url (the master's "
            "--metrics_port, e.g. http://127.0.0.1:9003) to read /get_all_keys"
        )
    for key in admin_keys(args.admin_url):
        if key.startswith(args.prefix):
            print(key)


def cmd_remove_regex(args):
    store = connect(args, 0, 0)
    try:
        n = store.remove_by_regex(args.regex, args.force)
    finally:
        close(store, args)
    if n < 0:
        raise Failure("remove_by_regex(%r) failed: %s" % (args.regex, describe(n)))
    print(json.dumps({"removed": n}), flush=True)


def cmd_remove_all(args):
    store = connect(args, 0, 0)
    try:
        n = store.remove_all(args.force)
    finally:
        close(store, args)
    if n < 0:
        raise Failure("remove_all failed: %s" % describe(n))
    print(json.dumps({"removed": n}), flush=True)


def parse(argv):
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--master", default=env("MOONCAKE_MASTER", "127.0.0.1:50051"),
                   help="master RPC address HOST:PORT, or etcd://HOST:PORT[;HOST:PORT] for HA masters "
                        "(then MC_STORE_CLUSTER_ID names their cluster) (env MOONCAKE_MASTER)")
    p.add_argument("--admin-url", default=env("MOONCAKE_ADMIN_URL", ""),
                   help="master admin HTTP base URL, e.g. http://127.0.0.1:9003 (env MOONCAKE_ADMIN_URL)")
    p.add_argument("--local-hostname", default=env("MOONCAKE_LOCAL_HOSTNAME", ""),
                   help="address this client advertises (default: the local IP that reaches the master)")
    p.add_argument("--metadata-server", default=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"))
    p.add_argument("--protocol", default=env("MOONCAKE_PROTOCOL", "tcp"))
    p.add_argument("--tenant-id", default=env("MOONCAKE_TENANT_ID", "default"))
    sub = p.add_subparsers(dest="cmd", required=True)

    for name, fn in (("put", cmd_put), ("serve", cmd_serve)):
        s = sub.add_parser(name)
        s.set_defaults(fn=fn)
        s.add_argument("--key", action="append", help="object key (repeatable)")
        s.add_argument("--keys-file", help="file with one key per line ('-' for stdin)")
        s.add_argument("--size", type=int, default=1024, help="bytes per object (default 1024)")
        s.add_argument("--segment-size", type=int, default=None,
                       help="bytes of memory this client mounts (put: 0, serve: enough for the keys)")
        if name == "serve":
            s.add_argument("--exit-on-stdin-eof", action="store_true",
                           help="also exit when stdin closes (the parent died)")

    s = sub.add_parser("exists", help="probe keys (grants each a read lease)")
    s.set_defaults(fn=cmd_exists)
    s.add_argument("--key", action="append", help="object key (repeatable)")
    s.add_argument("--keys-file", help="file with one key per line ('-' for stdin)")

    s = sub.add_parser("verify", help="read keys back and check their bytes (grants each a read lease)")
    s.set_defaults(fn=cmd_verify)
    s.add_argument("--key", action="append", help="object key (repeatable)")
    s.add_argument("--keys-file", help="file with one key per line ('-' for stdin)")
    s.add_argument("--size", type=int, default=1024, help="bytes put per object (default 1024)")

    s = sub.add_parser("list")
    s.set_defaults(fn=cmd_list)
    s.add_argument("--prefix", default="")

    s = sub.add_parser("remove-regex")
    s.set_defaults(fn=cmd_remove_regex)
    s.add_argument("regex", help="ECMAScript regex searched in each key; anchor it with ^")
    s.add_argument("--force", action="store_true", help="also remove objects under a read lease")

    s = sub.add_parser("remove-all")
    s.set_defaults(fn=cmd_remove_all)
    s.add_argument("--force", action="store_true", help="also remove objects under a read lease")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    try:
        if args.cmd in ("put", "serve", "verify") and args.size <= 0:
            raise Failure("--size must be positive")
        args.fn(args)
    except Failure as e:
        print("store.py: %s" % e, file=sys.stderr, flush=True)
        return 1
    return 0


def is_etcd(addr):
    return addr[: len(ETCD_SCHEME)].lower() == ETCD_SCHEME


if __name__ == "__main__":
    rc = main()
    if is_etcd(os.environ.get("MOONCAKE_MASTER", "")) or any(is_etcd(a) for a in sys.argv[1:]):
        # Through etcd:// a client's close waits about 30 s for its leader watch to end, and the
        # interpreter's teardown closes any client still alive: leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
