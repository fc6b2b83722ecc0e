/*
 * forge-zfork: the one way a zygote child is made (runtime/kernel/zygote.py, _clone_c; the spec
 * is docs/zygote.md).
 *
 * zygote.py loads this shared object with ctypes (PyDLL: the GIL stays held) and calls
 * zfork(&req) for each fork. zfork makes the raw clone(2) with the namespace flags; in the
 * template it returns P's pid (or -errno). In P, pid 1 of the new pid namespace, it runs every
 * step of the sandbox (child) up to and including the seccomp load and the placement of the
 * agent's descriptors, with no Python in between, then splits P into the reaper (P execs it)
 * and the agent Q (split), and returns 0 in Q. On a failure P writes the step and errno to its
 * stderr pipe and exits 120.
 *
 * zserve(&loop) is the template's request loop (zygote.py, _serve_c): it serves the fork requests
 * of the shape Python last registered, and the exits of children, with no Python run in the
 * template between forks, so that the template writes to few of the pages it shares with its
 * children (each written page is a copy after every fork: about 330 of them per fork when Python
 * served each request); every other message it hands to Python. Once idle it clones the next
 * child's P ahead (a spare, which writes the agent's write set ahead while it waits), and on
 * x86-64 P clones the agent with CLONE_VM (clone_agent).
 *
 * It is self-contained: -nostdlib, raw system calls, no libc symbol (the image's glibc may be
 * any version), position-independent, built by `make build` and embedded in forge.
 */

typedef unsigned long u64;

#if defined(__x86_64__)
#define NR_READ 0
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_IOCTL 16
#define NR_SOCKET 41
#define NR_CLONE 56
#define NR_FCNTL 72
#define NR_CHDIR 80
#define NR_SETRESUID 117
#define NR_SETRESGID 119
#define NR_SETGROUPS 116
#define NR_PRCTL 157
#define NR_MOUNT 165
#define NR_SETHOSTNAME 170
#define NR_EXIT_GROUP 231
#define NR_OPENAT 257
#define NR_UNSHARE 272
#define NR_DUP3 292
#define NR_PRLIMIT64 302
#define NR_RT_SIGPROCMASK 14
#define NR_EXECVE 59
#define NR_GETTID 186
#define NR_SET_ROBUST_LIST 273
#define NR_SET_TID_ADDRESS 218
#define NR_RSEQ 334
#define RSEQ_SIG 0x53053053
#define NR_FUTEX 202
#define NR_GET_ROBUST_LIST 274
#define NR_RECVMSG 47
#define NR_SENDTO 44
#define NR_PIPE2 293
#define NR_WAIT4 61
#define NR_PPOLL 271
#define NR_NANOSLEEP 35
#define NR_SOCKETPAIR 53
#define NR_MADVISE 28
#define NR_SENDMSG 46
#define NR_KILL 62
#elif defined(__aarch64__)
#define NR_READ 63
#define NR_WRITE 64
#define NR_CLOSE 57
#define NR_IOCTL 29
#define NR_SOCKET 198
#define NR_CLONE 220
#define NR_FCNTL 25
#define NR_CHDIR 49
#define NR_SETRESUID 147
#define NR_SETRESGID 149
#define NR_SETGROUPS 159
#define NR_PRCTL 167
#define NR_MOUNT 40
#define NR_SETHOSTNAME 161
#define NR_EXIT_GROUP 94
#define NR_OPENAT 56
#define NR_UNSHARE 97
#define NR_DUP3 24
#define NR_PRLIMIT64 261
#define NR_RT_SIGPROCMASK 135
#define NR_EXECVE 221
#define NR_GETTID 178
#define NR_SET_ROBUST_LIST 99
#define NR_GET_ROBUST_LIST 100
#define NR_RECVMSG 212
#define NR_SENDTO 206
#define NR_PIPE2 59
#define NR_WAIT4 260
#define NR_PPOLL 73
#define NR_NANOSLEEP 101
#define NR_SOCKETPAIR 199
#define NR_RSEQ 293
#define RSEQ_SIG 0xd428bc00
#define NR_MADVISE 233
#define NR_SENDMSG 211
#define NR_KILL 129
#else
#error "zfork: unsupported architecture"
#endif
#define NR_MOVE_MOUNT 429 /* the same number on every architecture */
#define NR_CLOSE_RANGE 436

#define EINTR 4
#define EAGAIN 11
#define EINVAL 22
#define ENOSPC 28
#define ENOSYS 38
#define AT_FDCWD (-100)
#define O_RDONLY 0
#define O_WRONLY 1
#define O_RDWR 2
#define O_CLOEXEC 02000000
#define F_DUPFD 0
#define MS_RDONLY 1
#define MS_NOSUID 2
#define MS_NODEV 4
#define MS_NOEXEC 8
#define MS_REMOUNT 32
#define MS_BIND 4096
#define MS_REC 16384
#define MS_PRIVATE (1 << 18)
#define MOVE_MOUNT_F_EMPTY_PATH 4
#define CLONE_NEWCGROUP 0x02000000
#define PR_CAPBSET_DROP 24
#define PR_SET_SECCOMP 22
#define PR_SET_NO_NEW_PRIVS 38
#define SECCOMP_MODE_FILTER 2
#define SIOCSIFFLAGS 0x8914
#define IFF_UP 0x1
#define IFF_LOOPBACK 0x8
#define IFF_RUNNING 0x40
#define SIGCHLD 17
#define CLONE_CHILD_CLEARTID 0x00200000
#define CLONE_CHILD_SETTID 0x01000000
#define SIG_BLOCK 0
/* The signals the reaper forwards to the agent: blocked across the split, as agent.py's
 * _reap_as_init blocks them (SIGHUP 1, SIGINT 2, SIGQUIT 3, SIGUSR1 10, SIGUSR2 12, SIGTERM 15). */
