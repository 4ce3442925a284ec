/* aioring._liburing's C helpers over liburing: what each one takes and
 * returns is declared, once, in binding_api.h (through binding.h); this file
 * is compiled beside the module cffi generates (see _build_cffi.py). */
#include "binding.h"
#include "sqtail.h"

/* Set up a ring; returns 0 or -errno.  *features receives the kernel's
   IORING_FEAT_* bits, *sq_entries and *cq_entries the sizes it granted. */
int aior_setup(struct io_uring *ring, unsigned entries,
                      unsigned cq_entries, unsigned flags, unsigned sq_thread_idle,
                      unsigned *features, unsigned *sq_entries, unsigned *cq_out)
{
    struct io_uring_params p;
    int ret;

    memset(&p, 0, sizeof(p));
    p.flags = flags;
    p.sq_thread_idle = sq_thread_idle;
    if (cq_entries) {
        p.flags |= IORING_SETUP_CQSIZE;
        p.cq_entries = cq_entries;
    }
    ret = io_uring_queue_init_params(entries, ring, &p);
    if (ret < 0)
        return ret;
    *features = p.features;
    *sq_entries = p.sq_entries;
    *cq_out = p.cq_entries;
    return 0;
}

/* Fill supported[op] with 1 for every opcode the kernel knows.  Returns the
   number of opcodes probed (last_op + 1) or -errno. */
int aior_probe(struct io_uring *ring, unsigned char *supported, int n)
{
    struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
    int i, last;

    if (!probe)
        return -ENOSYS;
    last = probe->last_op;
    for (i = 0; i < n; i++)
        supported[i] = i <= last && io_uring_opcode_supported(probe, i);
    io_uring_free_probe(probe);
    return last + 1;
}

/* One call per operation: get an SQE, prepare a read/write-shaped request,
   tag it.  -EBUSY when the submission queue is full.  off = -1 reaches the
   kernel as (u64)-1, "the file's current position". */
int aior_prep_rw(struct io_uring *ring, int op, int fd, void *addr,
                        unsigned len, int64_t off, unsigned op_flags,
                        uint64_t user_data)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

    if (!sqe)
        return -EBUSY;
    io_uring_prep_rw(op, sqe, fd, addr, len, (__u64)off);
    sqe->rw_flags = op_flags;
    sqe->user_data = user_data;
    return 0;
}

/* aior_prep_rw with SQE flags: IOSQE_ASYNC hands the request to the
   kernel's workers at once instead of issuing it in the submitting call
   (for a buffered read of pages not cached, the submitting call would start
   the device read itself, in the loop's thread). */
int aior_prep_rw_sqe(struct io_uring *ring, int op, int fd, void *addr,
                            unsigned len, int64_t off, unsigned op_flags,
                            unsigned sqe_flags, uint64_t user_data)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

    if (!sqe)
        return -EBUSY;
    io_uring_prep_rw(op, sqe, fd, addr, len, (__u64)off);
    sqe->rw_flags = op_flags;
    io_uring_sqe_set_flags(sqe, sqe_flags);
    sqe->user_data = user_data;
    return 0;
}

/* Take back the SQE tagged `user_data` if the kernel has not read it yet
   (src/sqtail.h says which those are): it is rewritten into a NOP that
   keeps the tag (its CQE still comes) and the link flags (a chain stays a
   chain), so that what it described never happens.  1 if it was found
   there, 0 if the kernel has it already. */
int aior_withdraw(struct io_uring *ring, uint64_t user_data)
{
    struct io_uring_sq *sq = &ring->sq;
    unsigned shift = (ring->flags & IORING_SETUP_SQE128) ? 1 : 0;
    unsigned i;

    for (i = aior_sq_unread_head(ring); i != sq->sqe_tail; i++) {
        struct io_uring_sqe *sqe = &sq->sqes[(i & sq->ring_mask) << shift];
        __u8 links;

        if (sqe->user_data != user_data)
            continue;
        links = sqe->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK);
        io_uring_prep_nop(sqe);
        sqe->flags = links;
        sqe->user_data = user_data;
        return 1;
    }
    return 0;
}

/* One-shot poll for `mask` on fd. */
int aior_prep_poll(struct io_uring *ring, int fd, unsigned mask,
                          uint64_t user_data)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

    if (!sqe)
        return -EBUSY;
    io_uring_prep_poll_add(sqe, fd, mask);
    sqe->user_data = user_data;
    return 0;
}

/* Path and file operations: one call each gets, prepares and tags an SQE. */
#define AIOR_GET_SQE() \
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring); \
    if (!sqe) \
        return -EBUSY

