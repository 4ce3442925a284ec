/* Which SQEs the kernel has not read yet: the part of the submission queue
 * that is still ours (withdrawable, counted as pending).  Shared by the
 * binding (binding.c) and the core (core.c, flush.c).
 *
 * Without SQPOLL the kernel reads SQEs only inside io_uring_enter, so every
 * SQE from the kernel's head to our tail is unread: prepared and not
 * submitted yet, or left by a submit that stopped short.  With SQPOLL a
 * kernel thread reads every SQE up to the tail liburing published
 * (sq.sqe_head once io_uring_submit flushed) at any time, so only the SQEs
 * after it are ours.
 */
#ifndef AIORING_SQTAIL_H
#define AIORING_SQTAIL_H

#include <liburing.h>

static inline unsigned
aior_sq_unread_head(const struct io_uring *ring)
{
    if (ring->flags & IORING_SETUP_SQPOLL)
        return ring->sq.sqe_head;
    return IO_URING_READ_ONCE(*ring->sq.khead);
}

/* How many SQEs are prepared and unread by the kernel. */
static inline unsigned
aior_sq_unsent(const struct io_uring *ring)
{
    return ring->sq.sqe_tail - aior_sq_unread_head(ring);
}

#endif
