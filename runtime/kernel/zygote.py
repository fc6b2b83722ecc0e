"""forge zygote: the template of zygote-mode sandboxes (embedded as runtime/kernel/zygote.py).

Run as the init of a template container: python3 -I -B /opt/forge/agent/zygote.py
fd 3: a SOCK_SEQPACKET socket to the host (runtime/sandbox/zygote_linux.go; keep the two in step).

The template imports the agent and the warm modules once, freezes its heap and then only forks.
It never sees user code: the host hands each fork the child's own pipes (SCM_RIGHTS), and the
code goes over them once the child is a sandbox of its own. The template stays single-threaded
(a fork copies only the forking thread), runs as root of its own user namespace with CAP_SETUID
and CAP_SETGID alone, and holds nothing secret.

Every child is made by the C helper (reaperbin/zfork.c, embedded by `make build` and installed
beside this file as zfork.so): the clone and all of P's steps are C, P never runs Python, and
zfork returns in Q, which runs _agent_c. docs/zygote.md is the spec of the whole path. Without the
helper, or without glibc's tid slot (_find_tid), the template does not start: it sends
"unavailable" with the cause, and forge starts that image's sandboxes as containers.
"""

import os
import sys

CTL_FD = 3
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402 (the agent's modules, imported once for every child)

import ctypes  # noqa: E402
import errno  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import _signal  # noqa: E402
import time  # noqa: E402

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# The namespaces zfork clones P into (struct zreq's nsflags): every one but the cgroup's, which P
# unshares once the host has moved it into its own cgroup.
NS_FLAGS = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS

# As a container's /proc (runtime/sandbox/spec.go): masked and read-only paths.
MASKED = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi")
READONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

libc = ctypes.CDLL(None, use_errno=True)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _cap_last():
    with open("/proc/sys/kernel/cap_last_cap") as f:
        return int(f.read())


CAP_LAST = _cap_last()


# ---------------------------------------------------------------- the child

# Which of them this kernel's /proc has, looked up once in the template's (unmasked) /proc: a
# child's fresh /proc has the same entries, and each lookup costs the child a path walk.
MASKED_DIRS = tuple(p for p in MASKED if os.path.isdir(p))
MASKED_FILES = tuple(p for p in MASKED if os.path.exists(p) and not os.path.isdir(p))
READONLY_FOUND = tuple(p for p in READONLY if os.path.exists(p))


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# The profiles' BPF programs by the host's id for each → (buffer, sock_fprog). The host sends a
# program's bytes with the first request that uses it and its id alone after that; "reset" (the
# host's table of what it sent is full) empties this one first.
_programs = {}


def _program(req):
    if req.get("seccomp_reset"):
        _programs.clear()
    hexprog = req.get("seccomp")
    if hexprog is not None:
        prog = bytes.fromhex(hexprog)
        buf = ctypes.create_string_buffer(prog, len(prog))
        _programs[req["seccomp_id"]] = (buf, _Fprog(len(prog) // 8, ctypes.addressof(buf)))
    p = _programs.get(req["seccomp_id"])
    if p is None:
        raise OSError("fork request with seccomp program %r, never sent" % req["seccomp_id"])
    return p


def _reseed():
    """Every child starts with the template's RNG states: give each its own. random reseeds
    itself in a forked child (os.register_at_fork), but say so; numpy's global state does not."""
    if "random" in sys.modules:
        sys.modules["random"].seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:
            pass


# The interpreter's own steps around a fork (os.fork's): before the clone of P and after it in
# the template, and in Q, whose memory is the template's at the clone (P runs no Python).
_before_fork = ctypes.pythonapi.PyOS_BeforeFork
_after_fork_parent = ctypes.pythonapi.PyOS_AfterFork_Parent
_after_fork_child = ctypes.pythonapi.PyOS_AfterFork_Child
for _f in (_before_fork, _after_fork_parent, _after_fork_child):
    _f.restype = None
_FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGUSR1, _signal.SIGUSR2)


def _agent_c(req):
    """Q, which the C helper forked from P (now the reaper) with a raw clone (and checked its
    tid): the interpreter's own after-fork steps first (what os.fork runs in a child), then the
    agent. _signal rather than signal, whose enum conversions cost a fresh child 0.3 ms."""
    _after_fork_child()
    _signal.set_wakeup_fd(-1)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    if req["env"] != _ENV:
        os.environ.clear()
        for kv in req["env"]:
            k, _, v = kv.partition("=")
            os.environ[k] = v
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _FORWARDED)
    # P closed every descriptor past the agent's with close_range(2) just before it forked Q,
    # and none is opened since: the agent's listing of /proc/self/fd (0.2-0.3 ms in a fresh
    # /proc) would find none.
    agent._fds_closed = True
    _reseed()
    agent.main()
    sys.stdout.flush()
    os._exit(0)


# The C helper (runtime/kernel/reaperbin/zfork.c, zfork.so beside this file): the clone, every
# step of P and the split into the reaper and the agent, without the interpreter. It is the one
# way a template makes a child: without it the template does not start (_load_helper).
MACHINES = ("x86_64", "aarch64")  # the architectures zfork.c has system call numbers for
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zfork.so")
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper")
_helper = None


_tid_addr = None  # where glibc keeps this thread's tid (see _find_tid), for the C split
_rseq = 0  # glibc's rseq area of this thread (see _rseq_area), for the C split


class Unavailable(Exception):
    """The template cannot make children here; the host starts this image's sandboxes as
    containers (runtime/sandbox, ErrZygoteUnavailable). The message names the cause and the fix."""


def _load_helper():
    global _helper, _tid_addr, _rseq
    machine = os.uname().machine
    if machine not in MACHINES:
        raise Unavailable("the zygote helper has no build for %s (only %s)" % (machine, ", ".join(MACHINES)))
    for path in (HELPER, REAPER):
        if not os.path.exists(path):
            raise Unavailable("forge was built without the zygote helper (no %s): build forge with `make build`" % path)
    h = ctypes.PyDLL(HELPER)  # the GIL stays held: the template is one thread, and so is P
    h.zfork.restype = ctypes.c_long
    h.zfork.argtypes = [ctypes.c_void_p]
    h.zserve.restype = ctypes.c_long
    h.zserve.argtypes = [ctypes.c_void_p]
    _helper = h
    _tid_addr = _find_tid()
    if not _tid_addr:
        raise Unavailable("glibc's tid slot not found in struct pthread of this image's libc (%s): "
                          "the zygote helper needs it to split each child" % _libc_version())
    _rseq = _rseq_area()


def _libc_version():
    try:
        f = libc.gnu_get_libc_version
        f.restype = ctypes.c_char_p
        return "glibc " + f().decode()
    except (AttributeError, UnicodeDecodeError):
        return "not glibc"


def _rseq_area():
    """glibc's rseq area of this thread (2.35 and later register one per thread), or 0: the C
    split registers it again in the agent, whose clone the kernel keeps none for (CLONE_VM)."""
    try:
        offset = ctypes.c_long.in_dll(libc, "__rseq_offset").value
        size = ctypes.c_uint.in_dll(libc, "__rseq_size").value
    except ValueError:
        return 0
    if not size:
        return 0
    pthread_self = libc.pthread_self
    pthread_self.restype = ctypes.c_void_p
    return pthread_self() + offset


def _find_tid():
    """The address of the tid glibc keeps for this thread (in its struct pthread), or None.

    The C helper makes the agent with a raw clone(2), which runs no libc code in it: as glibc's
    own fork does, it has the kernel write the agent's tid there (CLONE_CHILD_SETTID), or
    pthread_kill and the like would use the template's. Its offset is glibc's business: found
    as the one offset at which this thread and two short-lived others keep their own tids, run
    before the warm imports (the template forks single-threaded). Without it the template does
    not start."""
    import _thread

    pthread_self = libc.pthread_self
    pthread_self.restype = ctypes.c_void_p

    def offsets():  # in the first 1 KiB of struct pthread, which is larger
        base, tid = pthread_self(), _thread.get_native_id()
        words = struct.unpack("256i", ctypes.string_at(base, 1024))
        return base, {4 * i for i, w in enumerate(words) if w == tid}

    found = []
    for _ in range(2):
        done = _thread.allocate_lock()
        done.acquire()

        def run():
            try:
                found.append(offsets()[1])
            finally:
                done.release()

        _thread.start_new_thread(run, ())
        done.acquire()
    for _ in range(1000):  # until both threads are gone, not only done
        if _threads() == 1:
            break
        time.sleep(0.001)
    base, mine = offsets()
    common = mine.intersection(*found) if len(found) == 2 else set()
    if len(common) != 1:
        return None
    return base + common.pop()


_L, _P = ctypes.c_long, ctypes.c_void_p


class ZReq(ctypes.Structure):
    """struct zreq of zfork.c: keep the two in step."""
    _fields_ = [("nsflags", _L), ("ctl_fd", _L), ("map_fd", _L), ("map_w_fd", _L),
                ("req_fd", _L), ("rep_fd", _L), ("err_fd", _L), ("go_fd", _L), ("bridge_fd", _L),
                ("uid", _L), ("cap_last", _L), ("nrlimits", _L), ("rlimits", _P),
                ("tmp_opts", ctypes.c_char_p), ("workspace_opts", ctypes.c_char_p), ("hostname", ctypes.c_char_p),
                ("masked_dirs", _P), ("masked_files", _P), ("readonly", _P),
                ("ulimit_paths", _P), ("ulimit_values", _P), ("fprog", _P),
                ("req_target", _L), ("rep_target", _L),
                ("tid_addr", _P), ("reaper", ctypes.c_char_p), ("envp", _P), ("rseq_area", _P)]


def _strv(items):
    """A NULL-terminated char *[] (kept alive by the caller)."""
    arr = (ctypes.c_char_p * (len(items) + 1))(*[i.encode() for i in items], None)
    return arr


_RLIMIT = {"RLIMIT_NOFILE": resource.RLIMIT_NOFILE, "RLIMIT_CORE": resource.RLIMIT_CORE,
           "RLIMIT_FSIZE": resource.RLIMIT_FSIZE, "RLIMIT_DATA": resource.RLIMIT_DATA,
           "RLIMIT_NPROC": resource.RLIMIT_NPROC}
_fixed = None  # the parts of a ZReq every fork shares, made once
_cached = {}  # user limits and rlimits (the same in most requests) → their C arrays


def _cache(key, make):
    v = _cached.get(key)
    if v is None:
        if len(_cached) >= 64:
            _cached.clear()
        v = _cached[key] = make()
    return v


def _clone_c(req, fds, p2c_r, p2c_w, program):
    global _fixed
    if _fixed is None:
        _fixed = (_strv(MASKED_DIRS), _strv(MASKED_FILES), _strv(READONLY_FOUND))
    ul = tuple(sorted(req.get("user_limits", {}).items()))
    ulimits = _cache(("u",) + ul, lambda: (_strv(["/proc/sys/user/" + k for k, _ in ul]),
                                           _strv(["%d" % v for _, v in ul])))
    rl = tuple(sorted((k, tuple(v)) for k, v in req.get("rlimits", {}).items()))
    rlimits = _cache(("r",) + rl, lambda: (ctypes.c_long * (3 * len(rl) + 1))(
        *[x for k, (soft, hard) in rl for x in (_RLIMIT[k], soft, hard)]))
    env = _cache(("e",) + tuple(req["env"]), lambda: _strv(req["env"]))
    uid = req["uid"]
    opts = "mode=0755,size=%d,nr_inodes=65536,uid=%d,gid=%d"
    host = req["hostname"].encode()
    q = ZReq(nsflags=NS_FLAGS, ctl_fd=CTL_FD, map_fd=p2c_r, map_w_fd=p2c_w,
             req_fd=fds[0], rep_fd=fds[1], err_fd=fds[2], go_fd=fds[3], bridge_fd=fds[4] if len(fds) > 4 else -1,
             uid=uid, cap_last=CAP_LAST, nrlimits=len(rl), rlimits=ctypes.addressof(rlimits),
             tmp_opts=(opts % (req["tmp_size"], uid, uid)).encode(),
             workspace_opts=(opts % (req["workspace_size"], uid, uid)).encode(),
             hostname=host,
             masked_dirs=ctypes.addressof(_fixed[0]), masked_files=ctypes.addressof(_fixed[1]),
             readonly=ctypes.addressof(_fixed[2]),
             ulimit_paths=ctypes.addressof(ulimits[0]), ulimit_values=ctypes.addressof(ulimits[1]),
             fprog=ctypes.addressof(program[1]), req_target=agent.REQ_FD, rep_target=agent.REP_FD,
             tid_addr=_tid_addr, reaper=REAPER.encode(), envp=ctypes.addressof(env),
             rseq_area=_rseq)
    global _last
    _last = (q, req, program, ulimits, rlimits, env, _fixed, host)  # what q points to, kept alive with it
    delay, waited = 0.002, 0.0
    # ENOSPC is the template's namespace budget. The kernel frees a dead child's network and
    # user namespaces later, from a work queue, so a burst of children can find the budget
    # spent by namespaces already dead: wait for them, within a bound.
    while True:
        _before_fork()  # the agent is a copy of this interpreter, taken by P: as os.fork does
        pid = _helper.zfork(ctypes.addressof(q))
        if pid == 0:
            return 0  # Q
        _after_fork_parent()
        if pid > 0:
            return pid
        if -pid != errno.ENOSPC or waited >= 2.0:
            raise OSError(-pid, "clone: " + os.strerror(-pid))
        time.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.05)


