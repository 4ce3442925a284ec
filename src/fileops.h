/* aioring._core's page-cache reads: a read at an offset served at once by
 * a non-blocking preadv2 (RWF_NOWAIT), in C (see core.h for the core's
 * seam).  Policy stays in Python (aioring._ops): which fds are tried, the
 * backoff after a miss, the yield to the loop, and the ring's read of
 * whatever the page cache did not hold.  These functions only take the
 * decision that policy already took for a known fd, and hand every other
 * case back to it untouched.
 *
 * fileops_setup(plain, owed, unyielded, yield_every, size_max, cache_missed, pace_due,
 *               fd_cache, cold_reads)
 *  Policy's state, held for the life of the process:
 *    plain        the set of fds whose reads at an offset are tried;
 *    owed         the dict of tasks owing a cancellation (non-empty: every
 *                 call goes to policy, which delivers it first);
 *    unyielded    the list whose item 0 counts calls served without a yield;
 *    yield_every  at item 0 == yield_every - 1 the next call yields: policy's;
 *    size_max     read_cached serves sizes below this only;
 *    cache_missed called with the fd when a try finds the pages not cached;
 *    pace_due     called by pace() for the call that makes yield_every;
 *    fd_cache     the dict of each fd's state, a list: item 0 the reads
 *                 still to go straight to the ring after misses, item 2
 *                 the O_DIRECT alignment (0: not O_DIRECT);
 *    cold_reads   the list whose item 0 counts reads of uncached pages in
 *                 flight.
 *  Until it is called, both functions below hand every call to policy.
 *
 * Both take the fast path only for an int fd in `plain`, an int offset of
 * 0 or more, nothing owed, and no yield due; they hold the buffer (a
 * Py_buffer export) while the GIL is released for the system call, as
 * os.preadv does.  A call they served is counted in unyielded[0].  One
 * call in 64 of them first looks the fd's flags up again: an fd now
 * O_DIRECT (its number reused by another file) leaves `plain` and
 * `fd_cache`, and the call is policy's.
 *
 * readinto_cached(fd, buffer, offset) -> int  For a bytearray or a
 *  writable C-contiguous memoryview (anything else, or a released view:
 *  policy's, whose checks raise the error):
 *    n >= 0   served: n bytes read, all of the buffer or 0 at end of file;
 *    -1       not tried, or the try failed (policy tries it itself);
 *    -2 - k   tried: the first k bytes (0: none, and cache_missed(fd) was
 *             called) are in the buffer, the rest is the ring's.
 *
 * read_cached(fd, size, offset) -> bytes | bytearray | None  size an int
 *  below size_max, read into a new bytes object:
 *    bytes      served: what was read, all of it or up to end of file (a
 *               second try follows a short first one, as policy does);
 *    bytearray  tried: its bytes (none, after a miss or an error) are the
 *               start of the result, the rest is the ring's;
 *    Ellipsis   not tried, and policy's read straight from the ring (its
 *               fd's recent tries missed, other reads of uncached pages are
 *               in flight): an int fd whose state has reads left to go so
 *               (counted down here) and is not O_DIRECT, an int size of 2
 *               to size_max - 1, an int offset of 0 or more, nothing owed;
 *    None       not tried: policy's.
 *
 * CacheFirst(kind, public, rest, served[, cold, raised])  A coroutine
 *  function (aioring.read and readinto) whose call returns a coroutine-like
 *  object (CacheFirstCall) without a Python frame; awaited, its first step
 *  is the try of its kind (TRY_READINTO: readinto_cached's, TRY_READ:
 *  read_cached's) on the call's (fd, buffer or size, offset), made also
 *  when a yield is due.  A hit (an int of 0 or more; bytes) is its result
 *  at once, or, when a yield is due (then not counted in unyielded[0]),
 *  served(result)'s to count and yield; any other answer goes to rest(fd,
 *  x, offset, answer).  It delegates send, throw and close to the Python
 *  coroutine it goes on in.  With cold, a TRY_READ's Ellipsis goes to
 *  cold(fd, size, offset) instead, and so does a TRY_READINTO's -1 (not
 *  tried) for an int fd whose fd_cache state is O_DIRECT, at an int offset
 *  of 0 or more, nothing owed (cold(fd, buffer, offset)): cold starts the
 *  ring's read, and its result (completed at once: bytes, or readinto's
 *  count) is the call's, or it answers (ring, op, out, future) and the call
 *  waits on the future itself, counted in cold_reads[0] meanwhile; the
 *  future's count n gives out (or its first n bytes; readinto: n itself).  An exception the future raises or that is thrown in goes to
 *  raised(ring, op, fd, size, offset, out, exc), the coroutine it goes on
 *  in (which counts the read out); closed or finalized while it waits, it
 *  calls ring.abandon(op) and counts the read out.  cold_call(fd, size,
 *  offset) is a call whose first step is cold's (its try made already).  A call
 *  with keywords or not 2 or 3 arguments is public's own call (its binding,
 *  its errors).  Otherwise as public's coroutine: reused after the end it
 *  raises RuntimeError, never awaited it warns, thrown into or closed before
 *  its first step it runs nothing.  Its attributes (a __dict__) take
 *  public's name, docstring and __wrapped__.
 *
 * pace() -> bool  One call served without a yield, counted in unyielded[0]:
 *  False; when that makes yield_every (or the counter is not an int),
 *  pace_due()'s answer instead, policy's bookkeeping of the yield (the call
 *  not counted here).  RuntimeError before fileops_setup.
 *
 * aior_fileops_add(module) -> 0 | -1  Adds the functions, CacheFirst and the
 *  TRY_ kinds to module.
 */
#ifndef AIORING_FILEOPS_H
#define AIORING_FILEOPS_H

#include <Python.h>

int aior_fileops_add(PyObject *module);

/* aior_owed() -> 1 | 0  Whether a task owes a cancellation (policy's owed
 *  dict is not empty), or fileops_setup was not called yet: 1 tells the
 *  core's fast paths to leave the call to policy. */
int aior_owed(void);

/* aior_pace() -> bool | NULL  pace() (above) for C callers: a new reference. */
PyObject *aior_pace(void);

#endif
