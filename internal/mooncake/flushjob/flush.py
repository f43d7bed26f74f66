#!/usr/bin/env python3
"""Flush one namespace (a key prefix) from a Mooncake store.

Connects to the master as a pure client (it mounts no memory), removes every object whose key
starts with the prefix with remove_by_regex('^' + escaped prefix), then, when the master's admin
URL is given, counts the keys of that prefix still listed by /get_all_keys. Prints one JSON line:

    {"removed": N, "left": M}        ("left" is null without an admin URL)

Exit codes: 0 done; 1 failed (a message on stderr says why); 2 bad usage; 3 keys of the prefix
were left and --require-empty was set.

Every flag has an environment variable, for use as a Kubernetes Job:
    --master          MOONCAKE_MASTER               master RPC address HOST:PORT, or etcd://HOST:PORT[;...]
                                                    for HA masters, with MC_STORE_CLUSTER_ID (required)
    --prefix          MOONCAKE_FLUSH_PREFIX         key prefix to remove (required, non-empty)
    --admin-url       MOONCAKE_ADMIN_URL            http://HOST:PORT of the master's --metrics_port
    --force/--no-force MOONCAKE_FLUSH_FORCE         also remove objects under a read lease (default on)
    --require-empty   MOONCAKE_FLUSH_REQUIRE_EMPTY  exit 3 when keys of the prefix remain
    --tenant-id       MOONCAKE_TENANT_ID            client tenant (default "default")
    --local-hostname  MOONCAKE_LOCAL_HOSTNAME       address to advertise (default: the local IP
                                                    that routes to the master)
    --protocol        MOONCAKE_PROTOCOL             tcp (default) or rdma
    --metadata-server MOONCAKE_TE_META_DATA_SERVER  default P2PHANDSHAKE
    --timeout         MOONCAKE_FLUSH_TIMEOUT        seconds for the whole run (default 120)
    --verbose         MOONCAKE_FLUSH_VERBOSE        pass the native client's log through to stderr

The prefix isolates a namespace only on a master without multi-tenancy or within one tenant:
remove_by_regex acts on the client's tenant. /get_all_keys lists the default tenant only.
"""

import argparse
import http.client
import json
import os
import select
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_EMPTY = 3

# Mooncake ErrorCode values (mooncake-store/include/types.h) a removal can return.
ERROR_NAMES = {
    -1: "INTERNAL_ERROR",
    -600: "INVALID_PARAMS",
    -601: "ILLEGAL_CLIENT",
    -900: "RPC_FAIL",
    -901: "RPC_TIMEOUT",
    -1010: "UNAVAILABLE_IN_CURRENT_STATUS",
    -1011: "UNAVAILABLE_IN_CURRENT_MODE",
    -1701: "TENANT_NOT_REGISTERED",
}

# Characters with a meaning in an ECMAScript regular expression (the master compiles the pattern
# with std::regex ECMAScript). Only these are escaped: an escaped ordinary character such as
# "\-" is an error in some ECMAScript engines.
_REGEX_SPECIAL = frozenset("\\^$.|?*+()[]{}/")


class Failure(Exception):
    """An error a person can act on; printed without a traceback."""


def regex_for_prefix(prefix):
    """An anchored ECMAScript regex that matches exactly the keys starting with prefix."""
    return "^" + "".join("\\" + c if c in _REGEX_SPECIAL else c for c in prefix)


def describe(code):
    return "%d (%s)" % (code, ERROR_NAMES.get(code, "see ErrorCode in Mooncake's types.h"))


def split_host_port(addr):
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise Failure("master address %r is not HOST:PORT (set --master or MOONCAKE_MASTER)" % addr)
    return host.strip("[]"), int(port)


ETCD_SCHEME = "etcd://"

# Clients left open on purpose until the process exits (see remove_prefix).
_KEEP_OPEN = []


def is_etcd(addr):
    return addr[: len(ETCD_SCHEME)].lower() == ETCD_SCHEME


def master_endpoints(addr):
    """The (host, port) pairs to reach: the master's, or for masters with HA an etcd:// address's
    etcd endpoints (separated by ';' or ','), in which the client finds the leader."""
    if addr[: len(ETCD_SCHEME)].lower() == ETCD_SCHEME:
        eps = [e.strip() for e in addr[len(ETCD_SCHEME):].replace(",", ";").split(";") if e.strip()]
        if not eps:
            raise Failure("master address %r names no etcd endpoint" % addr)
        return [split_host_port(e) for e in eps]
    return [split_host_port(addr)]