def _child(req):
    """Q, the agent of a sandbox the C helper made: it never returns to the template's code."""
    try:
        _agent_c(req)
    except BaseException as e:
        try:
            os.write(2, ("zygote child: %s: %s\n" % (type(e).__name__, e)).encode())
        finally:
            os._exit(120)
    os._exit(120)


def _fork(req, fds, program):
    p2c_r, p2c_w = os.pipe()
    pid = _clone_c(req, fds, p2c_r, p2c_w, program)
    if pid == 0:
        _child(req)
    os.close(p2c_r)
    try:
        line = b"0 %d %d\n" % (req["ids_start"], req["ids_size"])
        for name in ("uid_map", "gid_map"):
            _write("/proc/%d/%s" % (pid, name), line)
        os.write(p2c_w, b"m")
    finally:
        os.close(p2c_w)
    return pid


_ENV = ["%s=%s" % kv for kv in os.environ.items()]


def _threads():
    return len(os.listdir("/proc/self/task"))


def _single_thread():
    """clone(2) copies only the calling thread, and skips the at-fork handlers that would let a
    library stop its threads first: the template must have no other thread. OpenBLAS (numpy)
    starts a pool at import; it restarts it on its next call, in a child."""
    if _threads() == 1:
        return
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line and ".so" in line}
    for lib in sorted(libs):
        try:
            getattr(ctypes.CDLL(lib), "blas_thread_shutdown_")()
        except (OSError, AttributeError):
            pass
    if _threads() != 1:
        raise OSError("the warm modules left %d threads running in the zygote template; it forks "
                      "only single-threaded (leave the module out of pool.warm_modules)" % _threads())


