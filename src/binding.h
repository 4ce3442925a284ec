/* aioring._liburing, the binding: its C helpers over liburing.
 *
 * Where each part is written, once:
 *
 *   binding.h      (this file) what C needs before the declarations: the
 *                  system and liburing headers, and the constants a newer
 *                  kernel or liburing adds (#ifndef).  cffi's generated
 *                  module starts with #include "binding.h" (set_source), and
 *                  so does binding.c.
 *   binding_api.h  every aior_* prototype, with what it takes and returns:
 *                  a plain declaration list, no preprocessor lines, because
 *                  cffi's cdef parses it too (_build_cffi.py reads the file).
 *                  Included only from here.
 *   binding.c      the helpers' bodies, compiled beside cffi's module
 *                  (set_source's sources=).
 *   binding.cdef   cffi-only text (it is not C): the parts of liburing's and
 *                  the kernel's types that Python sees (`...;` leaves the rest
 *                  to the compiler), the liburing functions called directly,
 *                  and the constants (`#define X ...`, values from the
 *                  headers above).
 *
 * The helpers have external linkage so that the two translation units share
 * them; the module is built with -fvisibility=hidden, so none of them is
 * exported from the shared object.
 */
#ifndef AIORING_BINDING_H
#define AIORING_BINDING_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, splice, renameat2, statx, preadv2 */
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h> /* renameat2 */
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <liburing.h>

/* Opcodes newer than liburing 2.3's enum (the probe says whether the kernel
   has them). */
#define AIOR_OP_FTRUNCATE 55 /* Linux 6.9 */

/* Flags a newer kernel added; the kernel refuses them with EINVAL where it
   lacks them, and the ring is then set up without. */
#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1U << 7)
#endif
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif
#ifndef IORING_SETUP_TASKRUN_FLAG
#define IORING_SETUP_TASKRUN_FLAG (1U << 9)
#endif
#ifndef IORING_SETUP_SINGLE_ISSUER
#define IORING_SETUP_SINGLE_ISSUER (1U << 12)
#endif
#ifndef IORING_SETUP_DEFER_TASKRUN
#define IORING_SETUP_DEFER_TASKRUN (1U << 13)
#endif
#ifndef IORING_SQ_TASKRUN
#define IORING_SQ_TASKRUN (1U << 2)
#endif
#ifndef IOSQE_CQE_SKIP_SUCCESS
#define IOSQE_CQE_SKIP_SUCCESS (1U << 6)
#endif
#ifndef IORING_FEAT_CQE_SKIP
#define IORING_FEAT_CQE_SKIP (1U << 11)
#endif

/* Added to a count by aior_rw_now: the part done so far, the ring to do the
   rest. */
#define AIOR_PARTIAL ((int64_t)1 << 40)
/* aior_open_now's results from -AIOR_FIFO_HELD down: a FIFO's read end held
   (errno values stay above it). */
#define AIOR_FIFO_HELD 4096

#include "binding_api.h"

#endif /* AIORING_BINDING_H */