def local_ip_towards(host, port):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def run_isolated(fn, args, timeout, capture_log):
    """Runs fn(args) in a forked child and returns its result.

    The native client holds the interpreter lock while it blocks (against an unresponsive master
    its setup retries for minutes), so no thread of this process could enforce a deadline: the
    parent does, and kills the child when the deadline passes. With capture_log the child's
    stdout and stderr (where the native client logs) go to a temporary file whose last lines are
    added to an error message.
    """
    log = tempfile.TemporaryFile() if capture_log else None
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        if log is not None:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        try:
            msg = {"result": fn(args)}
        except Failure as e:
            msg = {"error": str(e)}
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which decides
            msg = {"error": "unexpected error: %r" % (e,)}
        os.write(w, json.dumps(msg).encode())
        os._exit(0)

    os.close(w)
    deadline = time.monotonic() + timeout
    data = b""
    timed_out = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([r], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)

    def tail(lines=15):
        if log is None:
            return ""
        log.seek(0)
        text = log.read().decode("utf-8", "replace").strip().splitlines()
        return "\n".join(text[-lines:])

    def fail(message):
        t = tail()
        if t:
            message += "\nlast lines of the Mooncake client log:\n" + t
        raise Failure(message)

    if timed_out:
        fail("gave up after %gs: the Mooncake master at %s did not answer in time; is it overloaded, "
             "or is that port not its --rpc_port? (raise MOONCAKE_FLUSH_TIMEOUT to wait longer)"
             % (timeout, args.master))
    if not data:
        how = ("signal %d" % os.WTERMSIG(status)) if os.WIFSIGNALED(status) else ("exit code %d" % os.WEXITSTATUS(status))
        fail("the Mooncake client crashed (%s) before reporting a result" % how)
    msg = json.loads(data.decode())
    if "error" in msg:
        fail(msg["error"])
    return msg["result"]


def check_reachable(args):
    # Without this check the native client retries for about 90 s before giving up. With HA
    # (etcd://) one reachable etcd endpoint is enough: the client finds the leader there.
    err = None
    for host, port in master_endpoints(args.master):
        try:
            socket.create_connection((host, port), timeout=5).close()
            return
        except OSError as e:
            err = e
    raise Failure(
        "cannot reach the Mooncake master at %s: %s; check MOONCAKE_MASTER and that the "
        "master's --rpc_port (or, for etcd://, the etcd client port) is reachable from this pod"
        % (args.master, err.strerror or err)
    ) from None


def remove_prefix(args):
    """Runs in the child of run_isolated: sets up a pure client and removes the prefix."""
    host, port = master_endpoints(args.master)[0]
    try:
        from mooncake.store import MooncakeDistributedStore
    except ImportError as e:
        raise Failure(
            "the Mooncake Python client is not installed (%s): run this script in an image with "
            "mooncake-transfer-engine or mooncake-transfer-engine-non-cuda" % e
        ) from None

    store = MooncakeDistributedStore()
    config = {
        "local_hostname": args.local_hostname or local_ip_towards(host, port),
        "metadata_server": args.metadata_server,
        "global_segment_size": 0,  # a pure client: it holds no objects
        "local_buffer_size": 0,
        "protocol": args.protocol,
        "master_server_addr": args.master,
    }
    if args.tenant_id != "default":
        config["tenant_id"] = args.tenant_id
    try:
        rc = store.setup(config)
    except TypeError:
        # Releases before the dict form of setup() take positional arguments and no tenant.
        if args.tenant_id != "default":
            raise Failure("this Mooncake client cannot select tenant %r: it is too old" % args.tenant_id)
        rc = store.setup(config["local_hostname"], args.metadata_server, 0, 0, args.protocol, "", args.master)
    if rc != 0:
        raise Failure("could not set up a Mooncake client against %s: setup returned %s" % (args.master, describe(rc)))
    try:
        removed = store.remove_by_regex(regex_for_prefix(args.prefix), args.force)
    finally:
        # Through etcd:// (masters with HA) closing the client, by close() or by its destructor,
        # waits about 30 s for its leader watch to end. This pure client holds no memory and runs
        # in a child that exits next (os._exit, no destructors): it is kept open, and the master
        # forgets it after its --client_ttl.
        if is_etcd(args.master):
            _KEEP_OPEN.append(store)
        else:
            store.close()
    if removed < 0:
        raise Failure("remove_by_regex for prefix %r failed: %s" % (args.prefix, describe(removed)))
    return removed


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A master never redirects: a redirect is reported as its HTTP status, not followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def count_left(admin_url, prefix, timeout):
    """Streams /get_all_keys and counts the keys that start with prefix.

    Failures name the URL and what happened, never what the server sent (its body, headers or a
    line that is not HTTP): these messages reach the CacheFlush's status.
    """
    url = admin_url.rstrip("/") + "/get_all_keys"
    hint = "check MOONCAKE_ADMIN_URL (the master's --metrics_port)"
    left = 0
    try:
        with _opener.open(url, timeout=timeout) as resp:
            for raw in resp:
                if raw.decode("utf-8", "replace").rstrip("\r\n").startswith(prefix):
                    left += 1
    except urllib.error.HTTPError as e:
        raise Failure("listing keys at %s failed: HTTP %d; %s" % (url, e.code, hint)) from None
    except http.client.RemoteDisconnected:
        raise Failure("cannot list keys at %s: the server closed the connection without an HTTP answer; %s"
                      % (url, hint)) from None
    except http.client.HTTPException:
        raise Failure("cannot list keys at %s: the answer is not HTTP; %s" % (url, hint)) from None
    except urllib.error.URLError as e:
        raise Failure("cannot list keys at %s: %s; %s" % (url, e.reason, hint)) from None
    except OSError as e:
        raise Failure("cannot list keys at %s: %s; %s" % (url, e, hint)) from None
    return left