def _send(ctl, obj):
    ctl.send(json.dumps(obj).encode())


def _wipe(*objs):
    """Zero the characters of str and bytes objects that held one fork's data (the child's
    hostname, the raw request) before they are dropped: every later child is a copy of the
    template's memory, freed blocks included, and must not find a sibling's hostname there
    (docs/security.md, "Zygote siblings"). Only for objects nothing else uses; one-character
    objects are the interpreter's shared singletons and are left alone. The characters of a
    bytes object, and of an ASCII str, end its allocation (sys.getsizeof counts them and the
    NUL after them)."""
    for o in objs:
        if isinstance(o, (bytes, str)) and len(o) > 1 and (isinstance(o, bytes) or o.isascii()):
            ctypes.memset(id(o) + sys.getsizeof(o) - len(o) - 1, 0, len(o))


def _scrub(req, msg, text):
    """Wipe one served request's per-fork data in the template, once its child is forked: the
    raw message, its decoded text, the hostname and the request number, and the ZReq's copy of
    the hostname (zserve points a registered ZReq at its own buffer for each fast fork)."""
    _wipe(msg, text)
    if isinstance(req, dict):
        for k in ("hostname", "id"):
            v = req.get(k)
            req[k] = ""
            _wipe(v)
    if _last is not None and _last[1] is req:
        _wipe(_last[7])
        _last[0].hostname = None


