/* aioring._core's steps of a small file's copy that need no waiting (see
 * core.h for the core's seam).  Policy stays in Python (aioring.shutil's
 * _copyfile): which files take this path, the destination's create and the
 * write of the data (on the ring: both may wait for the disk), the checks
 * and errors shutil gives, and everything that is not the common case.
 * These functions serve the common case and hand every other one back
 * untouched.
 *
 * copy_source(path, size_max) -> (fd, data, st_mode, st_size, st_atime_ns, st_mtime_ns) | None
 *  path a bytes object (an encoded path, no NUL), size_max an int.  Opens
 *  path for reading at once (openat2 with RESOLVE_CACHED and O_NONBLOCK:
 *  no path component read from the disk, never a wait for a FIFO's
 *  writer); for a regular file of at most size_max bytes, returns the new
 *  fd (non-inheritable, and the caller's to close), the file's bytes and
 *  the fields of its fstat that copy2 uses.  The bytes come from a
 *  non-blocking preadv2 (RWF_NOWAIT), one byte longer than the file to see
 *  its end; the fd then stays O_NONBLOCK (it is read no more).  data is
 *  None when the page cache did not hold them all or the size changed:
 *  the fd is made blocking (the ring's reads of an O_NONBLOCK file answer
 *  EAGAIN instead of waiting), and the caller reads the file another way,
 *  with the stat taken before that try, which may have moved the access
 *  time.  None, with
 *  nothing left open, when the open cannot be done at once, the file is
 *  not a regular one or is larger, or on any error (the caller's own open
 *  says it again).  The GIL is released for the system calls, as os.open
 *  and os.preadv release it.
 *
 * copy_finish(src_fd, dst_fd, atime_ns, mtime_ns, mode, meta) -> bool
 *  The end of a copy whose data is written, as copy2 (meta 2) or copy
 *  (meta 1) ends it, or copyfile (meta 0): times set (futimens, meta 2),
 *  the permission bits `mode` given when the file's (which the umask may
 *  have narrowed) differ (fstat, then fchmod; meta 1 or 2), then both fds
 *  closed: True.  False, nothing done and both fds still open, when src_fd
 *  has extended attributes to copy (flistxattr found some, or failed other
 *  than as shutil ignores: ENOTSUP, ENODATA, EINVAL) and meta is 2: the
 *  caller's own steps do it all.  On an error both fds are closed and the
 *  OSError raised is the one os.utime, os.fstat, os.chmod or os.close
 *  raises for the same call on the fd.
 *
 * aior_treecopy_add(module) -> 0 | -1  Adds the functions to module.
 */
#ifndef AIORING_TREECOPY_H
#define AIORING_TREECOPY_H

#include <Python.h>

int aior_treecopy_add(PyObject *module);

#endif
