// The kernel's floor for cordon's per-rule work, without cordon: what N granted paths
// cost in syscalls alone, the way cordon makes them. Run as root (the view part needs a
// mount namespace) from the repository root:
//
//   cc -O2 -pthread -o target/floor benches/floor.c && target/floor 10000
//
// It creates N empty directories under a fresh /var/tmp/cordon-floor.XXXXXX (removed at
// the end) and times, each the median of REPS runs:
//
//   stat      N x fstatat(parent, name, AT_SYMLINK_NOFOLLOW)        (plan: resolve a path)
//   landlock  N x (openat(parent, name, O_PATH) + landlock_add_rule + close), then
//             landlock_restrict_self, in a child; with 1 and 2 threads      (no view)
//   view      in a child in a fresh mount namespace, a tmpfs, then N x (open_tree_attr(
//             parent, name, CLONE|RECURSIVE|NOFOLLOW, ro|nosuid|nodev|noexec) + fstat +
//             mkdirat + move_mount by name + landlock_add_rule on the mount + close):
//             the build, and the child's exit (the kernel tears the N mounts down)
//
// Nothing here is cordon's code; it is the least those steps can cost on this kernel.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/mount.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_open_tree_attr
#define SYS_open_tree_attr 467
#endif
#define REPS 5

static int n, dirfd_;
static char root[64] = "";
static pid_t main_pid;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void name_of(int i, char *buf) { snprintf(buf, 16, "d%06d", i); }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v) {
    qsort(v, REPS, sizeof *v, cmp);
    return v[REPS / 2];
}

static double time_stat(void) {
    struct stat st;
    char name[16];
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        name_of(i, name);
        if (fstatat(dirfd_, name, &st, AT_SYMLINK_NOFOLLOW)) die("fstatat");
    }
    return now_ms() - t0;
}

struct part { int ruleset, from, to; };

static void *add_rules(void *arg) {
    struct part *p = arg;
    char name[16];
    for (int i = p->from; i < p->to; i++) {
        name_of(i, name);
        int fd = openat(dirfd_, name, O_PATH | O_CLOEXEC);
        if (fd < 0) die("openat");
        struct landlock_path_beneath_attr pb = {
            .allowed_access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR,
            .parent_fd = fd,
        };
        if (syscall(SYS_landlock_add_rule, p->ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0))
            die("landlock_add_rule");
        close(fd);
    }
    return NULL;
}

static int new_ruleset(void) {
    struct landlock_ruleset_attr ra = {
        .handled_access_fs = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
                             LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_EXECUTE,
    };
    int rs = syscall(SYS_landlock_create_ruleset, &ra, sizeof ra, 0);
    if (rs < 0) die("landlock_create_ruleset");
    return rs;
}

// Build and restrict in a child (a process can be restricted only once per layer), and
// report the child's time from the start to the end of landlock_restrict_self.
static double time_landlock(int threads) {
    int pipefd[2];
    if (pipe(pipefd)) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        double t0 = now_ms();
        int rs = new_ruleset();
        pthread_t t[8];
        struct part parts[8];
        for (int k = 0; k < threads; k++) {
            parts[k] = (struct part){rs, n * k / threads, n * (k + 1) / threads};
            pthread_create(&t[k], NULL, add_rules, &parts[k]);
        }
        for (int k = 0; k < threads; k++) pthread_join(t[k], NULL);
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        if (syscall(SYS_landlock_restrict_self, rs, 0)) die("landlock_restrict_self");
        double ms = now_ms() - t0;
        if (write(pipefd[1], &ms, sizeof ms) != sizeof ms) die("write");
        _exit(0);
    }
    close(pipefd[1]);
    double ms = 0;
    if (read(pipefd[0], &ms, sizeof ms) != sizeof ms) die("read");
    close(pipefd[0]);
    waitpid(pid, NULL, 0);
    return ms;
}

// The view's work in a child in its own mount namespace: returns the build time in
// *build and the whole child's time, exit included, as seen by the parent.
static double time_view(double *build) {
    int pipefd[2];
    if (pipe(pipefd)) die("pipe");
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        if (unshare(CLONE_NEWNS)) die("unshare");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) die("make private");
        // Sources must be opened in this namespace: open_tree cannot clone another's.
        int src = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (src < 0) die("open the sources' directory");
        int fs = syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
        if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0)) die("fsopen");
        int top = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (top < 0) die("fsmount");
        if (syscall(SYS_move_mount, top, "", AT_FDCWD, "/tmp", MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount /tmp");
        if (mkdirat(top, "p", 0755)) die("mkdir");
        int pt = openat(top, "p", O_PATH | O_DIRECTORY | O_CLOEXEC);
        int rs = new_ruleset();
        struct mount_attr attr = {
            .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        };
        char name[16];
        double t1 = now_ms();
        for (int i = 0; i < n; i++) {
            name_of(i, name);
            int tree = syscall(SYS_open_tree_attr, src, name,
                               OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
                                   AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                               &attr, sizeof attr);
            if (tree < 0) die("open_tree_attr");
            struct stat st;
            if (fstat(tree, &st)) die("fstat");
            if (mkdirat(pt, name, 0755)) die("mkdirat");
            if (syscall(SYS_move_mount, tree, "", pt, name, MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount");
            struct landlock_path_beneath_attr pb = {
                .allowed_access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR,
                .parent_fd = tree,
            };
            if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0)) die("landlock_add_rule");
            close(tree);
        }
        double ms = now_ms() - t1;
        if (write(pipefd[1], &ms, sizeof ms) != sizeof ms) die("write");
        _exit(0);
    }
    close(pipefd[1]);
    if (read(pipefd[0], build, sizeof *build) != sizeof *build) die("read");
    close(pipefd[0]);
    waitpid(pid, NULL, 0);
    return now_ms() - t0;
}

// Remove the directories, also when a step fails (only in the main process).
static void cleanup(void) {
    if (getpid() != main_pid || !root[0]) return;
    int real = open(root, O_DIRECTORY | O_CLOEXEC);
    char name[16];
    for (int i = 0; real >= 0 && i < n; i++) {
        name_of(i, name);
        unlinkat(real, name, AT_REMOVEDIR);
    }
    rmdir(root);
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 10000;
    if (n <= 0 || n > 999999) {
        fprintf(stderr, "usage: %s [N]\n", argv[0]);
        return 2;
    }
    strcpy(root, "/var/tmp/cordon-floor.XXXXXX");
    if (!mkdtemp(root)) die("mkdtemp");
    main_pid = getpid();
    atexit(cleanup);
    dirfd_ = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int real = open(root, O_DIRECTORY | O_CLOEXEC);
    char name[16];
    for (int i = 0; i < n; i++) {
        name_of(i, name);
        if (mkdirat(real, name, 0755)) die("mkdirat");
    }

    double s[REPS], l1[REPS], l2[REPS], vb[REPS], vt[REPS];
    for (int r = 0; r < REPS; r++) {
        s[r] = time_stat();
        l1[r] = time_landlock(1);
        l2[r] = time_landlock(2);
        vt[r] = time_view(&vb[r]);
    }
    printf("kernel floor for %d paths (median of %d, ms):\n", n, REPS);
    printf("  stat (plan)                         %8.1f\n", median(s));
    printf("  landlock, 1 thread                  %8.1f\n", median(l1));
    printf("  landlock, 2 threads                 %8.1f\n", median(l2));
    printf("  view: build the binds               %8.1f\n", median(vb));
    printf("  view: build + exit (teardown)       %8.1f\n", median(vt));

    return 0;
}