class ZLoop(ctypes.Structure):
    """struct zloop of zfork.c: keep the two in step."""
    _fields_ = [("ctl_fd", _L), ("wake_fd", _L), ("q", _P), ("ids_size", _L),
                ("buf", _P), ("bufsize", _L), ("msglen", _L), ("fds", ctypes.c_int * 8), ("nfds", _L),
                ("before_fork", _P), ("after_fork_parent", _P),
                ("id", ctypes.c_char * 64), ("hostname", ctypes.c_char * 64)]


_last = None  # the ZReq of the last fork by _clone_c, with what it points to
_fast = None  # the same for the request shape zserve forks (the host sends the rest: forkRequest.fast)
_loop = None


def _handle(ctl, msg, fds):
    """One message from the host, with the descriptors that came with it: a fork request."""
    global _fast
    req = text = None
    try:
        _loop.q, _fast = None, None  # a request of a new shape: zserve forks none until it succeeds
        text = msg.decode()  # here, not in json.loads: _scrub wipes it
        req = json.loads(text)
        program = _program(req)  # first: the host counts it sent
        want = 5 if req.get("bridge") else 4
        if len(fds) != want:
            raise OSError("fork request with %d descriptors, want %d" % (len(fds), want))
        pid = _fork(req, fds, program)
        if _last is not None and _last[1] is req:
            _fast = _last
            _loop.q, _loop.ids_size = ctypes.addressof(_fast[0]), req["ids_size"]
        _send(ctl, {"op": "forked", "id": req["id"], "pid": pid})
    except Exception as e:
        _send(ctl, {"op": "forked", "id": req.get("id") if isinstance(req, dict) else None,
                    "error": "%s: %s" % (type(e).__name__, e)})
    finally:
        for fd in fds:
            os.close(fd)
        _scrub(req, msg, text)


