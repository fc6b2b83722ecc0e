"""forge zygote: the template of zygote-mode sandboxes (embedded as runtime/kernel/zygote.py).

Run as the init of a template container: python3 -I -B /opt/forge/agent/zygote.py
fd 3: a SOCK_SEQPACKET socket to the host (runtime/sandbox/zygote_linux.go; keep the two in step).

The template imports the agent and the warm modules once, freezes its heap and then only forks.
It never sees user code: the host hands each fork the child's own pipes (SCM_RIGHTS), and the
code goes over them once the child is a sandbox of its own. The template stays single-threaded
(a fork copies only the forking thread), runs as root of its own user namespace with CAP_SETUID
and CAP_SETGID alone, and holds nothing secret.

One fork, step by step (the child is I, its child P is pid 1 of the new sandbox, P's child Q is
the agent):
  template  fork I; write I's uid_map/gid_map (a sub-range the host gave) once I asked for it
  I         unshare the user namespace; wait for the map; wait for the host to move it into the
            sandbox's own cgroup; unshare mount, pid, net, ipc, uts and cgroup; fork P; wait P
  P         mount a fresh /proc (masked like a container's), /tmp, /workspace, /dev/shm,
            /dev/mqueue, /dev/pts; loopback up; hostname; user.* limits; rlimits; drop the
            bounding set; become the sandbox user (no capabilities); no_new_privs; seccomp; then
            the agent's own pid-1 split (P becomes the reaper, Q the agent)
  Q         reseed what fork copied (random, numpy), then serve the host as the agent does
"""

import os
import sys

CTL_FD = 3
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402 (the agent's modules, imported once for every child)

import ctypes  # noqa: E402
import fcntl  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 24, 22, 38
SECCOMP_MODE_FILTER = 2
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40

# As a container's /proc (runtime/sandbox/spec.go): masked and read-only paths.
MASKED = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi")
READONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(ret, what):
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def _b(s):
    return s.encode() if s is not None else None


def mount(src, dst, fstype, flags, data=None):
    _check(libc.mount(_b(src), _b(dst), _b(fstype), flags, _b(data)), "mount " + dst)


def unshare(flags):
    _check(libc.unshare(flags), "unshare")


def prctl(op, a=0, b=0, c=0, d=0):
    _check(libc.prctl(op, a, b, c, d), "prctl %d" % op)


def _cap_last():
    with open("/proc/sys/kernel/cap_last_cap") as f:
        return int(f.read())


CAP_LAST = _cap_last()


# ---------------------------------------------------------------- the child


def _mount_proc():
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for p in MASKED:
        if os.path.isdir(p):
            mount("tmpfs", p, "tmpfs", MS_RDONLY, "size=0")
        elif os.path.exists(p):
            mount("/dev/null", p, None, MS_BIND)


def _readonly_proc():
    for p in READONLY:
        if os.path.exists(p):
            mount(p, p, None, MS_BIND | MS_REC)
            mount(p, p, None, MS_BIND | MS_REC | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
    finally:
        s.close()


def _tmpfs(path, size, uid):
    mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV,
          "mode=0755,size=%d,nr_inodes=65536,uid=%d,gid=%d" % (size, uid, uid))


def _seccomp(prog):
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _Fprog(len(prog) // 8, ctypes.addressof(buf))
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog))


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


def _place_fds(req_fd, rep_fd, err_fd):
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 200 + i) for i, fd in enumerate((req_fd, rep_fd, err_fd))]
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(high[2], 2)
    os.dup2(high[0], agent.REQ_FD)
    os.dup2(high[1], agent.REP_FD)
    os.closerange(agent.REP_FD + 1, 1 << 16)