#define FORWARDED ((1UL << 0) | (1UL << 1) | (1UL << 2) | (1UL << 9) | (1UL << 11) | (1UL << 14))

static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	long ret;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
#else
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory", "cc");
	ret = x0;
#endif
	return ret;
}

#define SC0(n) sys6(n, 0, 0, 0, 0, 0, 0)
#define SC1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define SC2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define SC3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define SC4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define SC5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* One fork request, filled by zygote.py (ZReq there: keep the two in step). Lists of strings
 * end with a NULL. Every field is 8 bytes wide. */
struct zreq {
	long nsflags; /* clone flags: the namespaces (SIGCHLD is added) */
	long ctl_fd;  /* the template's control socket: closed in P */
	long map_fd;  /* P waits for 'm' here: the template wrote its id maps */
	long map_w_fd; /* the template's end of it: closed in P */
	long req_fd, rep_fd, err_fd, go_fd, bridge_fd; /* the child's own (go_fd: its socket to the
							* host); bridge_fd -1 without */
	long uid;
	long cap_last;
	long nrlimits;
	const long *rlimits; /* nrlimits triples: resource, soft, hard */
	const char *tmp_opts, *workspace_opts, *hostname;
	const char *const *masked_dirs, *const *masked_files, *const *readonly;
	const char *const *ulimit_paths, *const *ulimit_values;
	const void *fprog; /* struct sock_fprog of the child's seccomp profile */
	long req_target, rep_target; /* where the agent wants its request and reply fds */
	/* The split of P into the reaper (P, which execs reaper with reaper_argv and envp) and the
	 * agent Q, which zfork returns 0 in. tid_addr is where glibc keeps the calling thread's tid
	 * (struct pthread's tid, found by zygote.py, which does not start without it), for the
	 * kernel to write Q's own into, as glibc's fork does. */
	int *tid_addr;
	const char *reaper; /* exec'd as: reaper <the agent's pid> */
	char *const *envp;
	void *rseq_area; /* glibc's rseq area of the calling thread (32 bytes), or 0 */
};

/* zero clears n bytes at p (volatile: the compiler would make it a call to memset). */
static void zero(void *p, long n) {
	volatile char *b = p;
	while (n--)
		b[n] = 0;
}

static long slen(const char *s) {
	long n = 0;
	while (s[n])
		n++;
	return n;
}

