/* aioring._core's read of a whole file from the page cache, at once, and the
 * fstat an open needs (see core.h for the core's seam).  Policy stays in Python (aioring._open's
 * UnbuiltReader): when a file is read whole this way, the yield to the
 * loop, and what follows when the page cache cannot serve it.
 *
 * read_whole_now(fd, n, offset) -> bytes | None
 *  fd and offset ints (offset >= 0), n an int of 2 or more (bytes of
 *  length 0 and 1 are shared objects): a new bytes object of n bytes that
 *  the kernel fills with fd's bytes at offset, never zeroed first, when the
 *  page cache holds them all and the file ends exactly there (a
 *  non-blocking preadv2, RWF_NOWAIT, into it and a spare buffer past it,
 *  then a one-byte probe past its end if that was needed); None when not
 *  (a page not cached, a file longer or shorter than that, any error: the
 *  caller's slower read says it again).  The GIL is released for each
 *  system call, as os.preadv releases it.
 *
 * fstat_brief(fd) -> (st_mode, st_size, st_dev, st_ino, st_blksize)
 *  The fields of os.fstat(fd) that opening a file needs, as os.fstat gives
 *  them, without the rest of an os.stat_result (its three float times
 *  cost more to make than the system call); os.fstat's OSError.
 *
 * aior_wholefile_add(module) -> 0 | -1  Adds the functions to module.
 */
#ifndef AIORING_WHOLEFILE_H
#define AIORING_WHOLEFILE_H

#include <Python.h>

int aior_wholefile_add(PyObject *module);

#endif
