//go:build !forgeinit

package hooks

/*
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The runtime passes the small forge-init binary (runtime/sandbox/initbin) to
// the sandbox's init process as a sealed memfd named "forge-init". This runs
// in that process before libcontainer's nsexec constructor (constructors with
// a priority run before those without) and, if it finds the memfd, execs it
// with the same environment and descriptors, so nsexec and Init run in the
// small binary instead of this one. The memfd is made close-on-exec first, so
// it does not reach the sandbox. If anything fails, this binary carries on as
// the init, exactly as without it.
__attribute__((constructor(101))) static void forge_slim_init(int argc, char **argv, char **envp)
{
	if (argc < 2 || strcmp(argv[1], "init") != 0 || getenv("_LIBCONTAINER_INITPIPE") == NULL)
		return;
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL)
		return;
	int found = -1;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);
		if (fd < 3 || fd == dirfd(d))
			continue;
		char path[64], target[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strncmp(target, "/memfd:forge-init ", 18) != 0)
			continue;
		int seals = fcntl(fd, F_GET_SEALS);
		if (seals < 0 || !(seals & F_SEAL_WRITE) || !(seals & F_SEAL_SEAL))
			continue;
		found = fd;
		break;
	}
	closedir(d);
	if (found < 0)
		return;
	int flags = fcntl(found, F_GETFD);
	if (flags < 0 || fcntl(found, F_SETFD, flags | FD_CLOEXEC) < 0)
		return;
	char *args[] = {"forge-init", "init", NULL};
	fexecve(found, args, envp);
	fcntl(found, F_SETFD, flags); // exec failed: leave it as it was
}
*/
import "C"
