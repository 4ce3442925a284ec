/* copytree_floor SRC DST: shutil.copytree(SRC, DST) (copy2: data, times,
 * permission bits) of a tree of directories and regular files, made the
 * way aioring.shutil.copytree makes it, in C: the floor of that design.
 *
 * benchmarks/tree_ops.py builds it (cc, liburing) and times it beside the
 * Python variants.  One thread; the directories are walked one at a time
 * while the copies of the files found so far are in flight, up to LIMIT at
 * once.  Each file's source is opened, stat'ed, its extended attributes
 * listed and its bytes read at once, then closed; its destination is created
 * (O_EXCL) and written through io_uring (the kernel's workers: the write
 * with IOSQE_ASYNC, as aioring's NewFile makes it), then its
 * times and mode are set and it is closed.  Each directory's times and mode
 * are set once every copy ended.  A file with extended attributes, a
 * symlink or any other kind of entry is refused (exit 2): the benchmark's
 * tree has none.  Prints nothing; exits 1 with a message on an error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

enum { LIMIT = 32, ENTRIES = 256 }; /* (LIMIT: aioring.shutil.COPY_TASKS) */

struct dir {
    char *src, *dst;       /* paths */
    int src_fd, dst_fd;    /* O_PATH fds, kept open while its files are copied */
    struct stat st;        /* the source directory's, for its copystat */
};

struct job {
    struct dir *dir;
    char *name;
    struct stat st;
    char *data;
    int fd;                /* the destination once created */
};

static struct dir **dirs;
static size_t ndirs, walked, dirs_cap;
static struct job *pending;     /* files found, not started yet */
static size_t npending, pending_at, pending_cap;

static void
fail(const char *what, const char *path, int err)
{
    fprintf(stderr, "copytree_floor: %s %s: %s\n", what, path, strerror(err));
    exit(err == ENOTSUP ? 2 : 1);
}

static void *
xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        fail("malloc", "", ENOMEM);
    return p;
}

static char *
join(const char *a, const char *b)
{
    char *p = xmalloc(strlen(a) + strlen(b) + 2);
    sprintf(p, "%s/%s", a, b);
    return p;
}

static void
add_dir(char *src, char *dst)
{
    struct dir *d = xmalloc(sizeof *d);
    d->src = src, d->dst = dst;
    if (stat(src, &d->st) < 0)
        fail("stat", src, errno);
    if (mkdir(dst, 0777) < 0)
        fail("mkdir", dst, errno);
    d->src_fd = open(src, O_PATH | O_DIRECTORY | O_CLOEXEC);
    d->dst_fd = open(dst, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d->src_fd < 0 || d->dst_fd < 0)
        fail("open", src, errno);
    if (ndirs == dirs_cap) {
        dirs_cap = dirs_cap ? 2 * dirs_cap : 64;
        dirs = realloc(dirs, dirs_cap * sizeof *dirs);
        if (dirs == NULL)
            fail("realloc", "", ENOMEM);
    }
    dirs[ndirs++] = d;
}

/* The next directory listed: its subdirectories made and queued, its files
   queued as jobs. */
