/*
 * forge-reaper: pid 1 of a sandbox, exec'd by the agent right after it forks
 * (see _reap_as_init in agent.py). It reaps every process that ends up as its
 * child (orphans are reparented to pid 1), forwards SIGINT, SIGTERM, SIGHUP,
 * SIGQUIT, SIGUSR1 and SIGUSR2 to the agent, and exits with the agent's
 * status (128+signal when it was killed), after which the kernel kills the
 * rest of the sandbox. The forwarded signals arrive blocked (the agent blocked
 * them before forking; the mask and pending signals survive execve) and are
 * unblocked once the handlers are in place, so none is lost.
 *
 * Built static (make build), so it runs in any image; a Python reaper is the
 * fallback when forge was built without it.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile pid_t agent;

static void forward(int sig) { kill(agent, sig); }

int main(int argc, char **argv) {
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
	struct sigaction sa;
	sigset_t set;
	char *end;
	long n;
	unsigned i;

	if (argc != 2)
		return 111;
	n = strtol(argv[1], &end, 10);
	if (*end != '\0' || n <= 1)
		return 111;
	agent = (pid_t)n;

	sa.sa_handler = forward;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigemptyset(&set);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		sigaction(sigs[i], &sa, NULL);
		sigaddset(&set, sigs[i]);
	}
	sigprocmask(SIG_UNBLOCK, &set, NULL);

	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			return 1; /* ECHILD: the agent is gone without a status */
		}
		if (pid != agent)
			continue;
		if (WIFEXITED(status))
			return WEXITSTATUS(status);
		if (WIFSIGNALED(status))
			return 128 + WTERMSIG(status);
	}
}
