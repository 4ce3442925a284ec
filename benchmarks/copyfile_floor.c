/* copyfile_floor SRC DST: shutil.copyfile(SRC, DST) of a large file made
 * the way aioring.shutil.copyfile makes it on io_uring, in C: the floor of
 * that design.
 *
 * benchmarks/tree_ops.py builds it (cc, liburing) and times it beside the
 * Python variants.  One lane: a pipe of CHUNK bytes, and chains of up to
 * CHAIN chunks, each chunk spliced from the source into the pipe and out of
 * it into the destination PIECE bytes at a time, as linked requests whose
 * successes post no completion.  Each chain begins with a READ of one byte
 * from a signal pipe and ends by splicing one byte of the source into it,
 * so the next chain, handed to the kernel while one runs, goes on in the
 * kernel as soon as the one before ended.  The part of the file after its
 * last whole chunk is spliced a request at a time.  Prints nothing; exits 1
 * with a message on an error (a short splice among them).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* (aioring.shutil._kernel's CHAIN_CHUNK, CHAIN_PIECE, SPLICE_CHAIN) */
enum { CHUNK = 1 << 20, PIECE = 1 << 17, CHAIN = 14, ENTRIES = 512 };

static void
fail(const char *what, int err)
{
    fprintf(stderr, "copyfile_floor: %s: %s\n", what, strerror(err));
    exit(1);
}

static struct io_uring_sqe *
next_sqe(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (sqe == NULL)
        fail("the SQ is full", EBUSY);
    return sqe;
}

/* A prepared SQE's flags and tag (set after the prep, which clears them). */
static void
mark(struct io_uring_sqe *sqe, unsigned flags, __u64 tag)
{
    sqe->flags |= flags;
    io_uring_sqe_set_data64(sqe, tag);
}

/* The chain of chunks [pos, end) queued: its steps tagged 0, linked, and
   silent when they succeed; the last one's completion (a byte into the
   signal pipe) is tagged `end`. */
static void
chain(struct io_uring *ring, int src, int dst, int pipe_r, int pipe_w, int sig_r, int sig_w,
      long long pos, long long end)
{
    static char byte;
    const unsigned link = IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
    struct io_uring_sqe *sqe = next_sqe(ring);

    io_uring_prep_read(sqe, sig_r, &byte, 1, (__u64)-1);
    mark(sqe, link, 0);
    for (long long at = pos; at < end; at += CHUNK) {
        sqe = next_sqe(ring);
        io_uring_prep_splice(sqe, src, at, pipe_w, -1, CHUNK, SPLICE_F_MOVE);
        mark(sqe, link, 0);
        for (long long off = 0; off < CHUNK; off += PIECE) {
            sqe = next_sqe(ring);
            io_uring_prep_splice(sqe, pipe_r, -1, dst, at + off, PIECE, SPLICE_F_MOVE);
            mark(sqe, link, 0);
        }
    }
    sqe = next_sqe(ring);
    io_uring_prep_splice(sqe, src, pos, sig_w, -1, 1, 0);
    mark(sqe, 0, (__u64)end);
}

int
main(int argc, char **argv)
{
    struct io_uring ring;
    struct stat st;
    int p[2], sig[2];

    if (argc != 3) {
        fprintf(stderr, "usage: copyfile_floor SRC DST\n");
        return 1;
    }
    int src = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (src < 0 || fstat(src, &st) < 0)
        fail(argv[1], errno);
    int dst = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (dst < 0)
        fail(argv[2], errno);
    if (pipe2(p, O_CLOEXEC) < 0 || pipe2(sig, O_CLOEXEC) < 0 || fcntl(p[1], F_SETPIPE_SZ, CHUNK) < 0 ||
        write(sig[1], "", 1) != 1)
        fail("pipe", errno);
    int ret = io_uring_queue_init(ENTRIES, &ring, IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN);
    if (ret < 0)
        ret = io_uring_queue_init(ENTRIES, &ring, 0);
    if (ret < 0)
        fail("io_uring_queue_init", -ret);
    long long whole = st.st_size / CHUNK * CHUNK, queued = 0;
    int in_flight = 0;
    while (queued < whole || in_flight > 0) {
        /* one chain running and the next waiting for it */
        while (queued < whole && in_flight < 2) {
            long long end = queued + (long long)CHAIN * CHUNK < whole ? queued + (long long)CHAIN * CHUNK : whole;
            chain(&ring, src, dst, p[0], p[1], sig[0], sig[1], queued, end);
            queued = end;
            in_flight++;
        }
        ret = io_uring_submit_and_wait(&ring, 1);
        if (ret < 0)
            fail("io_uring_submit_and_wait", -ret);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            if (cqe->res != 1 || cqe->user_data == 0)
                fail("a chain ended short", cqe->res < 0 ? -cqe->res : EIO);
            in_flight--;
        }
        io_uring_cq_advance(&ring, seen);
    }
    for (long long at = whole; at < st.st_size;) {
        loff_t from = at;
        ssize_t got = splice(src, &from, p[1], NULL, (size_t)(st.st_size - at), SPLICE_F_MOVE);
        if (got <= 0)
            fail("splice", got < 0 ? errno : EIO);
        for (ssize_t put = 0; put < got;) {
            loff_t to = at + put;
            ssize_t n = splice(p[0], NULL, dst, &to, (size_t)(got - put), SPLICE_F_MOVE);
            if (n <= 0)
                fail("splice", n < 0 ? errno : EIO);
            put += n;
        }
        at += got;
    }
    if (close(dst) < 0)
        fail(argv[2], errno);
    io_uring_queue_exit(&ring);
    return 0;
}