static void
walk_one(void)
{
    struct dir *d = dirs[walked++];
    DIR *it = opendir(d->src);
    struct dirent *e;

    if (it == NULL)
        fail("opendir", d->src, errno);
    while ((e = readdir(it)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (e->d_type == DT_DIR) {
            add_dir(join(d->src, e->d_name), join(d->dst, e->d_name));
        } else if (e->d_type == DT_REG) {
            if (npending == pending_cap) {
                pending_cap = pending_cap ? 2 * pending_cap : 1024;
                pending = realloc(pending, pending_cap * sizeof *pending);
                if (pending == NULL)
                    fail("realloc", "", ENOMEM);
            }
            struct job *j = &pending[npending++];
            memset(j, 0, sizeof *j);
            j->fd = -1;
            j->dir = d;
            j->name = strdup(e->d_name);
        } else {
            fail("not a directory or regular file:", e->d_name, ENOTSUP);
        }
    }
    closedir(it);
}

/* The next SQE, the SQ submitted first when it is full. */
static struct io_uring_sqe *
next_sqe(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (sqe == NULL) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

/* Job i's source opened, stat'ed, checked for extended attributes, read
   whole and closed; its destination's create queued.  (The CQEs name a job
   by its index: `pending` moves as it grows.) */
static void
start(struct io_uring *ring, size_t i)
{
    struct job *j = &pending[i];
    int fd = openat(j->dir->src_fd, j->name, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &j->st) < 0)
        fail("open", j->name, errno);
    ssize_t names = flistxattr(fd, NULL, 0);
    if (names > 0)
        fail("extended attributes on", j->name, ENOTSUP);
    j->data = xmalloc((size_t)j->st.st_size + 1);
    ssize_t got = pread(fd, j->data, (size_t)j->st.st_size + 1, 0);
    if (got != j->st.st_size)
        fail("read", j->name, got < 0 ? errno : EIO);
    close(fd);
    struct io_uring_sqe *sqe = next_sqe(ring);
    io_uring_prep_openat(sqe, j->dir->dst_fd, j->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                         j->st.st_mode & 0777);
    io_uring_sqe_set_data64(sqe, i);
}

/* A CQE of job i: the create's (its write queued) or the write's (the copy
   finished: times, mode, close).  1 when the copy ended. */
static int
step(struct io_uring *ring, size_t i, int res)
{
    struct job *j = &pending[i];

    if (res < 0)
        fail(j->fd < 0 ? "create" : "write", j->name, -res);
    if (j->fd < 0) {
        j->fd = res;
        struct io_uring_sqe *sqe = next_sqe(ring);
        io_uring_prep_write(sqe, j->fd, j->data, (unsigned)j->st.st_size, 0);
        sqe->flags |= IOSQE_ASYNC;
        io_uring_sqe_set_data64(sqe, i);
        return 0;
    }
    if (res != j->st.st_size)
        fail("short write", j->name, EIO);
    struct timespec times[2] = {j->st.st_atim, j->st.st_mtim};
    struct stat st;
    if (futimens(j->fd, times) < 0 || fstat(j->fd, &st) < 0)
        fail("utime", j->name, errno);
    if ((st.st_mode & 07777) != (j->st.st_mode & 07777) && fchmod(j->fd, j->st.st_mode & 07777) < 0)
        fail("chmod", j->name, errno);
    if (close(j->fd) < 0)
        fail("close", j->name, errno);
    free(j->data);
    free(j->name);
    return 1;
}

int
main(int argc, char **argv)
{
    struct io_uring ring;
    size_t in_flight = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: copytree_floor SRC DST\n");
        return 1;
    }
    int ret = io_uring_queue_init(ENTRIES, &ring, IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN);
    if (ret < 0)
        ret = io_uring_queue_init(ENTRIES, &ring, 0);
    if (ret < 0)
        fail("io_uring_queue_init", "", -ret);
    add_dir(strdup(argv[1]), strdup(argv[2]));
    while (walked < ndirs || pending_at < npending || in_flight > 0) {
        if (walked < ndirs && npending - pending_at < 2 * LIMIT)
            walk_one();
        while (in_flight < LIMIT && pending_at < npending) {
            start(&ring, pending_at++);
            in_flight++;
        }
        if (in_flight == 0)
            continue;
        struct io_uring_cqe *cqe;
        /* (waits for a completion unless the next turn walks a directory) */
        int walks = walked < ndirs && npending - pending_at < 2 * LIMIT;
        ret = walks ? io_uring_submit(&ring) : io_uring_submit_and_wait(&ring, 1);
        if (ret < 0)
            fail("io_uring_submit", "", -ret);
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            in_flight -= step(&ring, (size_t)io_uring_cqe_get_data64(cqe), cqe->res);
        }
        io_uring_cq_advance(&ring, seen);
    }
    /* copystat of each directory, its contents all there */
    for (size_t i = 0; i < ndirs; i++) {
        struct dir *d = dirs[i];
        struct timespec times[2] = {d->st.st_atim, d->st.st_mtim};
        if (utimensat(AT_FDCWD, d->dst, times, 0) < 0 || chmod(d->dst, d->st.st_mode & 07777) < 0)
            fail("copystat", d->dst, errno);
        close(d->src_fd);
        close(d->dst_fd);
    }
    io_uring_queue_exit(&ring);
    return 0;
}
