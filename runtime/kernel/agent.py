"""forge in-sandbox agent (stdlib only; embedded in the forge binary as runtime/kernel/agent.py).

Run as the sandbox's init: python3 -I -B /opt/forge/agent/agent.py
fd 3: requests from the host, fd 4: replies to the host, one JSON object per line each way.
The Go side of the protocol is runtime/kernel/client.go; keep the two in step.

User code runs in this process, so it could deliberately tamper with the agent; the host treats
every reply as untrusted. What the agent guarantees is that ordinary output (print, child
processes, stray writes to fd 1/2) never reaches the reply channel.
"""

import os
import sys

REQ_FD, REP_FD = 3, 4

# pid 1 of the sandbox only reaps orphans and forwards these signals to the agent (its child).
# It runs this code in a fresh, minimal interpreter (python3 -I -S -c ... <agent pid>): that
# costs less memory than a fork of the agent, whose every page the agent writes later would be
# copied and charged twice. Only builtin modules, so it needs no file system lookups.
_REAPER = r"""
import posix, _signal

def reap(child):
    def forward(signum, frame):
        try:
            posix.kill(child, signum)
        except ProcessLookupError:
            pass

    sigs = [getattr(_signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT",
                                                "SIGUSR1", "SIGUSR2")]
    for sig in sigs:
        _signal.signal(sig, forward)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, sigs)  # delivers what came before this point
    while True:
        try:
            pid, status = posix.waitpid(-1, 0)
        except ChildProcessError:
            posix._exit(1)
        if pid == child:
            code = posix.waitstatus_to_exitcode(status)
            posix._exit(code if code >= 0 else 128 - code)
"""


def _reap_as_init():
    """As pid 1 of the sandbox the agent would inherit every orphaned process and must reap it,
    but waiting for any child would steal exit statuses from subprocess. So pid 1 forks: the
    parent only reaps and forwards signals (the host's SIGINT included), the child is the agent.
    When the agent exits, so does pid 1, and the kernel kills whatever is left.

    This runs before the agent's imports and the parent replaces itself with _REAPER in a new
    interpreter. The forwarded signals stay blocked (the mask and pending signals survive
    execve) until the reaper has its handlers, so none is lost or kills the wrong process."""
    if os.getpid() != 1:
        return
    import _signal

    sigs = [getattr(_signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT",
                                                "SIGUSR1", "SIGUSR2")]
    _signal.pthread_sigmask(_signal.SIG_BLOCK, sigs)
    child = os.fork()
    if child == 0:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, sigs)
        return
    os.close(REQ_FD)  # the host must see EOF on the replies when the agent dies
    os.close(REP_FD)
    reaper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper")
    try:  # the static reaper forge installs beside the agent (reaperbin/reaper.c): ~0.1 MB
        os.execv(reaper, [reaper, str(child)])
    except OSError:
        pass
    if sys.executable:
        try:
            os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "-c",
                                      _REAPER + "reap(%d)\n" % child])
        except OSError:
            pass
    ns = {}  # no interpreter to exec: reap in this one
    exec(_REAPER, ns)
    ns["reap"](child)


if __name__ == "__main__":
    _reap_as_init()

# The agent imports only what a bare interpreter has loaded already or builds in: every module
# here is paid for at every sandbox start. So _ast rather than ast, _signal rather than signal
# (which pulls in enum), and the C half of json rather than json (which pulls in re and enum).
import _ast  # noqa: E402 (after the fork above, so pid 1 never loads the rest)
import _json  # noqa: E402
import _signal as signal  # noqa: E402
import _thread  # noqa: E402
import io  # noqa: E402
import time  # noqa: E402

HIGH_FD = 100  # the protocol fds move here, close-on-exec, out of the way of user code
CELL = "<cell>"
DEFAULT_OUTPUT_LIMIT = 1 << 20
MAX_OUTPUT_LIMIT = 16 << 20
RESULT_LIMIT = 64 << 10
DISPLAY_LIMIT = 8 << 20
INSPECT_REPR_LIMIT = 200
INSPECT_REPR_SECONDS = 0.5
INSPECT_MAX_VARIABLES = 1000
ERROR_TEXT_LIMIT = 64 << 10
# The host refuses replies past these (runtime/kernel/limits.go): the agent clips to them first,
# so only a forged reply is ever refused.
NAME_LIMIT = 256  # characters of a variable, type or exception name in a reply
DISPLAY_MAX_ITEMS = 1000
STREAM_CHUNK_LIMIT = 16 << 10  # bytes of each stream per "output" line (limits.go maxStreamChunk)
STREAM_MIN_MS = 50
STATE_NAMES_LIMIT = 1000  # names listed per list of a pickle_state/restore_state reply
JSON_NODE_BUDGET = 10000
OPTIONAL_MODULES = ("numpy", "pandas", "matplotlib")