int aior_prep_openat(struct io_uring *ring, int dfd, const char *path,
                            int flags, unsigned mode, uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_openat(sqe, dfd, path, flags, mode);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_close(struct io_uring *ring, int fd, uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_close(sqe, fd);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_statx(struct io_uring *ring, int dfd, const char *path,
                           int flags, unsigned mask, struct statx *buf,
                           uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_statx(sqe, dfd, path, flags, mask, buf);
    sqe->user_data = user_data;
    return 0;
}

/* The fields of os.stat_result, in its order, from a statx: one call
   instead of some thirty attribute reads. */
void aior_statx_fields(const struct statx *st, int64_t out[16])
{
    out[0] = st->stx_mode;
    out[1] = (int64_t)st->stx_ino;
    out[2] = (int64_t)makedev(st->stx_dev_major, st->stx_dev_minor);
    out[3] = st->stx_nlink;
    out[4] = st->stx_uid;
    out[5] = st->stx_gid;
    out[6] = (int64_t)st->stx_size;
    out[7] = st->stx_atime.tv_sec;
    out[8] = st->stx_atime.tv_nsec;
    out[9] = st->stx_mtime.tv_sec;
    out[10] = st->stx_mtime.tv_nsec;
    out[11] = st->stx_ctime.tv_sec;
    out[12] = st->stx_ctime.tv_nsec;
    out[13] = st->stx_blksize;
    out[14] = (int64_t)st->stx_blocks;
    out[15] = (int64_t)makedev(st->stx_rdev_major, st->stx_rdev_minor);
}

int aior_prep_unlinkat(struct io_uring *ring, int dfd, const char *path,
                              int flags, uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_unlinkat(sqe, dfd, path, flags);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_renameat(struct io_uring *ring, int olddfd, const char *oldpath,
                              int newdfd, const char *newpath, unsigned flags,
                              uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_renameat(sqe, olddfd, oldpath, newdfd, newpath, flags);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_mkdirat(struct io_uring *ring, int dfd, const char *path,
                             unsigned mode, uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_mkdirat(sqe, dfd, path, mode);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_linkat(struct io_uring *ring, int olddfd, const char *oldpath,
                            int newdfd, const char *newpath, int flags,
                            uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_linkat(sqe, olddfd, oldpath, newdfd, newpath, flags);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_symlinkat(struct io_uring *ring, const char *target,
                               int newdfd, const char *linkpath,
                               uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_symlinkat(sqe, target, newdfd, linkpath);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_fallocate(struct io_uring *ring, int fd, int mode,
                               int64_t offset, int64_t len, uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_fallocate(sqe, fd, mode, (__u64)offset, (__u64)len);
    sqe->user_data = user_data;
    return 0;
}

/* Sockets and pipes. */
int aior_prep_accept(struct io_uring *ring, int fd, struct sockaddr *addr,
                            socklen_t *addrlen, int flags, uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_accept(sqe, fd, addr, addrlen, flags);
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_connect(struct io_uring *ring, int fd,
                             const struct sockaddr *addr, unsigned addrlen,
                             uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_connect(sqe, fd, addr, addrlen);
    sqe->user_data = user_data;
    return 0;
}

/* SENDMSG or RECVMSG over `n` iovecs, with an optional address (`name`). */
int aior_prep_msg(struct io_uring *ring, int op, int fd,
                         struct msghdr *msg, struct iovec *iov, unsigned n,
                         void *name, unsigned namelen, unsigned flags,
                         uint64_t user_data)
{
    AIOR_GET_SQE();
    memset(msg, 0, sizeof(*msg));
    msg->msg_name = name;
    msg->msg_namelen = namelen;
    msg->msg_iov = iov;
    msg->msg_iovlen = n;
    io_uring_prep_rw(op, sqe, fd, msg, 1, 0);
    sqe->msg_flags = flags;
    sqe->user_data = user_data;
    return 0;
}

unsigned aior_msg_namelen(const struct msghdr *msg)
{
    return msg->msg_namelen;
}

int aior_msg_flags(const struct msghdr *msg)
{
    return msg->msg_flags;
}

/* splice(2) of up to nbytes; off -1 means the fd's position (or a pipe).
   sqe_flags may hold IOSQE_IO_LINK to chain the next SQE after this one. */
int aior_prep_splice(struct io_uring *ring, int fd_in, int64_t off_in,
                            int fd_out, int64_t off_out, unsigned nbytes,
                            unsigned splice_flags, unsigned sqe_flags,
                            uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_splice(sqe, fd_in, off_in, fd_out, off_out, nbytes, splice_flags);
    sqe->flags |= sqe_flags;
    sqe->user_data = user_data;
    return 0;
}

int aior_prep_shutdown(struct io_uring *ring, int fd, int how,
                              uint64_t user_data)
{
    AIOR_GET_SQE();
    io_uring_prep_shutdown(sqe, fd, how);
    sqe->user_data = user_data;
    return 0;
}

unsigned aior_sockaddr_storage_size(void)
{
    return sizeof(struct sockaddr_storage);
}

unsigned aior_msghdr_size(void)
{
    return sizeof(struct msghdr);
}

/* Block until at least one CQE is ready, or -ETIME after `ms` milliseconds
   without one (closing a ring drains it). */
int aior_wait(struct io_uring *ring, unsigned ms)
{
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts;
    int ret;

    io_uring_submit(ring);
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long long)(ms % 1000) * 1000000;
    do {
        ret = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
    } while (ret == -EINTR);
    return ret;
}

int aior_ring_fd(struct io_uring *ring)
{
    return ring->ring_fd;
}

/* The fallback backend (no io_uring, or an opcode the kernel lacks) makes
   the same requests as plain system calls: one function per prep function,
   with its arguments less the ring and the tag, returning what the CQE
   would carry (a count, or -errno).  They run in a worker thread (cffi
   releases the GIL), or in the loop's thread when they cannot block.

   A worker's call is cancelled as io_uring cancels a blocked request: by a
   signal to the thread (aior_stop_request).  Its handler sets aior_stop only
   if the signal names the request the thread is making (aior_begin), so a
   late signal never stops the next request; a call interrupted then returns
   -ECANCELED.  A signal that comes just before the call blocks is not seen
   by it: the canceller sends it again until the request is done. */
static __thread volatile sig_atomic_t aior_request;
static __thread volatile sig_atomic_t aior_stop;

static void aior_on_stop_signal(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)context;
    if (info->si_value.sival_int == aior_request)
        aior_stop = 1;
}

/* Install the handler of the cancellation signal (no SA_RESTART). */
int aior_stop_signal_setup(int sig)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = aior_on_stop_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL) < 0 ? -errno : 0;
}

void aior_begin(int request)
{
    aior_stop = 0;
    aior_request = request;
}

void aior_end(void)
{
    aior_request = 0;
}

int aior_stop_request(unsigned long thread, int sig, int request)
{
    union sigval value;

    value.sival_int = request;
    return -pthread_sigqueue((pthread_t)thread, sig, value);
}

#define AIOR_SYSCALL(expr) \
    do { \
        ssize_t r_; \
        do { \
            if (aior_stop) \
                return -ECANCELED; \
            r_ = (expr); \
        } while (r_ < 0 && errno == EINTR && !aior_stop); \
        if (r_ < 0 && errno == EINTR) \
            return -ECANCELED; \
        return r_ < 0 ? -errno : (int)r_; \
    } while (0)

static int aior_is_stream(int fd)
{
    struct stat st;

    return fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

int aior_sync_rw(int op, int fd, void *addr, unsigned len, int64_t off,
                        unsigned op_flags)
{
    switch (op) {
    /* io_uring ignores the offset of a pipe or a socket (no ESPIPE). */
    case IORING_OP_READ:
        AIOR_SYSCALL(off == -1 || aior_is_stream(fd) ? read(fd, addr, len) : pread(fd, addr, len, off));
    case IORING_OP_WRITE:
        AIOR_SYSCALL(off == -1 || aior_is_stream(fd) ? write(fd, addr, len) : pwrite(fd, addr, len, off));
    case IORING_OP_READV:
        AIOR_SYSCALL(off == -1 ? readv(fd, addr, (int)len) : preadv(fd, addr, (int)len, off));
    case IORING_OP_WRITEV:
        AIOR_SYSCALL(off == -1 ? writev(fd, addr, (int)len) : pwritev(fd, addr, (int)len, off));
    case IORING_OP_RECV:
        AIOR_SYSCALL(recv(fd, addr, len, (int)op_flags));
    case IORING_OP_SEND:
        AIOR_SYSCALL(send(fd, addr, len, (int)op_flags));
    case IORING_OP_FSYNC:
        AIOR_SYSCALL((op_flags & IORING_FSYNC_DATASYNC) ? fdatasync(fd) : fsync(fd));
    case AIOR_OP_FTRUNCATE:
        AIOR_SYSCALL(ftruncate(fd, off));
    default:
        return -EINVAL;
    }
}

/* aior_prep_rw_sqe's twin: SQE flags mean nothing to a system call. */
int aior_sync_rw_sqe(int op, int fd, void *addr, unsigned len, int64_t off,
                            unsigned op_flags, unsigned sqe_flags)
{
    (void)sqe_flags;
    return aior_sync_rw(op, fd, addr, len, off, op_flags);
}

int aior_sync_openat(int dfd, const char *path, int flags, unsigned mode)
{
    AIOR_SYSCALL(openat(dfd, path, flags, mode));
}

#ifndef SYS_openat2
#define SYS_openat2 437 /* Linux 5.6, the same number on every architecture */
#endif
#ifndef RESOLVE_CACHED
#define RESOLVE_CACHED 0x20 /* Linux 5.12 */
#endif

struct aior_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

/* An open that never waits, as io_uring's own inline attempt at OPENAT:
   openat2 with RESOLVE_CACHED (EAGAIN unless every path component is in the
   dentry cache) and O_NONBLOCK (a FIFO does not wait for its other end),
   which is cleared afterwards unless the caller asked for it (an O_PATH fd
   has no such flag to clear).  Creating and
   truncating may wait: -EAGAIN without a system call. */
int aior_open_now(int dfd, const char *path, int flags)
{
    struct aior_open_how how;
    int fd;

    if (flags & (O_CREAT | O_TRUNC))
        return -EAGAIN;
#ifdef O_TMPFILE
    if ((flags & O_TMPFILE) == O_TMPFILE)  /* (O_TMPFILE holds O_DIRECTORY's bit) */
        return -EAGAIN;
#endif
    memset(&how, 0, sizeof how);
    /* (openat2 refuses O_PATH with any flag but O_CLOEXEC, O_DIRECTORY and
       O_NOFOLLOW; an O_PATH open opens nothing that could wait.) */
    how.flags = (uint64_t)(unsigned)(flags & O_PATH ? flags : flags | O_NONBLOCK);
    how.resolve = RESOLVE_CACHED;
    fd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof how);
    if (fd < 0)
        return -errno;
    if (flags & (O_NONBLOCK | O_PATH))
        return fd;
    if ((flags & O_ACCMODE) == O_RDONLY) {
        /* A FIFO's read end opens at once without O_NONBLOCK only when a
           writer is there; without one, reads would see an end of file
           that a blocking open never shows.  The caller waits with this
           end, still non-blocking, for a writer (and so a writer it let
           through never finds the FIFO without a reader). */
        struct stat st;

        if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode))
            return -(AIOR_FIFO_HELD + fd);
    }
    if (fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        int err = errno;

        close(fd);
        return -err;
    }
    return fd;
}

#ifdef RWF_NOWAIT
#define AIOR_RWF_NOWAIT RWF_NOWAIT
#else
#define AIOR_RWF_NOWAIT 0x00000008
#endif

/* A read or write at the fd's own position (offset -1) that does not wait:
   what a pipe, a socket or a terminal holds or has room for now, the page
   cache's part of a file.  Returns the count when the call is complete as a
   blocking read or write would leave it (all of n; the end of a file; a short
   count of anything but a regular file, which a blocking read of a pipe or a
   socket returns too), -errno when nothing moved (-EAGAIN, -EOPNOTSUPP: the
   ring's turn), or AIOR_PARTIAL + the count when a regular file's part is
   done and the ring must do the rest (a page not cached, say). */

int64_t aior_rw_now(int write, int fd, char *buf, unsigned n)
{
    struct iovec iov;
    struct stat st;
    ssize_t got, more;

    iov.iov_base = buf;
    iov.iov_len = n;
    got = write ? pwritev2(fd, &iov, 1, -1, AIOR_RWF_NOWAIT) : preadv2(fd, &iov, 1, -1, AIOR_RWF_NOWAIT);
    if (got < 0)
        return -errno;
    if (got == 0 || (size_t)got == n || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return got;
    while ((size_t)got < n) {
        iov.iov_base = buf + got;
        iov.iov_len = n - got;
        more = write ? pwritev2(fd, &iov, 1, -1, AIOR_RWF_NOWAIT) : preadv2(fd, &iov, 1, -1, AIOR_RWF_NOWAIT);
        if (more == 0 && !write)
            return got;  /* the end of the file */
        if (more <= 0)
            return AIOR_PARTIAL + got;
        got += more;
    }
    return got;
}

/* The file system type (statfs's f_type) of an fd, or -errno. */
int64_t aior_fs_type(int fd)
{
    struct statfs sfs;

    if (fstatfs(fd, &sfs) < 0)
        return -errno;
    return (int64_t)(uint64_t)(unsigned long)sfs.f_type;
}

/* The alignment direct I/O (O_DIRECT) needs on fd, from statx's
   STATX_DIOALIGN (Linux 6.1): *mem for the buffer's address, *off for the
   file offset and the length.  0 when reported, -EOPNOTSUPP where the kernel
   or the file system does not say, or -errno. */
int aior_dio_align(int fd, unsigned *mem, unsigned *off)
{
#ifdef STATX_DIOALIGN
    struct statx st;

    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) < 0)
        return -errno;
    if (!(st.stx_mask & STATX_DIOALIGN) || !st.stx_dio_mem_align || !st.stx_dio_offset_align)
        return -EOPNOTSUPP;
    *mem = st.stx_dio_mem_align;
    *off = st.stx_dio_offset_align;
    return 0;
#else
    (void)fd; (void)mem; (void)off;
    return -EOPNOTSUPP;
#endif
}

int aior_sync_close(int fd)
{
    /* No retry: after EINTR the fd is gone all the same on Linux. */
    return close(fd) < 0 ? -errno : 0;
}

int aior_sync_statx(int dfd, const char *path, int flags, unsigned mask,
                           struct statx *buf)
{
    AIOR_SYSCALL(statx(dfd, path, flags, mask, buf));
}

int aior_sync_unlinkat(int dfd, const char *path, int flags)
{
    AIOR_SYSCALL(unlinkat(dfd, path, flags));
}

int aior_sync_renameat(int olddfd, const char *oldpath, int newdfd,
                              const char *newpath, unsigned flags)
{
    AIOR_SYSCALL(renameat2(olddfd, oldpath, newdfd, newpath, flags));
}

int aior_sync_mkdirat(int dfd, const char *path, unsigned mode)
{
    AIOR_SYSCALL(mkdirat(dfd, path, mode));
}

int aior_sync_linkat(int olddfd, const char *oldpath, int newdfd,
                            const char *newpath, int flags)
{
    AIOR_SYSCALL(linkat(olddfd, oldpath, newdfd, newpath, flags));
}

int aior_sync_symlinkat(const char *target, int newdfd, const char *linkpath)
{
    AIOR_SYSCALL(symlinkat(target, newdfd, linkpath));
}

int aior_sync_fallocate(int fd, int mode, int64_t offset, int64_t len)
{
    AIOR_SYSCALL(fallocate(fd, mode, offset, len));
}

int aior_sync_accept(int fd, struct sockaddr *addr, socklen_t *addrlen,
                            int flags)
{
    AIOR_SYSCALL(accept4(fd, addr, addrlen, flags));
}

int aior_sync_connect(int fd, const struct sockaddr *addr, unsigned addrlen)
{
    /* Not retried: connect after EINTR goes on in the background. */
    if (aior_stop)
        return -ECANCELED;
    if (connect(fd, addr, addrlen) < 0)
        return errno == EINTR && aior_stop ? -ECANCELED : -errno;
    return 0;
}

int aior_sync_msg(int op, int fd, struct msghdr *msg, struct iovec *iov,
                         unsigned n, void *name, unsigned namelen, unsigned flags)
{
    memset(msg, 0, sizeof(*msg));
    msg->msg_name = name;
    msg->msg_namelen = namelen;
    msg->msg_iov = iov;
    msg->msg_iovlen = n;
    if (op == IORING_OP_SENDMSG)
        AIOR_SYSCALL(sendmsg(fd, msg, (int)flags));
    AIOR_SYSCALL(recvmsg(fd, msg, (int)flags));
}

int aior_sync_splice(int fd_in, int64_t off_in, int fd_out, int64_t off_out,
                            unsigned nbytes, unsigned splice_flags, unsigned sqe_flags)
{
    loff_t in = off_in, out = off_out;

    (void)sqe_flags;
    AIOR_SYSCALL(splice(fd_in, off_in == -1 ? NULL : &in, fd_out,
                        off_out == -1 ? NULL : &out, nbytes, splice_flags));
}

int aior_sync_shutdown(int fd, int how)
{
    return shutdown(fd, how) < 0 ? -errno : 0;
}

/* Whether a request on fd may block: not when the fd is non-blocking and
   is neither a regular file nor a block device (which ignore O_NONBLOCK). */
int aior_fd_may_block(int fd)
{
    struct stat st;
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || !(fl & O_NONBLOCK))
        return 1;
    if (fstat(fd, &st) < 0)
        return 1;
    return S_ISREG(st.st_mode) || S_ISBLK(st.st_mode);
}