def _serve_c(ctl, wake_r):
    """The request loop in C (zfork.c's zserve): it forks the children of the shape the last
    request Python served registered, from the few fields the host sends (forkRequest.fast), and
    reports exits, without Python; every other message (a fork request of a new shape) comes
    back here, to _handle."""
    global _loop
    buf = ctypes.create_string_buffer(1 << 16)
    _loop = ZLoop(ctl_fd=CTL_FD, wake_fd=wake_r, buf=ctypes.addressof(buf), bufsize=len(buf),
                  before_fork=ctypes.cast(_before_fork, ctypes.c_void_p).value,
                  after_fork_parent=ctypes.cast(_after_fork_parent, ctypes.c_void_p).value)
    while True:
        r = _helper.zserve(ctypes.addressof(_loop))
        if r == 0:  # Q, forked by zserve
            _child(_fast[1])
        if r == 2:
            os._exit(0)  # the host closed its end
        if r < 0:
            raise OSError(-r, "zygote request loop: " + os.strerror(-r))
        n = _loop.msglen
        _handle(ctl, ctypes.string_at(ctypes.addressof(buf), n), list(_loop.fds[:_loop.nfds]))
        ctypes.memset(ctypes.addressof(buf), 0, n)  # _scrub wiped the copy


# What the template runs of a warm module it imported, before it freezes its heap. CPython (3.11
# and later) rewrites a function's bytecode the first times it runs, to specialize it, and loads
# some submodules on first use: done once here, not on a fresh copy of each page in every child.
# Generic and small (the operations most sessions start with), no data of anyone's.
EXERCISES = {
    "numpy": """import numpy as np
a = np.arange(64, dtype=np.float64).reshape(8, 8)
b = (a * 2 - 1) / 3 + a.T
float(b.sum()), float(b.mean()), b.max(axis=0), np.sqrt(np.abs(b)), b[b > 10].tolist()
np.zeros(5).tolist(), np.linspace(0, 1, 11), np.concatenate([a, a]).shape, a.astype(int).tolist()
repr(b), str(a[0])""",
    "pandas": """import pandas as pd
df = pd.DataFrame({"a": range(100), "b": [i / 3 for i in range(100)], "c": ["k%d" % (i % 7) for i in range(100)]})
df["d"] = df["a"] * 2 + df["b"]
int(df["a"].sum()), float(df["b"].mean()), df.head(), df.tail(), df.describe(), df.dtypes, df.shape
df.groupby("c").agg({"a": "sum", "b": "mean"}), df[df["a"] > 50], df.sort_values("b"), df.iloc[3]
df.loc[5, "b"], df.to_dict("records"), repr(df), df.isna().sum(), df["c"].value_counts()
pd.concat([df, df]).reset_index(drop=True).merge(df, on="a").shape""",
}