# ---------------------------------------------------------------- JSON

def _no_default(o):
    raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)


def _dumps(obj, allow_nan=False, default=_no_default):
    """json.dumps(obj, ensure_ascii=False, allow_nan=..., default=...), compact separators,
    through the same C encoder json uses."""
    enc = _json.make_encoder({}, default, _json.encode_basestring, None, ":", ",",
                             False, False, allow_nan)
    return "".join(enc(obj, 0))


class _DecodeContext:  # what _json.make_scanner reads off a json.JSONDecoder
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float
    memo = None


_scan = _json.make_scanner(_DecodeContext())


def _loads(s):
    """json.loads for one request line (bytes); ValueError when it is not exactly one JSON
    value in UTF-8."""
    s = s.decode("utf-8").strip(" \t\r\n")
    try:
        obj, end = _scan(s, 0)
    except (StopIteration, SystemError):
        # SystemError: the C scanner reports most syntax errors as json.decoder.JSONDecodeError,
        # a ValueError, but only when json.decoder is imported already; else it fails this way.
        raise ValueError("request is not JSON") from None
    if end != len(s):
        raise ValueError("extra data after the JSON request")
    return obj


# _user is True exactly while user code (or a user __repr__, _repr_*_ ...) runs: SIGINT raises
# KeyboardInterrupt then and is ignored otherwise, so an interrupt never lands in the agent itself.
_user = False
_agent_pid = os.getpid()
_requests = None
_replies = None
_devnull = None
_stray_fds = 0  # fds beyond the protocol's the agent found open at start, and closed
_fds_closed = False  # set by zygote.py when the sandbox's pid 1 closed them before the agent


def _sigint(signum, frame):
    if _user:
        raise KeyboardInterrupt


def _call_user(fn, *args):
    """Runs fn with interrupts enabled. A fork()ed child of user code must never return into
    the agent loop (it would answer requests twice), so it exits here."""
    global _user
    _user = True
    try:
        return fn(*args)
    finally:
        _user = False
        if os.getpid() != _agent_pid:
            _flush_std()
            os._exit(0)


def _flush_std():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass


def _setup_fds():
    global _requests, _replies, _devnull, _stray_fds
    import fcntl

    req = fcntl.fcntl(REQ_FD, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    rep = fcntl.fcntl(REP_FD, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    os.close(REQ_FD)
    os.close(REP_FD)
    # Nothing else the launcher had open reaches user code; the count goes to the host in hello.
    # (A zygote child's pid 1 closed them all with close_range(2): zygote.py says so.)
    names = []
    if not _fds_closed:
        try:
            names = os.listdir("/proc/self/fd")
        except OSError:
            pass
    for name in names:
        fd = int(name)
        if fd > 2 and fd != req and fd != rep:
            try:
                os.close(fd)
                _stray_fds += 1
            except OSError:  # the listing's own fd, closed already
                pass
    _devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for fd in (0, 1, 2):
        os.dup2(_devnull, fd)  # dup2 makes 0-2 inheritable, as children expect
    _requests = os.fdopen(req, "rb", buffering=1 << 16)
    _replies = os.fdopen(rep, "wb", buffering=1 << 16)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = _text_stream(1)
    sys.stderr = sys.__stderr__ = _text_stream(2)


def _text_stream(fd):
    # Line buffered so that print() and the output of child processes interleave in order.
    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


class _Capture:
    """Per-exec capture of fds 1 and 2 into fresh memfds, inherited by child processes.

    A watcher thread shrinks a memfd that grows far past the cap while the code still runs:
    writers keep their file offset, so later writes land past a hole and cost no memory."""

    lock = _thread.allocate_lock()
    idle = _thread.allocate_lock()  # held while no exec captures: the watcher waits on it
    idle.acquire()
    watching = False
    fds = ()
    cap = 0
    stream = None  # while an exec streams: {"id", "interval", "last", "off"} (see stream_out)

    @staticmethod
    def start_watcher():
        """Started on the first exec (or by warm): an agent that never ran code has one thread."""
        if not _Capture.watching:
            _thread.start_new_thread(_Capture.watch, ())
            _Capture.watching = True

    def __init__(self, cap, stream=None):
        _Capture.start_watcher()
        self.cap = cap
        self.out = os.memfd_create("stdout", os.MFD_CLOEXEC)
        self.err = os.memfd_create("stderr", os.MFD_CLOEXEC)
        os.dup2(self.out, 1)
        os.dup2(self.err, 2)
        sys.stdout = self.stdout = _text_stream(1)
        sys.stderr = self.stderr = _text_stream(2)
        with _Capture.lock:
            _Capture.fds, _Capture.cap = (self.out, self.err), cap
            _Capture.stream = stream
        _Capture.idle.release()

    def finish(self):
        """Flushes, detaches fds 1/2 and returns (stdout, stderr, truncated)."""
        for s in (self.stdout, self.stderr):
            try:
                s.flush()
            except BaseException:
                pass
        _Capture.idle.acquire()
        with _Capture.lock:  # no "output" line can follow: the reply comes after this
            _Capture.fds, _Capture.stream = (), None
        os.dup2(_devnull, 1)
        os.dup2(_devnull, 2)
        out, t1 = self._read(self.out)
        err, t2 = self._read(self.err)
        os.close(self.out)
        os.close(self.err)
        return out, err, t1 or t2

    def _read(self, fd):
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, self.cap), 0) if size else b""
        if size > self.cap:
            data = _trim_partial_utf8(data)
        return data.decode("utf-8", errors="replace"), size > self.cap

    @staticmethod
    def watch():
        while True:
            with _Capture.idle:  # waits for an exec
                pass
            time.sleep(0.05)
            with _Capture.lock:
                for fd in _Capture.fds:
                    try:
                        if os.fstat(fd).st_size > _Capture.cap + (1 << 20):
                            os.ftruncate(fd, _Capture.cap + 1)
                    except OSError:
                        pass
                st = _Capture.stream
                if st is not None and _Capture.fds and time.monotonic() - st["last"] >= st["interval"]:
                    st["last"] = time.monotonic()
                    try:
                        _Capture.stream_out(st)
                    except Exception:
                        _Capture.stream = None  # the reply still carries all the output

    @staticmethod
    def stream_out(st):
        """Sends the output written since the last "output" line, at most STREAM_CHUNK_LIMIT bytes
        of each stream (when more came, the newest; "skipped" counts what was left out). Called
        with the lock held, so no line follows finish()."""
        line = {"op": "output", "id": st["id"], "stdout": "", "stderr": "", "skipped": 0}
        for i, (fd, key) in enumerate(zip(_Capture.fds, ("stdout", "stderr"))):
            end, off = min(os.fstat(fd).st_size, _Capture.cap), st["off"][i]
            if end <= off:
                continue
            if end - off > STREAM_CHUNK_LIMIT:
                line["skipped"] += end - off - STREAM_CHUNK_LIMIT
                off = end - STREAM_CHUNK_LIMIT
            data = _trim_partial_utf8(os.pread(fd, end - off, off))
            st["off"][i] = off + len(data)
            line[key] = data.decode("utf-8", errors="replace")
        if line["stdout"] or line["stderr"]:
            _send(line)


