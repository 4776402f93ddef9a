/*
 * Reference for benches/launch.sh: the least a Landlock-only launcher can do. It reads
 * a ruleset (as `cordon explain --no-view --json` prints it, flattened by jq into
 * "HANDLED_FS HANDLED_NET SCOPED" on the first line and "RIGHTS PATH" on the others),
 * then vforks; the child creates the ruleset, adds every rule (open O_PATH, add, close),
 * sets no_new_privs, restricts itself and execs the command; the parent waits.
 *
 * No policy parsing, no private HOME, no seccomp, no capability dropping: it measures
 * what the kernel charges for the same Landlock rules, next to what cordon charges.
 * Not part of cordon; compiled by launch.sh with the system's C compiler.
 *
 *   ref-landlock RULES-FILE COMMAND [ARGS...]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Declared here: the system's <linux/landlock.h> may predate ABI 4 and 6. */
struct ruleset_attr {
    uint64_t handled_access_fs, handled_access_net, scoped;
};
struct path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));
#define RULE_PATH_BENEATH 1
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

struct rule {
    uint64_t rights;
    char *path;
};

static struct ruleset_attr attr;
static struct rule *rules;
static size_t nrules;
static char **command;

static int child(void *unused) {
    (void)unused;
    int rs = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0) _exit(125);
    for (size_t i = 0; i < nrules; i++) {
        int fd = open(rules[i].path, O_PATH | O_CLOEXEC);
        if (fd < 0) continue;
        struct path_beneath_attr pb = {
            .allowed_access = rules[i].rights & attr.handled_access_fs,
            .parent_fd = fd,
        };
        if (pb.allowed_access)
            syscall(SYS_landlock_add_rule, rs, RULE_PATH_BENEATH, &pb, 0);
        close(fd);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_landlock_restrict_self, rs, 0))
        _exit(125);
    execv(command[0], command);
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ref-landlock RULES-FILE COMMAND [ARGS...]\n");
        return 125;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) return 125;
    unsigned long long fs, net, scoped;
    if (fscanf(f, "%llu %llu %llu\n", &fs, &net, &scoped) != 3) return 125;
    attr.handled_access_fs = fs;
    attr.handled_access_net = net;
    attr.scoped = scoped;
    size_t cap = 0;
    unsigned long long rights;
    char path[4096];
    while (fscanf(f, "%llu %4095[^\n]\n", &rights, path) == 2) {
        if (nrules == cap) {
            cap = cap ? cap * 2 : 256;
            rules = realloc(rules, cap * sizeof *rules);
            if (!rules) return 125;
        }
        rules[nrules].rights = rights;
        rules[nrules].path = strdup(path);
        nrules++;
    }
    fclose(f);
    command = &argv[2];
    static char stack[256 * 1024];
    pid_t pid = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
    if (pid < 0) return 125;
    int status;
    if (waitpid(pid, &status, 0) < 0) return 125;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
