/*
 * skiff's pause program: the process that holds a pod sandbox's namespaces open.
 *
 * It does what Kubernetes' pause container is documented to do: sleep until told to stop,
 * exit at once on SIGINT or SIGTERM, and reap any child re-parented to it when it is the PID
 * namespace's init (pods with shareProcessNamespace). It is linked statically so that the
 * image needs no other file; crates/kubelet/build.rs compiles it and the kubelet packs it into
 * the sandbox image at node start (crates/kubelet/src/sandbox_image.rs).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static int on(int sig, void (*handler)(int)) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    return sigaction(sig, &action, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        write(STDOUT_FILENO, "skiff pause\n", 12);
        return 0;
    }
    if (on(SIGINT, stop) < 0 || on(SIGTERM, stop) < 0 || on(SIGCHLD, reap) < 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
