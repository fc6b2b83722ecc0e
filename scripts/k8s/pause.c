/* pause: the pod sandbox's process (what registry.k8s.io/pause does), built
 * here so the test cluster needs no registry. It holds the pod's namespaces
 * open, reaps orphans, and exits 0 on SIGINT or SIGTERM. Static: the image
 * holds this file only. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, 0, WNOHANG) > 0) {
	}
}

int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = stop;
	sigaction(SIGINT, &sa, 0);
	sigaction(SIGTERM, &sa, 0);
	sa.sa_handler = reap;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, 0);
	for (;;)
		pause();
}