def env_bool(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    print("flush.py: %s=%r is not a boolean (use true or false)" % (name, value), file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)


def parse(argv):
    env = os.environ.get
    p = argparse.ArgumentParser(
        description="Flush one key prefix from a Mooncake store.",
        epilog="See the docstring at the top of this file for environment variables and exit codes.",
    )
    p.add_argument("--master", default=env("MOONCAKE_MASTER", ""))
    p.add_argument("--prefix", default=env("MOONCAKE_FLUSH_PREFIX", ""))
    p.add_argument("--admin-url", default=env("MOONCAKE_ADMIN_URL", ""))
    p.add_argument("--force", dest="force", action="store_true", default=env_bool("MOONCAKE_FLUSH_FORCE", True))
    p.add_argument("--no-force", dest="force", action="store_false")
    p.add_argument("--require-empty", action="store_true", default=env_bool("MOONCAKE_FLUSH_REQUIRE_EMPTY", False))
    p.add_argument("--tenant-id", default=env("MOONCAKE_TENANT_ID", "") or "default")
    p.add_argument("--local-hostname", default=env("MOONCAKE_LOCAL_HOSTNAME", ""))
    p.add_argument("--protocol", default=env("MOONCAKE_PROTOCOL", "") or "tcp")
    p.add_argument("--metadata-server", default=env("MOONCAKE_TE_META_DATA_SERVER", "") or "P2PHANDSHAKE")
    p.add_argument("--timeout", type=float, default=float(env("MOONCAKE_FLUSH_TIMEOUT", "") or 120))
    p.add_argument("--verbose", action="store_true", default=env_bool("MOONCAKE_FLUSH_VERBOSE", False))
    args = p.parse_args(argv)
    if not args.master:
        p.error("the master address is required: --master HOST:PORT or MOONCAKE_MASTER")
    if not args.prefix:
        p.error("the prefix is required and must not be empty (an empty prefix would remove every key): "
                "--prefix or MOONCAKE_FLUSH_PREFIX")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    return args


def main(argv=None):
    args = parse(argv)
    deadline = time.monotonic() + args.timeout
    removed = None
    try:
        check_reachable(args)
        removed = run_isolated(remove_prefix, args, args.timeout, capture_log=not args.verbose)
        left = None
        if args.admin_url:
            left = count_left(args.admin_url, args.prefix, max(1.0, deadline - time.monotonic()))
    except Failure as e:
        if removed is None:
            print("flush.py: %s" % e, file=sys.stderr, flush=True)
        else:
            print("flush.py: removed %d keys with prefix %r, then %s" % (removed, args.prefix, e),
                  file=sys.stderr, flush=True)
        return EXIT_FAILED
    print(json.dumps({"removed": removed, "left": left}), flush=True)
    if args.require_empty and left:
        print("flush.py: %d keys with prefix %r are still listed after the flush; writers of this "
              "namespace may still be running" % (left, args.prefix), file=sys.stderr, flush=True)
        return EXIT_NOT_EMPTY
    return 0


if __name__ == "__main__":
    sys.exit(main())