def _trim_partial_utf8(data):
    """Drops a multi-byte character that the cap cut in half (it would decode as U+FFFD)."""
    for k in range(1, min(4, len(data)) + 1):
        b = data[-k]
        if b & 0xC0 == 0x80:
            continue  # continuation byte: look further back for the lead byte
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return data[:-k] if need > k else data
    return data


# ---------------------------------------------------------------- values and rich display

_REPR_METHODS = (
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_json_", "application/json"),
)


def _safe_repr(obj, limit):
    try:
        r = repr(obj)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # a user __repr__ may raise anything, even SystemExit
        r = "<repr of %s failed: %s>" % (_type_name(obj), type(e).__name__)
    if not isinstance(r, str):
        r = str(type(r))
    if len(r) > limit:
        r = r[:limit] + "…"
    return r


def _clip(s, limit):
    return s if len(s) <= limit else s[:limit] + "…"


def _type_name(obj):
    t = type(obj)
    try:
        mod, name = t.__module__, t.__qualname__
        return _clip(name if mod == "builtins" else "%s.%s" % (mod, name), NAME_LIMIT)
    except Exception:
        return "?"


def _names(names):
    """A name list for a reply: at most STATE_NAMES_LIMIT names of at most NAME_LIMIT each."""
    return [_clip(n, NAME_LIMIT) for n in names[:STATE_NAMES_LIMIT]]