def _exercise(warmed):
    """Runs EXERCISES of the modules in warmed (10-20 ms a run): twice from 3.12 on, where code is
    made adaptive when it is created and specializes on its second run; ten times on 3.11, which
    makes a function's code adaptive at its eighth call. A failure is ignored: the template serves
    all the same, its children a little less warm."""
    runs = 2 if sys.version_info >= (3, 12) else 10
    for name in warmed:
        src = EXERCISES.get(name)
        if src is None:
            continue
        try:
            code = compile(src, "<forge warm-up: %s>" % name, "exec")
            for _ in range(runs):
                exec(code, {})
        except Exception:
            pass


def _immortalize():
    """Makes the heap the children share immortal (PEP 683), where the interpreter has such
    objects (CPython 3.12 and later, with the GIL, 64-bit little-endian): every object reachable
    from the collector's, unless its type has a finalizer. A child then writes no reference count
    of them, so the pages they sit on stay the template's instead of becoming the child's copies
    (the most of a live child's memory on 3.11: docs/zygote.md). Immortal objects are never
    freed; a template's heap lives as long as the template anyway, and its children end with
    os._exit. Returns how many objects it changed (0 where the interpreter has no such objects)."""
    import sysconfig
    if (sys.version_info < (3, 12) or sys.byteorder != "little" or sys.maxsize < 2**32
            or sysconfig.get_config_var("Py_GIL_DISABLED")):
        return 0
    imm = sys.getrefcount(None)  # the interpreter's own immortal value (2**32-1 on 3.12 and 3.13)
    word = ctypes.c_uint32  # the low half of ob_refcnt: the only half 3.14 lets be written
    probe = []
    word.from_address(id(probe)).value = imm
    hold = [probe, probe]
    if sys.getrefcount(probe) != imm:  # counted some other way: leave the heap be (probe leaks)
        return 0
    del hold
    todo = gc.get_objects()
    seen = {id(todo)}
    n = 0
    while todo:
        o = todo.pop()
        i = id(o)
        if i in seen:
            continue
        seen.add(i)
        todo.extend(gc.get_referents(o))
        if hasattr(type(o), "__del__") or sys.getrefcount(o) >= imm:
            continue  # something must run when it dies (a file, a generator), or already is
        word.from_address(i).value = imm
        n += 1
    return n


def serve():
    ctl = socket.socket(fileno=CTL_FD)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    try:
        _load_helper()  # first: without it the template has nothing to do
    except (Unavailable, OSError) as e:
        _send(ctl, {"op": "unavailable", "error": str(e)})
        ctl.recv(1)  # until the host, which has the reason, closes its end (destroying this)
        os._exit(1)
    warmed = agent._warm(sys.argv[1:])
    _exercise(warmed)
    _single_thread()
    agent._known_modules = agent._modules()  # the same for every child: found once, here
    gc.collect()
    immortal = _immortalize()
    gc.freeze()  # children share the heap; the collector must not write to it
    _send(ctl, {"op": "ready", "pid": os.getpid(), "warm": warmed, "immortal": immortal,
                "python": "%d.%d.%d" % sys.version_info[:3]})
    _serve_c(ctl, wake_r)


if __name__ == "__main__":
    serve()