def _init(req, fds):
    """P: pid 1 of the new pid namespace, root of the new user namespace until it drops."""
    uid = req["uid"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount_proc()
    _tmpfs("/tmp", req["tmp_size"], uid)
    _tmpfs("/workspace", req["workspace_size"], uid)
    mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=65536k")
    mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    socket.sethostname(req["hostname"])
    _loopback_up()
    for name, value in req.get("user_limits", {}).items():
        with open("/proc/sys/user/" + name, "w") as f:
            f.write(str(value))
    _readonly_proc()
    for kind, (soft, hard) in req.get("rlimits", {}).items():
        resource.setrlimit(getattr(resource, kind), (soft, hard))
    for cap in range(CAP_LAST + 1):
        prctl(PR_CAPBSET_DROP, cap)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from root to the user: every capability is gone
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _seccomp(bytes.fromhex(req["seccomp"]))
    os.environ.clear()
    for kv in req["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    os.chdir("/workspace")
    _place_fds(*fds[:3])
    agent._reap_as_init()  # P becomes the reaper; this returns in Q, the agent
    _reseed()
    agent.main()
    sys.stdout.flush()
    os._exit(0)


def _child(req, fds, c2p_w, p2c_r):
    """I: makes the namespaces, then waits for P and exits with its status."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(CTL_FD)
    unshare(CLONE_NEWUSER)
    os.write(c2p_w, b"u")
    if os.read(p2c_r, 1) != b"m":
        os._exit(121)
    os.close(c2p_w)
    os.close(p2c_r)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    if os.read(fds[3], 1) != b"g":  # the host moved I into the sandbox's cgroup
        os._exit(122)
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)
    pid = os.fork()
    if pid == 0:
        try:
            _init(req, fds)
        except BaseException as e:
            os.write(fds[2], ("zygote child: %s: %s\n" % (type(e).__name__, e)).encode())
        os._exit(120)
    for fd in fds:
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _fork(req, fds):
    c2p_r, c2p_w = os.pipe()
    p2c_r, p2c_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(c2p_r)
            os.close(p2c_w)
            _child(req, fds, c2p_w, p2c_r)
        except BaseException as e:
            try:
                os.write(fds[2], ("zygote child: %s: %s\n" % (type(e).__name__, e)).encode())
            finally:
                os._exit(120)
    os.close(c2p_w)
    os.close(p2c_r)
    try:
        if os.read(c2p_r, 1) != b"u":
            raise OSError("the child ended before its user namespace was made")
        line = "0 %d %d\n" % (req["ids_start"], req["ids_size"])
        for name in ("uid_map", "gid_map"):
            with open("/proc/%d/%s" % (pid, name), "w") as f:
                f.write(line)
        os.write(p2c_w, b"m")
    finally:
        os.close(c2p_r)
        os.close(p2c_w)
    return pid


def _send(ctl, obj):
    ctl.send(json.dumps(obj).encode())


def serve():
    ctl = socket.socket(fileno=CTL_FD)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    warmed = agent._warm(sys.argv[1:])
    gc.collect()
    gc.freeze()  # children share the heap; the collector must not write to it
    _send(ctl, {"op": "ready", "pid": os.getpid(), "warm": warmed,
                "python": "%d.%d.%d" % sys.version_info[:3]})
    fdsize = socket.CMSG_SPACE(8 * struct.calcsize("i"))
    while True:
        ready, _, _ = select.select([ctl, wake_r], [], [])
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                _send(ctl, {"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})
        if ctl in ready:
            msg, anc, _, _ = ctl.recvmsg(1 << 16, fdsize)
            if not msg:
                os._exit(0)  # the host closed its end
            fds, req = [], None
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.extend(struct.unpack("%di" % (len(data) // 4), data[:len(data) - len(data) % 4]))
            try:
                req = json.loads(msg)
                if len(fds) != 4:
                    raise OSError("fork request with %d descriptors, want 4" % len(fds))
                _send(ctl, {"op": "forked", "id": req["id"], "pid": _fork(req, fds)})
            except Exception as e:
                _send(ctl, {"op": "forked", "id": req.get("id") if isinstance(req, dict) else None,
                            "error": "%s: %s" % (type(e).__name__, e)})
            finally:
                for fd in fds:
                    os.close(fd)


if __name__ == "__main__":
    serve()