def _plain_json(obj):
    """True if obj is made only of JSON's own types (exact types: no subclasses, no tuples, str
    keys only, finite floats), small enough to send as a JSON value without losing anything."""
    budget = [JSON_NODE_BUDGET]

    def ok(x, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > 100:
            return False
        t = type(x)
        if x is None or t is bool or t is str:
            return True
        if t is int:
            return -(1 << 1000) < x < (1 << 1000)
        if t is float:
            return x == x and x not in (float("inf"), float("-inf"))
        if t is list:
            return all(ok(v, depth + 1) for v in x)
        if t is dict:
            return all(type(k) is str and ok(v, depth + 1) for k, v in x.items())
        return False

    return ok(obj, 0)


def _result_value(value):
    if value is None:
        return None
    if _plain_json(value):
        s = _dumps(value)
        if len(s) <= RESULT_LIMIT:
            return value
    return _safe_repr(value, RESULT_LIMIT)


class _Display:
    def __init__(self):
        self.items = []
        self.size = 0
        self.truncated = False
        # groups: [first item, main] of each shown object (a display() argument, a figure, the
        # cell's value: main), so that a face can tell them apart (E2B's result per object).
        self.groups = []

    def begin(self, main=False):
        if self.groups and self.groups[-1][0] == len(self.items):
            self.groups[-1] = [len(self.items), main]  # the previous object showed nothing
        else:
            self.groups.append([len(self.items), main])

    def add(self, mime, data):
        # Base64 is ASCII; text may grow up to 6x as JSON, and the host bounds the reply line.
        cost = len(data) if data.isascii() and data.isprintable() else len(
            _dumps(data, allow_nan=True).encode("utf-8", "surrogatepass"))
        if self.size + cost > DISPLAY_LIMIT or len(self.items) >= DISPLAY_MAX_ITEMS:
            self.truncated = True
            return
        self.size += cost
        self.items.append({"mime_type": mime, "data": data})

    def rich(self, obj):
        """Adds obj's _repr_*_ representations; returns whether it had any. An object shown as
        HTML (a pandas DataFrame) also gets its repr as text/plain, as Jupyter sends both: a
        client or model that cannot render HTML still reads the table."""
        found = False
        first = len(self.items)
        for method, mime in _REPR_METHODS:
            fn = getattr(type(obj), method, None)
            if fn is None:
                continue
            try:
                data = getattr(obj, method)()
            except KeyboardInterrupt:
                raise
            except Exception:
                continue
            if isinstance(data, tuple) and data:  # IPython allows (data, metadata)
                data = data[0]
            if data is None:
                continue
            if mime.startswith("image/") and mime != "image/svg+xml":
                if isinstance(data, (bytes, bytearray, memoryview)):
                    data = _b64encode(data)
                elif not isinstance(data, str):
                    continue
            elif mime == "application/json":
                try:
                    data = _dumps(data, default=str)
                except Exception:
                    continue
            elif isinstance(data, bytes):
                data = data.decode("utf-8", "replace")
            elif not isinstance(data, str):
                continue
            self.add(mime, data)
            found = True
        if any(it["mime_type"] == "text/html" for it in self.items[first:]):
            self.add("text/plain", _safe_repr(obj, RESULT_LIMIT))
        return found

    def display(self, *objs):
        for obj in objs:
            self.begin()
            if not self.rich(obj):
                self.add("text/plain", _safe_repr(obj, RESULT_LIMIT))

    def figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in list(plt.get_fignums()):
            self.begin()
            fig = plt.figure(num)
            buf = io.BytesIO()
            try:
                fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
                self.add("image/png", _b64encode(buf.getvalue()))
                # Its repr beside it ("<Figure size 640x480 with 1 Axes>"), as Jupyter sends.
                self.add("text/plain", _safe_repr(fig, RESULT_LIMIT))
            except KeyboardInterrupt:
                raise
            except Exception as e:
                print("forge: could not render figure %s: %s" % (num, e), file=sys.stderr)
            finally:
                plt.close(fig)


_current_display = None


def _b64encode(data):
    import base64

    return base64.b64encode(data).decode("ascii")


def display(*objs):
    """Shows objects in the result: images, HTML, markdown, JSON via their _repr_*_ methods."""
    if _current_display is not None:
        _current_display.display(*objs)


# ---------------------------------------------------------------- exec

# User code gets its own __main__ module (the agent's module stays reachable through its
# functions), so pickle and multiprocessing find user-defined functions and classes.
_main = type(sys)("__main__")
_main.__builtins__ = __builtins__
_main.display = display
_ns = _main.__dict__
_injected = {"display": display}


def _compile(code):
    # _ast rather than ast: the same node classes without importing ast.py (and contextlib)
    # at every sandbox start.
    tree = compile(code, CELL, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    body = compile(tree, CELL, "exec", dont_inherit=True)
    expr = compile(last, CELL, "eval", dont_inherit=True) if last is not None else None
    return body, expr


_cell_entry = None  # linecache's entry for the running cell: tracebacks and warnings show its lines
# The sources of the cells run so far, newest last, at most _CELLS_MAX bytes: a function
# defined in an earlier cell has only "<cell>" as its file, so save_tool (runtime/hosted)
# finds its source here. Not kept across hibernation.
_CELLS = []
_CELLS_MAX = 1 << 20


def _remember_cell(code):
    """Gives linecache the cell's lines. linecache (and tokenize under it) is imported only when
    something needs it, usually a traceback or a warning: until then _LinecacheSeeder keeps the
    entry and hands it over at that import."""
    global _cell_entry
    _cell_entry = (len(code), None, code.splitlines(True), CELL)
    if len(code) <= _CELLS_MAX:
        _CELLS.append(code)
        total = sum(len(c) for c in _CELLS)
        while total > _CELLS_MAX:
            total -= len(_CELLS.pop(0))
    lc = sys.modules.get("linecache")
    if lc is not None:
        try:
            lc.cache[CELL] = _cell_entry
        except Exception:  # user code may have replaced it
            pass


class _LinecacheSeeder:
    """A meta path finder that only watches for the first import of linecache, lets the
    other finders load it, and then puts the current cell into its cache."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "linecache":
            return None
        try:
            sys.meta_path.remove(_LinecacheSeeder)
        except ValueError:
            pass
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec

        class _Seeding:
            def __init__(self, inner):
                self._inner = inner

            def __getattr__(self, attr):
                return getattr(self._inner, attr)

            def create_module(self, spec):
                return self._inner.create_module(spec)

            def exec_module(self, module):
                self._inner.exec_module(module)
                if _cell_entry is not None:
                    module.cache[CELL] = _cell_entry

        spec.loader = _Seeding(loader)
        return spec


if "linecache" not in sys.modules:
    sys.meta_path.insert(0, _LinecacheSeeder)


def _run_cell(body, expr, disp):
    exec(body, _ns)
    if expr is None:
        return None
    value = eval(expr, _ns)
    if value is not None:
        _ns["_"] = value
        disp.begin(True)
        disp.rich(value)
    return _result_value(value)


def _strip_agent_frames(e):
    """Unlinks the agent's own frames (the exec call, the SIGINT handler) from the tracebacks
    of e and the exceptions chained to it, so tracebacks show only the user's code."""
    agent = _strip_agent_frames.__code__.co_filename
    seen = set()
    while e is not None and id(e) not in seen and len(seen) < 100:
        seen.add(id(e))
        keep = []
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename != agent:
                keep.append(tb)
            tb = tb.tb_next
        for a, b in zip(keep, keep[1:] + [None]):
            a.tb_next = b
        e.__traceback__ = keep[0] if keep else None
        e = e.__cause__ or e.__context__


def _error(e):
    import traceback

    try:
        _strip_agent_frames(e)
    except Exception:
        pass
    tb = e.__traceback__
    try:
        message = str(e)
    except BaseException:
        message = "<str() of exception failed>"
    if isinstance(e, SystemExit):
        message = "exit code %r" % (e.code,)
    try:
        text = "".join(traceback.format_exception(type(e), e, tb))
    except BaseException:
        text = "%s: %s\n" % (type(e).__name__, message)
    if len(message) > ERROR_TEXT_LIMIT:
        message = message[:ERROR_TEXT_LIMIT] + "…"
    if len(text) > ERROR_TEXT_LIMIT:  # keep the end, where the error is
        text = "…" + text[-ERROR_TEXT_LIMIT:]
    return {"type": _clip(type(e).__name__, NAME_LIMIT), "message": message, "traceback": text}


def _syntax_error(e):
    import traceback

    line, col = e.lineno or 0, e.offset or 0
    err = {
        "type": _clip(type(e).__name__, NAME_LIMIT),
        "message": _clip("%s (line %d, column %d)" % (e.msg, line, col), ERROR_TEXT_LIMIT),
        "traceback": _clip("".join(traceback.format_exception_only(type(e), e)), ERROR_TEXT_LIMIT),
    }
    if line:
        err["line"] = line
    if col:
        err["column"] = col
    return err


def op_exec(req):
    global _current_display
    code = req.get("code")
    if not isinstance(code, str):
        raise ProtocolError("exec needs a string 'code'")
    cap = req.get("output_limit") or DEFAULT_OUTPUT_LIMIT
    if type(cap) is not int or not 0 < cap <= MAX_OUTPUT_LIMIT:
        raise ProtocolError("output_limit must be an integer in 1..%d" % MAX_OUTPUT_LIMIT)
    _warm(req.get("warm_imports") or [])
    signal.signal(signal.SIGINT, _sigint)  # user code may have replaced it
    stream = None
    ms = req.get("stream_ms")
    if ms is not None:
        if type(ms) is not int or ms < STREAM_MIN_MS:
            raise ProtocolError("stream_ms must be an integer >= %d" % STREAM_MIN_MS)
        stream = {"id": req.get("id"), "interval": ms / 1000, "last": time.monotonic(), "off": [0, 0]}
    disp = _current_display = _Display()
    cap_io = _Capture(cap, stream)
    result, error = None, None
    try:
        try:
            body, expr = _compile(code)
        except Exception as e:  # ValueError: NUL bytes; RecursionError: deep nesting
            error = _syntax_error(e) if isinstance(e, SyntaxError) else _error(e)
        else:
            _remember_cell(code)
            try:
                result = _call_user(_run_cell, body, expr, disp)
            except BaseException as e:
                error = _error(e)
            try:
                _call_user(disp.figures)  # also after an error, as Jupyter shows them
            except BaseException as e:
                error = error or _error(e)
    finally:
        _current_display = None
        stdout, stderr, truncated = cap_io.finish()
    return {
        "stdout": stdout,
        "stderr": stderr,
        "truncated": truncated or disp.truncated,
        "result": result,
        "display": disp.items,
        "groups": disp.groups,
        "error": error,
        "count": sum(1 for _ in _user_vars()),  # for the session list; no reprs, no sizes
    }


def _warm(modules):
    """Import modules; an absolute path among them goes on sys.path first (a hosted tools
    template's /run/forge/sdk, where forge's own forge_tools is: never a client's path)."""
    imported = []
    for name in modules:
        if not isinstance(name, str):
            continue
        if name.startswith("/"):
            if name not in sys.path:
                sys.path.insert(0, name)
            continue
        try:
            _call_user(__import__, name)
            imported.append(name)
        except Exception:
            pass
    return imported


def op_warm(req):
    imported = _warm(req.get("modules") or [])
    # And an empty cell: the first exec starts the capture watcher thread and runs code
    # paths for the first time (0.5 ms), which a warmed sandbox has then done already.
    op_exec({"code": "pass"})
    return {"imported": imported}


def op_ping(req):
    return {"pong": True}


# ---------------------------------------------------------------- egress

# The sandbox has loopback only. With egress, the host serves an HTTP proxy on a unix socket in
# /run/forge (runtime/egress); this forwarder makes it the loopback proxy 127.0.0.1:PORT that
# HTTP(S)_PROXY name, for the code and its child processes. Imported only when asked for.
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
_egress = None  # (listening socket, unix socket path)


def op_egress(req):
    global _egress
    path = req.get("path") or ""
    if not isinstance(path, str) or (path and not path.startswith("/run/forge/")):
        raise ProtocolError("egress needs a 'path' under /run/forge, or none to turn it off")
    if _egress is not None and _egress[1] != path:
        _egress[0].close()  # the accept thread ends on the closed socket
        _egress = None
    if not path:
        for k in _PROXY_VARS + ("NO_PROXY", "no_proxy"):
            os.environ.pop(k, None)
        return {"port": 0}
    if _egress is None:
        import socket

        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind(("127.0.0.1", 0))
        ls.listen(64)
        _thread.start_new_thread(_egress_accept, (ls, path))
        _egress = (ls, path)
    port = _egress[0].getsockname()[1]
    for k in _PROXY_VARS:
        os.environ[k] = "http://127.0.0.1:%d" % port
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ""  # everything goes through the proxy
    return {"port": port}


def _egress_accept(ls, path):
    while True:
        try:
            c, _ = ls.accept()
        except OSError:
            return
        try:
            _thread.start_new_thread(_egress_pipe, (c, path))
        except RuntimeError:  # the pids limit: drop this connection, keep serving
            c.close()


def _egress_pipe(c, path):
    import select
    import socket

    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        u.connect(path)
        peer = {c.fileno(): (c, u), u.fileno(): (u, c)}
        p = select.poll()
        for fd in peer:
            p.register(fd, select.POLLIN)
        while peer:
            for fd, _ in p.poll():
                src, dst = peer[fd]
                data = src.recv(65536)
                if data:
                    dst.sendall(data)
                    continue
                p.unregister(fd)
                del peer[fd]
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    except OSError:
        pass
    finally:
        c.close()
        u.close()


# ---------------------------------------------------------------- inspect

class _Timeout(BaseException):  # BaseException: reprlib and user code catch Exception
    pass


def _alarm(signum, frame):
    raise _Timeout


def _user_vars():
    import types

    for name, value in list(_ns.items()):
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if _injected.get(name) is value:
            continue
        # Code-mode tool functions belong to forge's mcp_tools module, not to the user.
        if isinstance(value, types.FunctionType) and value.__module__ == "mcp_tools":
            continue
        yield name, value


def _describe(name, value):
    import reprlib
    import types

    mod = getattr(type(value), "__module__", "") or ""
    kind = "value"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        kind = "function"
    elif isinstance(value, type):
        kind = "class"
    var = {"name": _clip(name, NAME_LIMIT), "type": _type_name(value), "kind": kind}
    size = None
    if mod.startswith("numpy") and hasattr(value, "nbytes"):
        size = int(value.nbytes)
    elif mod.startswith("pandas") and hasattr(value, "memory_usage"):
        usage = value.memory_usage(deep=True)
        size = int(usage.sum() if hasattr(usage, "sum") else usage)
    if size is None:
        size = sys.getsizeof(value)
    var["size_bytes"] = int(size)
    if mod.startswith(("numpy", "pandas")) and hasattr(value, "shape"):
        var["shape"] = [int(n) for n in value.shape]
    elif kind == "value" and hasattr(type(value), "__len__"):
        var["length"] = int(len(value))
    r = reprlib.Repr()
    r.maxother = r.maxstring = INSPECT_REPR_LIMIT
    var["repr"] = _safe_repr_via(r, value)
    return var


def _safe_repr_via(r, value):
    try:
        if isinstance(value, (bytes, bytearray)) and len(value) > INSPECT_REPR_LIMIT:
            # repr() of the whole object would need 4 bytes per byte (a 100 MB
            # bytearray would OOM the sandbox) in one uninterruptible call.
            s = repr(value[:INSPECT_REPR_LIMIT]) + "…"
        else:
            s = r.repr(value)
    except (KeyboardInterrupt, _Timeout):
        raise
    except BaseException as e:
        s = "<repr failed: %s>" % type(e).__name__
    return s if len(s) <= INSPECT_REPR_LIMIT else s[:INSPECT_REPR_LIMIT] + "…"


def op_inspect(req):
    variables = []
    truncated = False
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for name, value in _user_vars():
            if len(variables) >= INSPECT_MAX_VARIABLES:
                truncated = True
                break
            # User __repr__/__len__ run here: each variable gets a time budget.
            signal.setitimer(signal.ITIMER_REAL, INSPECT_REPR_SECONDS, 0.1)
            try:
                var = _call_user(_describe, name, value)
            except _Timeout:
                var = {"name": _clip(name, NAME_LIMIT), "type": _type_name(value), "kind": "value",
                       "size_bytes": 0, "repr": "<inspect timed out>"}
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                var = {"name": _clip(name, NAME_LIMIT), "type": _type_name(value), "kind": "value",
                       "size_bytes": 0,
                       "repr": _clip("<inspect failed: %s>" % type(e).__name__, INSPECT_REPR_LIMIT)}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            variables.append(var)
    finally:
        signal.signal(signal.SIGALRM, old)
    return {"variables": variables, "truncated": truncated}


# ---------------------------------------------------------------- hibernation

def op_pickle_state(req):
    import pickle

    path = req.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ProtocolError("pickle_state needs an absolute 'path'")
    blobs, saved, failed = {}, [], []
    for name, value in _user_vars():
        try:
            blobs[name] = _call_user(pickle.dumps, value, pickle.HIGHEST_PROTOCOL)
            saved.append(name)
        except KeyboardInterrupt:
            raise
        except BaseException:
            failed.append(name)
    # Imported modules are saved by name and imported again on restore.
    import types
    modules = {name: value.__name__ for name, value in list(_ns.items())
               if isinstance(value, types.ModuleType) and not name.startswith("_")
               and value.__name__ != "mcp_tools" and not value.__name__.startswith("mcp_tools.")}
    with open(path, "wb") as f:
        pickle.dump({"forge_state": 1, "values": blobs, "modules": modules}, f, pickle.HIGHEST_PROTOCOL)
    return {"saved": _names(saved + sorted(modules)), "failed": _names(failed)}


def op_restore_state(req):
    import pickle

    path = req.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ProtocolError("restore_state needs an absolute 'path'")
    with open(path, "rb") as f:
        state = pickle.load(f)
    blobs, modules = state, {}
    if isinstance(state, dict) and state.get("forge_state") == 1:
        blobs, modules = state["values"], state["modules"]
    restored, failed = [], []
    import importlib
    for name, modname in modules.items():
        try:
            _ns[name] = importlib.import_module(modname)
            restored.append(name)
        except BaseException:
            failed.append(name)
    for name, blob in blobs.items():
        try:
            _ns[name] = _call_user(pickle.loads, blob)
            restored.append(name)
        except KeyboardInterrupt:
            raise
        except BaseException:
            failed.append(name)
    return {"restored": _names(restored), "failed": _names(failed)}


# ---------------------------------------------------------------- workspace files

WORKSPACE = "/workspace"


class FileError(Exception):
    """A refused or failed file operation; reported to the host as type FileError."""


def _ws_path(rel):
    """Resolves a path given relative to /workspace and refuses anything that leaves it:
    absolute paths, '..' and symlinks pointing outside."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or len(rel) > 4096:
        raise FileError("path must be a non-empty relative path under /workspace")
    if rel.startswith("/"):
        raise FileError("absolute path %r refused: give a path relative to /workspace" % rel[:200])
    if ".." in rel.split("/"):
        raise FileError("path %r refused: '..' may not leave /workspace" % rel[:200])
    real = os.path.realpath(os.path.join(WORKSPACE, rel))
    if real != WORKSPACE and not real.startswith(WORKSPACE + "/"):
        raise FileError("path %r refused: it resolves outside /workspace (through a symlink)" % rel[:200])
    return real


def op_write_file(req):
    import base64

    path = _ws_path(req.get("path"))
    try:
        data = base64.b64decode(req.get("data") or "", validate=True)
    except (ValueError, TypeError):
        raise FileError("data is not base64")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _ws_path(os.path.relpath(os.path.dirname(path), WORKSPACE) if os.path.dirname(path) != WORKSPACE else ".")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as e:
        raise FileError("writing %s: %s" % (req.get("path"), e.strerror or e))
    return {"size": len(data), "path": path}


def op_read_file(req):
    path = _ws_path(req.get("path"))
    limit = req.get("max_bytes") or (10 << 20)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            import stat as _stat
            if not _stat.S_ISREG(st.st_mode):
                raise FileError("%s is not a regular file" % req.get("path"))
            if st.st_size > limit:
                raise FileError("%s is %d bytes, over the limit of %d bytes" % (req.get("path"), st.st_size, limit))
            data = f.read(limit + 1)
    except OSError as e:
        raise FileError("reading %s: %s" % (req.get("path"), e.strerror or e))
    if len(data) > limit:
        raise FileError("%s is over the limit of %d bytes" % (req.get("path"), limit))
    return {"data": _b64encode(data), "size": len(data), "path": path}


def op_list_files(req):
    files = []
    for root, dirs, names in os.walk(WORKSPACE):
        dirs.sort()
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for n in sorted(names + links):
            full = os.path.join(root, n)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            files.append({"path": os.path.relpath(full, WORKSPACE), "size": st.st_size,
                          "symlink": os.path.islink(full)})
            if len(files) >= 1000:
                return {"files": files, "truncated": True}
    return {"files": files}


# ---------------------------------------------------------------- main loop

class ProtocolError(Exception):
    pass


OPS = {
    "exec": op_exec,
    "inspect": op_inspect,
    "ping": op_ping,
    "egress": op_egress,
    "warm": op_warm,
    "pickle_state": op_pickle_state,
    "restore_state": op_restore_state,
    "write_file": op_write_file,
    "read_file": op_read_file,
    "list_files": op_list_files,
}


_send_lock = _thread.allocate_lock()  # the watcher thread streams output lines too


def _send(obj):
    line = _dumps(obj, default=repr).encode("utf-8", "surrogatepass") + b"\n"
    with _send_lock:
        _replies.write(line)
        _replies.flush()


def _handle(line):
    try:
        req = _loads(line)
        if not isinstance(req, dict):
            raise ValueError("request is not an object")
    except ValueError as e:
        return {"id": None, "ok": False, "error": {"type": "ProtocolError", "message": _clip(str(e), ERROR_TEXT_LIMIT)}}
    rid = req.get("id")
    op = OPS.get(req.get("op"))
    if op is None:
        return {"id": rid, "ok": False,
                "error": {"type": "ProtocolError", "message": "unknown op %r" % (req.get("op"),)}}
    try:
        reply = op(req)
    except ProtocolError as e:
        return {"id": rid, "ok": False, "error": {"type": "ProtocolError", "message": _clip(str(e), ERROR_TEXT_LIMIT)}}
    except FileError as e:
        return {"id": rid, "ok": False, "error": {"type": "FileError", "message": _clip(str(e), ERROR_TEXT_LIMIT)}}
    except BaseException as e:  # a bug in the agent, or an interrupt outside user code
        import traceback

        return {"id": rid, "ok": False, "error": {
            "type": "AgentError", "message": _clip("%s: %s" % (type(e).__name__, e), ERROR_TEXT_LIMIT),
            "traceback": _clip("".join(traceback.format_exception(type(e), e, e.__traceback__)), ERROR_TEXT_LIMIT)}}
    reply["id"] = rid
    reply["ok"] = True
    return reply


_known_modules = None  # what _modules found, when a zygote template found it before forking


def _modules():
    if _known_modules is not None:
        return dict(_known_modules)
    found = {}
    for name in OPTIONAL_MODULES:  # importlib.util.find_spec without importing importlib.util
        found[name] = False
        for finder in sys.meta_path:
            try:
                if finder.find_spec(name, None) is not None:
                    found[name] = True
                    break
            except Exception:
                pass
    return found


def main():
    global _agent_pid
    _agent_pid = os.getpid()
    _setup_fds()
    sys.modules["__main__"] = _main
    import builtins

    builtins.display = display  # so modules the user imports can call it too, as in Jupyter
    signal.signal(signal.SIGINT, _sigint)
    if "" not in sys.path:
        sys.path.insert(0, "")  # like Jupyter: modules in the working directory import
    _send({"op": "hello", "python": "%d.%d.%d" % sys.version_info[:3], "pid": os.getpid(),
           "modules": _modules(), "stray_fds": _stray_fds})
    while True:
        line = _requests.readline()
        if not line:
            return  # host closed the request pipe
        _send(_handle(line))


if __name__ == "__main__":
    main()