/* put_num and put_str write v (decimal) or s at buf[at] and return the index past it. */
static long put_num(char *buf, long at, long v) {
	char num[24];
	long n = 0;
	u64 u;
	if (v < 0) {
		buf[at++] = '-';
		u = (u64)(-v);
	} else
		u = (u64)v;
	do {
		num[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (n)
		buf[at++] = num[--n];
	return at;
}

static long put_str(char *buf, long at, const char *s) {
	while (*s)
		buf[at++] = *s++;
	return at;
}

/* fail reports the step and errno on the child's stderr pipe and exits 120 (the host reads it). */
static void __attribute__((noreturn)) fail(long err_fd, const char *step, long ret) {
	char buf[256]; /* every step is a short constant */
	long at = put_str(buf, 0, "zygote child (C): ");
	at = put_str(buf, at, step);
	at = put_str(buf, at, ": errno ");
	at = put_num(buf, at, -ret);
	buf[at++] = '\n';
	SC3(NR_WRITE, err_fd, buf, at);
	for (;;)
		SC1(NR_EXIT_GROUP, 120);
}

#define CHECK_FD(fd, call, step)                                                                   \
	do {                                                                                       \
		long r_ = (call);                                                                  \
		if (r_ < 0)                                                                        \
			fail(fd, step, r_);                                                        \
	} while (0)
#define CHECK(call, step) CHECK_FD(q->err_fd, call, step)

static long xmount(const char *src, const char *dst, const char *fs, long flags, const char *data) {
	return SC5(NR_MOUNT, src, dst, fs, flags, data);
}

static long read1(long fd, char want) {
	char c = 0;
	long r;
	do
		r = SC3(NR_READ, fd, &c, 1);
	while (r == -EINTR);
	if (r < 0)
		return r;
	return (r == 1 && c == want) ? 0 : -1;
}

static long write_file(const char *path, const char *data) {
	long fd = SC4(NR_OPENAT, AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0), r;
	if (fd < 0)
		return fd;
	r = SC3(NR_WRITE, fd, data, slen(data));
	SC1(NR_CLOSE, fd);
	return r < 0 ? r : r == slen(data) ? 0 : -EINVAL;
}

struct ifreq_flags {
	char name[16];
	short flags;
	char pad[22];
};

/* ends reports whether s ends with suffix. */
static long ends(const char *s, const char *suffix) {
	long n = slen(s), m = slen(suffix), i;
	if (m > n)
		return 0;
	for (i = 0; i < m; i++)
		if (s[n - m + i] != suffix[i])
			return 0;
	return 1;
}

static long is_cgroup_limit(const char *path) { return ends(path, "/max_cgroup_namespaces"); }

static long is_proc_sys(const char *path) { return slen(path) == 9 && ends(path, "/proc/sys"); }

static void readonly(const struct zreq *q, const char *path) {
	CHECK(xmount(path, path, 0, MS_BIND | MS_REC, 0), "bind a /proc path");
	CHECK(xmount(path, path, 0, MS_BIND | MS_REC | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, 0),
	      "remount a /proc path read-only");
}

static void child(const struct zreq *q) {
	long i;
	const char *const *p;
	/* First: the host learns P's pid from the credentials the kernel sends with this byte. */
	CHECK(SC3(NR_WRITE, q->go_fd, "p", 1), "write to the host");
	SC1(NR_CLOSE, q->ctl_fd);
	if (q->map_fd >= 0) { /* a spare's maps were written before it was started */
		SC1(NR_CLOSE, q->map_w_fd);
		if (read1(q->map_fd, 'm') != 0) /* the template wrote P's uid_map and gid_map */
			for (;;)
				SC1(NR_EXIT_GROUP, 121);
		SC1(NR_CLOSE, q->map_fd);
	}
	CHECK(SC3(NR_SETRESGID, 0, 0, 0), "setresgid 0");
	CHECK(SC3(NR_SETRESUID, 0, 0, 0), "setresuid 0");
	/* While the host moves P into the sandbox's cgroup, P makes its mounts (no user code yet). */
	CHECK(xmount(0, "/", 0, MS_REC | MS_PRIVATE, 0), "mount /");
	CHECK(xmount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0), "mount /proc");
	for (p = q->masked_dirs; *p; p++)
		CHECK(xmount("tmpfs", *p, "tmpfs", MS_RDONLY, "size=0"), "mask a /proc directory");
	for (p = q->masked_files; *p; p++)
		CHECK(xmount("/dev/null", *p, 0, MS_BIND, 0), "mask a /proc file");
	CHECK(xmount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, q->tmp_opts), "mount /tmp");
	CHECK(xmount("tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV, q->workspace_opts), "mount /workspace");
	CHECK(xmount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=65536k"), "mount /dev/shm");
	CHECK(xmount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0), "mount /dev/mqueue");
	CHECK(xmount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"), "mount /dev/pts");
	if (q->bridge_fd >= 0) { /* code mode: the bridge directory, a detached mount made by the host */
		CHECK(SC5(NR_MOVE_MOUNT, q->bridge_fd, "", AT_FDCWD, "/run/forge", MOVE_MOUNT_F_EMPTY_PATH), "move_mount /run/forge");
		SC1(NR_CLOSE, q->bridge_fd);
		CHECK(xmount(0, "/run/forge", 0, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, 0), "remount /run/forge");
	}
	CHECK(SC2(NR_SETHOSTNAME, q->hostname, slen(q->hostname)), "sethostname");
	{
		struct ifreq_flags ifr;
		long s;
		zero(&ifr, sizeof(ifr));
		ifr.name[0] = 'l';
		ifr.name[1] = 'o';
		ifr.flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
		s = SC3(NR_SOCKET, 2 /* AF_INET */, 2 /* SOCK_DGRAM */ | O_CLOEXEC, 0);
		CHECK(s, "socket");
		CHECK(SC3(NR_IOCTL, s, SIOCSIFFLAGS, &ifr), "loopback up");
		SC1(NR_CLOSE, s);
	}
	/* What does not wait for the cgroup, while the host moves P: the user limits but the cgroup
	 * namespaces' (P makes one below), /proc read-only but /proc/sys (where they are written),
	 * the rlimits, and the bounding set (P keeps its effective capabilities until setresuid). */
	for (i = 0; q->ulimit_paths[i]; i++)
		if (!is_cgroup_limit(q->ulimit_paths[i]))
			CHECK(write_file(q->ulimit_paths[i], q->ulimit_values[i]), "user limits");
	for (p = q->readonly; *p; p++)
		if (!is_proc_sys(*p))
			readonly(q, *p);
	for (i = 0; i < q->nrlimits; i++) {
		u64 lim[2];
		lim[0] = (u64)q->rlimits[3 * i + 1];
		lim[1] = (u64)q->rlimits[3 * i + 2];
		CHECK(SC4(NR_PRLIMIT64, 0, q->rlimits[3 * i], lim, 0), "setrlimit");
	}
	for (i = 0; i <= q->cap_last; i++)
		CHECK(SC5(NR_PRCTL, PR_CAPBSET_DROP, i, 0, 0, 0), "drop the bounding set");
	if (read1(q->go_fd, 'g') != 0) /* the host moved P into the sandbox's cgroup */
		for (;;)
			SC1(NR_EXIT_GROUP, 122);
	SC1(NR_CLOSE, q->go_fd);
	/* Only now: the cgroup namespace's root is the cgroup P is in when it is made. */
	CHECK(SC1(NR_UNSHARE, CLONE_NEWCGROUP), "unshare cgroup");
	for (i = 0; q->ulimit_paths[i]; i++) /* after the last namespace */
		if (is_cgroup_limit(q->ulimit_paths[i]))
			CHECK(write_file(q->ulimit_paths[i], q->ulimit_values[i]), "user limits");
	for (p = q->readonly; *p; p++) /* after the writes to /proc/sys */
		if (is_proc_sys(*p))
			readonly(q, *p);
	CHECK(SC2(NR_SETGROUPS, 0, 0), "setgroups");
	CHECK(SC3(NR_SETRESGID, q->uid, q->uid, q->uid), "setresgid");
	CHECK(SC3(NR_SETRESUID, q->uid, q->uid, q->uid), "setresuid"); /* every capability is gone */
	CHECK(SC5(NR_PRCTL, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs");
	CHECK(SC5(NR_PRCTL, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, q->fprog, 0, 0), "seccomp");
	CHECK(SC1(NR_CHDIR, "/workspace"), "chdir /workspace");
	{ /* the agent's descriptors: 0 and 1 /dev/null, 2 stderr, then requests and replies */
		long hreq = SC3(NR_FCNTL, q->req_fd, F_DUPFD, 200), hrep, herr, null;
		CHECK(hreq, "fcntl");
		hrep = SC3(NR_FCNTL, q->rep_fd, F_DUPFD, 201);
		CHECK(hrep, "fcntl");
		herr = SC3(NR_FCNTL, q->err_fd, F_DUPFD, 202);
		CHECK(herr, "fcntl");
		null = SC4(NR_OPENAT, AT_FDCWD, "/dev/null", O_RDWR, 0);
		CHECK(null, "open /dev/null");
		CHECK(SC3(NR_DUP3, null, 0, 0), "dup");
		CHECK(SC3(NR_DUP3, null, 1, 0), "dup");
		CHECK(SC3(NR_DUP3, herr, 2, 0), "dup");
		CHECK(SC3(NR_DUP3, hreq, q->req_target, 0), "dup");
		CHECK(SC3(NR_DUP3, hrep, q->rep_target, 0), "dup");
		{
			long lo = q->rep_target + 1;
			if (SC3(NR_CLOSE_RANGE, lo, ~0U, 0) < 0)
				for (i = lo; i < 65536; i++)
					SC1(NR_CLOSE, i);
		}
	}
}

/* The template's robust-futex list (glibc's, in the calling thread's struct pthread), read
 * before each clone: the agent registers it as its own. */
static void *robust_head;
static u64 robust_len;

/* reaper_exec turns P into the reaper of the agent pid. */
static void __attribute__((noreturn, used)) reaper_exec(const struct zreq *q, long pid) {
	char num[24], *argv[3];
	SC1(NR_CLOSE, q->req_target); /* the host must see EOF on the replies when the agent dies */
	SC1(NR_CLOSE, q->rep_target);
	num[put_num(num, 0, pid)] = 0;
	argv[0] = (char *)q->reaper;
	argv[1] = num;
	argv[2] = 0;
	fail(2, "exec the reaper", SC3(NR_EXECVE, q->reaper, argv, q->envp));
}

#if defined(__x86_64__)
#define CLONE_VM 0x100
/* clone_agent clones Q with CLONE_VM: Q shares P's memory until P's exec of the reaper gives P
 * memory of its own, and then has it alone, so neither a copy of the template's page tables
 * (0.3 ms of each start) nor P's teardown of them is made. Until then Q waits on a stack of its
 * own (agent_stack, for a signal's frame) for the kernel to clear split_word and wake it, which
 * an exec does as an exit does for a thread's clear_child_tid (set_tid_address); then it takes
 * up P's stack where the clone returned, as P left it: P runs its part (reaper_exec) 1 KiB
 * below that, and never comes back. It returns 0 in Q and -errno in P if the clone failed. */
static volatile int split_word;
static char agent_stack[8192] __attribute__((aligned(16)));

/* clone_vm is clone_agent's system call, alone in its function: its register variables must be
 * where the asm wants them, with no other call in between. */
static long __attribute__((noinline)) clone_vm(const struct zreq *q) {
	register long ret __asm__("rax") = NR_CLONE;
	register long flags __asm__("rdi") = CLONE_VM | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD;
	register long stack __asm__("rsi") = (long)(agent_stack + sizeof(agent_stack));
	register long ptid __asm__("rdx") = 0;
	register long ctid __asm__("r10") = (long)q->tid_addr;
	register long tls __asm__("r8") = 0;
	register long word __asm__("r14") = (long)&split_word;
	register long exec __asm__("r13") = (long)reaper_exec;
	register long req __asm__("r15") = (long)q;
	__asm__ volatile("mov %%rsp, %%r12\n\t"
			 "syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jz 2f\n\t"
			 "js 4f\n\t"
			 /* P: the reaper, below the stack that Q takes up */
			 "sub $1024, %%rsp\n\t"
			 "and $-16, %%rsp\n\t"
			 "mov %%r15, %%rdi\n\t"
			 "mov %%rax, %%rsi\n\t"
			 "call *%%r13\n\t"
			 "ud2\n\t"
			 /* Q: wait for P's exec */
			 "2:\n\t"
			 "movl (%%r14), %%edx\n\t"
			 "test %%edx, %%edx\n\t"
			 "jz 3f\n\t"
			 "mov %[futex], %%eax\n\t"
			 "mov %%r14, %%rdi\n\t"
			 "xor %%esi, %%esi\n\t" /* FUTEX_WAIT */
			 "xor %%r10d, %%r10d\n\t"
			 "syscall\n\t"
			 "jmp 2b\n\t"
			 "3:\n\t"
			 "mov %%r12, %%rsp\n\t"
			 "xor %%eax, %%eax\n\t"
			 "4:\n\t"
			 : "+r"(ret), "+r"(flags), "+r"(stack), "+r"(ptid), "+r"(ctid), "+r"(tls)
			 : "r"(word), "r"(exec), "r"(req), [futex] "i"(NR_FUTEX)
			 : "rcx", "r9", "r11", "r12", "memory", "cc");
	return ret;
}

static long clone_agent(const struct zreq *q) {
	split_word = 1;
	SC1(NR_SET_TID_ADDRESS, &split_word);
	return clone_vm(q);
}
#else
/* clone_agent clones Q as a copy of P's memory (arm64: the CLONE_VM split is x86-64's only);
 * it returns 0 in Q and -errno in P if the clone failed. */
static long clone_agent(const struct zreq *q) {
	long pid = SC5(NR_CLONE, CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, 0, 0, 0, q->tid_addr);
	if (pid > 0)
		reaper_exec(q, pid);
	return pid;
}
#endif

/* split makes the agent Q, P's child, and turns P into the reaper; it returns in Q only. */
static void split(const struct zreq *q) {
	u64 set = FORWARDED;
	long pid;
	/* stderr is fd 2 now */
	CHECK_FD(2, SC4(NR_RT_SIGPROCMASK, SIG_BLOCK, &set, 0, 8), "block the forwarded signals");
	pid = clone_agent(q);
	CHECK_FD(2, pid, "fork the agent");
	/* Q: the forwarded signals stay blocked until zygote.py unblocks them */
	if (*(volatile int *)q->tid_addr != (int)SC0(NR_GETTID))
		fail(2, "the agent's tid is not where the template found glibc's", -22);
	/* A new process has no robust-futex list; glibc's fork registers the thread's own
	 * (its struct pthread is the template's, copied), so the agent's is too. Its result
	 * is ignored, as glibc ignores it. */
	if (robust_head)
		SC2(NR_SET_ROBUST_LIST, robust_head, robust_len);
	/* The kernel keeps no rseq area for a clone with CLONE_VM (a copy keeps its parent's), where
	 * glibc thinks it has one: sched_getcpu would read a CPU number nobody updates. The same
	 * area again, as glibc registers it (a copy's fails with EBUSY, and is ignored). */
	if (q->rseq_area)
		SC4(NR_RSEQ, q->rseq_area, 32, 0, RSEQ_SIG);
}

/* The kernel's structures, as far as the raw system calls below use them. */
struct iovec_ {
	void *base;
	u64 len;
};
struct msghdr_ {
	void *name;
	int namelen, pad0;
	struct iovec_ *iov;
	u64 iovlen;
	void *control;
	u64 controllen;
	int flags, pad1;
};
struct pollfd_ {
	int fd;
	short events, revents;
};
struct timespec_ {
	long sec, nsec;
};
#define SOL_SOCKET 1
#define SCM_RIGHTS 1
#define POLLIN 1
#define WNOHANG 1
#define SIGKILL 9
#define AF_UNIX 1
#define SOCK_SEQPACKET 5

/* A control message with up to 8 descriptors (SCM_RIGHTS). */
union fds_cmsg {
	struct {
		u64 len;
		int level, type;
		int fds[8];
	} c;
	char raw[64];
};

/* recv_fds receives one message on fd, at most len bytes into buf, and the descriptors that came
 * with it (at most 8) into fds: it returns the length (0: the peer closed) or -errno. */
static long recv_fds(long fd, void *buf, long len, int *fds, long *nfds) {
	union fds_cmsg ctl;
	struct iovec_ iov = {buf, (u64)len};
	struct msghdr_ mh;
	long n, i;
	zero(&ctl, sizeof(ctl));
	zero(&mh, sizeof(mh));
	mh.iov = &iov;
	mh.iovlen = 1;
	mh.control = &ctl;
	mh.controllen = sizeof(ctl);
	do
		n = SC3(NR_RECVMSG, fd, &mh, 0);
	while (n == -EINTR);
	*nfds = 0;
	if (n >= 0 && mh.controllen >= 16 && ctl.c.level == SOL_SOCKET && ctl.c.type == SCM_RIGHTS && ctl.c.len >= 16) {
		*nfds = (long)(ctl.c.len - 16) / 4;
		if (*nfds > 8)
			*nfds = 8;
		for (i = 0; i < *nfds; i++)
			fds[i] = ctl.c.fds[i];
	}
	return n;
}

/* A spare P (serve_fast): cloned by the template's request loop ahead of the fast request it
 * serves, with the namespaces of the registered shape, so that the clone (a copy of the
 * template's page tables, and a network namespace: 0.5 ms of it) is not on a sandbox's start.
 * It waits on its socket for what the request has of its own: the hostname, with the child's
 * descriptors; its id maps are written before. spare_in is its end of the socket, set only
 * while the template clones it; the rest is the template's: the spare, and its socket's end. */
static long spare_in = -1;
static long spare_pid, spare_fd = -1;
static long spare_tried; /* a spare was tried since the last fork, or the loop was entered */
static char spare_host[64];
#define SPARE_DELAY 1000000 /* ns */

/* The agent's write set (zygote_writeset_linux.go): ranges of the template's pages that a
 * child's agent wrote on its way to hello, which the host read once from the kernel
 * (/proc/<pid>/pagemap, before that child ran any code it was sent) and sent in a 'W' message:
 * 'W', three bytes of padding, the number of ranges (32 bits), then each range's first address
 * (64 bits) and pages (32 bits), little-endian. A spare writes them ahead (MADV_POPULATE_WRITE)
 * while it waits: each is a copy of the template's page that the agent would otherwise fault
 * on at 3 us apiece, about a third of a fresh agent's start. */
#define WS_MAX_RANGES 512
#define WS_MAX_PAGES 4096
#define MADV_POPULATE_WRITE 23
static u64 ws_start[WS_MAX_RANGES];
static long ws_pages[WS_MAX_RANGES], ws_n;

static u64 le(const unsigned char *b, long n) {
	u64 v = 0;
	while (n--)
		v = v << 8 | b[n];
	return v;
}

/* store_ws keeps the write set of message m (n bytes); a malformed one clears it. */
static void store_ws(const unsigned char *m, long n) {
	long count = n >= 8 ? (long)le(m + 4, 4) : -1, i, total = 0;
	ws_n = 0;
	if (count < 0 || count > WS_MAX_RANGES || n != 8 + 12 * count)
		return;
	for (i = 0; i < count; i++) {
		ws_start[i] = le(m + 8 + 12 * i, 8);
		ws_pages[i] = (long)le(m + 16 + 12 * i, 4);
		if ((ws_start[i] & 4095) || ws_pages[i] <= 0 || (total += ws_pages[i]) > WS_MAX_PAGES)
			return;
	}
	ws_n = count;
}

/* spare_start waits, in a spare P, for its request (send_spare) and makes q that request's. */
static void spare_start(const struct zreq *q) {
	struct zreq *w = (struct zreq *)q; /* P's own copy of the template's */
	int fds[8];
	long n, i, nfds;
	SC1(NR_CLOSE, spare_fd);
	for (i = 0; i < ws_n; i++) { /* a range the template no longer has fails alone */
		struct pollfd_ pfd = {(int)spare_in, POLLIN, 0};
		struct timespec_ now = {0, 0};
		if (i % 16 == 15 && SC5(NR_PPOLL, &pfd, 1, &now, 0, 8) > 0)
			break; /* the request came: the agent faults in the rest itself */
		SC3(NR_MADVISE, ws_start[i], ws_pages[i] << 12, MADV_POPULATE_WRITE);
	}
	n = recv_fds(spare_in, spare_host, sizeof(spare_host) - 1, fds, &nfds);
	if (n <= 0 || (nfds != 4 && nfds != 5)) /* dropped (the template closed its end), or malformed */
		for (;;)
			SC1(NR_EXIT_GROUP, 121);
	SC1(NR_CLOSE, spare_in);
	spare_host[n] = 0;
	w->req_fd = fds[0];
	w->rep_fd = fds[1];
	w->err_fd = fds[2];
	w->go_fd = fds[3];
	w->bridge_fd = nfds == 5 ? fds[4] : -1;
	w->hostname = spare_host;
	w->map_fd = -1;
}

__attribute__((visibility("default"))) long zfork(const struct zreq *q) {
	long pid;
	if (SC3(NR_GET_ROBUST_LIST, 0, &robust_head, &robust_len) < 0)
		robust_head = 0;
	pid = SC5(NR_CLONE, q->nsflags | SIGCHLD, 0, 0, 0, 0);
	if (pid != 0)
		return pid; /* the template: P's pid, or -errno */
	if (spare_in >= 0)
		spare_start(q);
	child(q);
	split(q);
	return 0; /* in Q */
}

/* The template's request loop (zygote.py's _serve_c, ZLoop there: keep the two in step). */
struct zloop {
	long ctl_fd;  /* the control socket to the host */
	long wake_fd; /* the read end of Python's signal wakeup pipe (non-blocking): SIGCHLD */
	struct zreq *q; /* the request of the registered shape, or 0: every fork request goes to Python */
	long ids_size;  /* the shape's id range per child */
	char *buf;      /* a message handed to Python: msglen bytes, with nfds descriptors */
	long bufsize;
	long msglen;
	int fds[8];
	long nfds;
	void (*before_fork)(void); /* PyOS_BeforeFork and PyOS_AfterFork_Parent, as _clone_c calls them */
	void (*after_fork_parent)(void);
	char id[64], hostname[64]; /* of the request being served (q->hostname points here) */
};

/* A fast fork request (zygote_linux.go, forkRequest.fast): 'F', flags (1: a fifth descriptor, the
 * bridge's mount), the lengths of the id and the hostname, the first host id of the child's
 * range (32 bits, little-endian), then the id and the hostname. */
#define FAST_HEADER 8
#define FAST_BRIDGE 1

static long send_msg(const struct zloop *l, const char *msg, long n) {
	long r;
	do
		r = sys6(NR_SENDTO, l->ctl_fd, (long)msg, n, 0, 0, 0);
	while (r == -EINTR);
	return r < 0 ? r : 0;
}

/* reply sends the answer to the fork request being served: its pid, or the step that failed.
 * It returns 1, or -errno if the send failed (serve_fast's results). */
static long reply(const struct zloop *l, long pid, const char *step, long err, long spare) {
	char buf[256];
	long at = put_str(buf, 0, "{\"op\":\"forked\",\"id\":\"");
	at = put_str(buf, at, l->id);
	if (step) {
		at = put_str(buf, at, "\",\"error\":\"OSError: ");
		at = put_str(buf, at, step);
		at = put_str(buf, at, ": errno ");
		at = put_num(buf, at, err);
		at = put_str(buf, at, "\"}");
	} else {
		at = put_str(buf, at, "\",\"pid\":");
		at = put_num(buf, at, pid);
		at = put_str(buf, at, spare ? ",\"spare\":true}" : "}");
	}
	at = send_msg(l, buf, at);
	return at < 0 ? at : 1;
}

/* reap reports every child that has exited, as zygote.py's loop does. */
static long reap(const struct zloop *l) {
	char drain[256];
	while (SC3(NR_READ, l->wake_fd, drain, sizeof(drain)) > 0)
		;
	for (;;) {
		int status = 0;
		long pid = SC4(NR_WAIT4, -1, &status, WNOHANG, 0), code, at;
		char buf[96];
		if (pid == -EINTR)
			continue;
		if (pid <= 0)
			return 0; /* none left to reap now, or no child at all */
		if (pid == spare_pid) { /* a spare that died unused: the host never heard of it */
			spare_pid = 0;
			SC1(NR_CLOSE, spare_fd);
			spare_fd = -1;
			continue;
		}
		/* os.waitstatus_to_exitcode: the exit status, or minus the signal */
		code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -(status & 0x7f);
		at = put_str(buf, 0, "{\"op\":\"exit\",\"pid\":");
		at = put_num(buf, at, pid);
		at = put_str(buf, at, ",\"code\":");
		at = put_num(buf, at, code);
		buf[at++] = '}';
		if ((pid = send_msg(l, buf, at)) < 0)
			return pid;
	}
}

/* copy_name copies n bytes of a fast request's name to dst if they are [0-9A-Za-z.-] only. */
static long copy_name(char *dst, const char *src, long n) {
	long i;
	if (n <= 0 || n >= 64)
		return -1;
	for (i = 0; i < n; i++) {
		char c = src[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.'))
			return -1;
		dst[i] = c;
	}
	dst[n] = 0;
	return 0;
}

static long write_map(long pid, const char *name, const char *line) {
	char path[64];
	long at = put_str(path, 0, "/proc/");
	at = put_num(path, at, pid);
	path[at++] = '/';
	at = put_str(path, at, name);
	path[at] = 0;
	return write_file(path, line);
}

/* map_line is the id map of fast request m's child: its ids 0 ... ids_size-1 onto the
 * template's from the request's first host id. */
static void map_line(const struct zloop *l, const unsigned char *m, char *line) {
	long at = put_str(line, 0, "0 ");
	at = put_num(line, at, (long)le(m + 4, 4));
	line[at++] = ' ';
	at = put_num(line, at, l->ids_size);
	line[at++] = '\n';
	line[at] = 0;
}

static long write_maps(long pid, const char *line) {
	long r = write_map(pid, "uid_map", line);
	return r < 0 ? r : write_map(pid, "gid_map", line);
}

/* drop_spare kills the spare, if any, and reaps it: the host never hears of its exit. */
static void drop_spare(void) {
	int status;
	if (!spare_pid)
		return;
	SC2(NR_KILL, spare_pid, SIGKILL);
	while (SC4(NR_WAIT4, spare_pid, &status, 0, 0) == -EINTR)
		;
	SC1(NR_CLOSE, spare_fd);
	spare_pid = 0;
	spare_fd = -1;
}

/* make_spare clones a spare P of the registered shape; it returns 0 in the agent Q that the
 * spare makes once started, else 1 (without a spare if the clone failed: the next fast request
 * clones its own child). */
static long make_spare(struct zloop *l) {
	int sv[2];
	long pid;
	spare_tried = 1;
	if (SC4(NR_SOCKETPAIR, AF_UNIX, SOCK_SEQPACKET | O_CLOEXEC, 0, sv) < 0)
		return 1;
	spare_fd = sv[0];
	spare_in = sv[1];
	l->before_fork();
	pid = zfork(l->q);
	if (pid == 0)
		return 0; /* Q */
	l->after_fork_parent();
	SC1(NR_CLOSE, spare_in);
	spare_in = -1;
	if (pid < 0) {
		SC1(NR_CLOSE, spare_fd);
		spare_fd = -1;
		return 1;
	}
	spare_pid = pid;
	return 1;
}

/* send_spare makes the spare fast request m's child: its id maps, then the hostname and the
 * child's descriptors on its socket (spare_start). It returns 1 once the host has its answer,
 * < 0 if the control socket failed, or 2 if the spare is gone (dropped: the caller clones). */
static long send_spare(struct zloop *l, const unsigned char *m, const int *fds, long nfds) {
	union fds_cmsg ctl;
	struct iovec_ iov = {l->hostname, m[3]};
	struct msghdr_ mh;
	char line[64];
	long i, r, pid = spare_pid;
	map_line(l, m, line);
	if (write_maps(pid, line) < 0) {
		drop_spare();
		return 2;
	}
	zero(&ctl, sizeof(ctl));
	zero(&mh, sizeof(mh));
	ctl.c.len = 16 + 4 * (u64)nfds;
	ctl.c.level = SOL_SOCKET;
	ctl.c.type = SCM_RIGHTS;
	for (i = 0; i < nfds; i++)
		ctl.c.fds[i] = fds[i];
	mh.iov = &iov;
	mh.iovlen = 1;
	mh.control = &ctl;
	mh.controllen = 16 + ((4 * (u64)nfds + 7) & ~7UL);
	do
		r = SC3(NR_SENDMSG, spare_fd, &mh, 0);
	while (r == -EINTR);
	if (r != (long)m[3]) {
		drop_spare();
		return 2;
	}
	SC1(NR_CLOSE, spare_fd);
	spare_fd = -1;
	spare_pid = 0;
	return reply(l, pid, 0, 0, 1);
}

/* serve_fast forks the child of one fast request, as zygote.py's _fork with _clone_c does; it
 * returns 0 in the agent Q, 1 in the template (the host has its answer), or < 0 if the control
 * socket failed. */
static long serve_fast(struct zloop *l, const unsigned char *m, long n, const int *fds, long nfds) {
	struct zreq *q = l->q;
	long want, pid = 0, waited = 0, delay = 2000000, r;
	int p[2];
	char line[64];
	want = (m[1] & FAST_BRIDGE) ? 5 : 4;
	if (n != FAST_HEADER + m[2] + m[3] || copy_name(l->id, (const char *)m + FAST_HEADER, m[2]) < 0) {
		l->id[0] = 0;
		return reply(l, 0, "a malformed fast fork request", EINVAL, 0);
	}
	if (copy_name(l->hostname, (const char *)m + FAST_HEADER + m[2], m[3]) < 0)
		return reply(l, 0, "a fast fork request's hostname", EINVAL, 0);
	if (nfds != want)
		return reply(l, 0, "a fast fork request's descriptors", EINVAL, 0);
	if (spare_pid && (r = send_spare(l, m, fds, nfds)) != 2)
		return r;
	if ((r = SC2(NR_PIPE2, p, O_CLOEXEC)) < 0)
		return reply(l, 0, "pipe", -r, 0);
	q->map_fd = p[0];
	q->map_w_fd = p[1];
	q->req_fd = fds[0];
	q->rep_fd = fds[1];
	q->err_fd = fds[2];
	q->go_fd = fds[3];
	q->bridge_fd = want == 5 ? fds[4] : -1;
	q->hostname = l->hostname;
	for (;;) { /* ENOSPC: the namespace budget, spent by dead children the kernel frees later */
		l->before_fork();
		pid = zfork(q);
		if (pid == 0)
			return 0; /* Q */
		l->after_fork_parent();
		if (pid > 0 || pid != -ENOSPC || waited >= 2000000000L)
			break;
		{
			struct timespec_ ts = {0, delay};
			SC2(NR_NANOSLEEP, &ts, 0);
		}
		waited += delay;
		delay = delay * 2 < 50000000 ? delay * 2 : 50000000;
	}
	SC1(NR_CLOSE, p[0]);
	if (pid < 0) {
		SC1(NR_CLOSE, p[1]);
		return reply(l, 0, "clone", -pid, 0);
	}
	map_line(l, m, line);
	/* Without its maps (P then reads EOF, and exits 121), the host has the error. */
	if ((r = write_maps(pid, line)) < 0) {
		SC1(NR_CLOSE, p[1]);
		return reply(l, 0, "writing the child's id map", -r, 0);
	}
	r = SC3(NR_WRITE, p[1], "m", 1);
	SC1(NR_CLOSE, p[1]);
	if (r != 1)
		return reply(l, 0, "waking the child", r < 0 ? -r : EINVAL, 0);
	return reply(l, pid, 0, 0, 0);
}

/* zserve serves fast fork requests and children's exits until a message comes that is for
 * Python (returns 1: msglen bytes in buf, nfds descriptors in fds), the host closes its end
 * (2), or the control socket fails (-errno). In a child it forked, it returns 0. */
__attribute__((visibility("default"))) long zserve(struct zloop *l) {
	spare_tried = 0; /* Python may have registered a shape */
	for (;;) {
		struct pollfd_ pfd[2] = {{(int)l->ctl_fd, POLLIN, 0}, {(int)l->wake_fd, POLLIN, 0}};
		long n, i, nfds, r;
		int fds[8];
		/* The spare is cloned once no message came for SPARE_DELAY: not while the last child
		 * sets itself up, whose mounts and loopback take the kernel's locks that a clone with
		 * new mount and network namespaces holds. */
		struct timespec_ idle = {0, SPARE_DELAY};
		long want_spare = l->q && !spare_pid && !spare_tried;
		r = SC5(NR_PPOLL, pfd, 2, want_spare ? &idle : 0, 0, 8);
		if (r == -EINTR)
			continue;
		if (r == 0) {
			if (make_spare(l) == 0)
				return 0; /* in Q */
			continue;
		}
		if (r < 0)
			return r;
		if (pfd[1].revents) {
			if ((r = reap(l)) < 0)
				return r;
		}
		if (!pfd[0].revents)
			continue;
		if ((n = recv_fds(l->ctl_fd, l->buf, l->bufsize, fds, &nfds)) < 0)
			return n;
		if (n == 0) {
			for (i = 0; i < nfds; i++)
				SC1(NR_CLOSE, fds[i]);
			return 2;
		}
		if (l->buf[0] == 'W') {
			store_ws((const unsigned char *)l->buf, n);
			for (i = 0; i < nfds; i++)
				SC1(NR_CLOSE, fds[i]);
			continue;
		}
		if (l->q == 0 || n < FAST_HEADER || l->buf[0] != 'F') {
			drop_spare(); /* of the shape that Python may change */
			l->msglen = n;
			l->nfds = nfds;
			for (i = 0; i < nfds; i++)
				l->fds[i] = fds[i];
			return 1;
		}
		r = serve_fast(l, (const unsigned char *)l->buf, n, fds, nfds);
		if (r == 0)
			return 0; /* in Q */
		/* Every later child is a copy of this memory: none may find this one's hostname. */
		zero(l->buf, n);
		zero(l->id, sizeof(l->id));
		zero(l->hostname, sizeof(l->hostname));
		spare_tried = 0;
		for (i = 0; i < nfds; i++)
			SC1(NR_CLOSE, fds[i]);
		if (r < 0)
			return r;
	}
}
