/* aioring._core's copies of small files (see core.h for the core's seam):
 * the steps of one that need no waiting, and a tree's many copies made in
 * the core.  Policy stays in Python (aioring.shutil): which files take this
 * path, the checks and errors shutil gives, and everything that is not the
 * common case.  These serve the common case and hand every other one back
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
 * CopyQueue(core, prep_openat, meta, size_max, limit, hand_back)
 *  A tree's file copies as copy2 (meta 2), copy (1) or copyfile (0) make
 *  them, each one op of `core` from the source's read to the copy's end,
 *  with no Python between its steps.  prep_openat is the binding's prep
 *  function of an OPENAT.  A job is a tuple (slot, source as given,
 *  destination name, source name), the names str, bytes or path-like.
 *  For each, in turn from each row, while fewer than `limit` are in flight:
 *   - shutil.copyfile's audit event is raised;
 *   - the source is opened, checked (a regular file of at most size_max
 *     bytes, without extended attributes for meta 2), stat'ed and read at
 *     once, as copy_source does;
 *   - an op whose finish is a NewFile (newfile.h) creates the destination
 *     (O_EXCL, with the source's permission bits for meta 1 and 2) and
 *     writes the bytes; it starts as Ring.start would start it (or waits
 *     among policy's held-back ops), and leaves with the iteration's flush;
 *   - when it ended with the data written, the copy is finished as
 *     copy_finish finishes it (times, mode, both fds closed).
 *  Any other outcome hands the job back, once: hand_back(job, audited,
 *  atime_ns), for the caller's own steps to copy it and raise what they
 *  meet (audited: the event was raised; atime_ns: the source's access time
 *  before this read of it, which may have moved it, or None).  A job that
 *  ends neither way is one whose copy's op the ring dropped (it closed).
 *  [add(jobs, src_dir, dst_dir)]  A row of jobs (an iterable), of files in
 *   the directory src_dir to be copied into dst_dir; its copies start now,
 *   as room allows.  Both directories are opened once (O_PATH) and each
 *   file opened and created by its name relative to them (by its whole
 *   path where they cannot be opened).  RuntimeError once closed or
 *   cancelled.
 *  [close(waiter)]  No more rows: waiter.set_result(None) once nothing is
 *   in flight or queued (at once if so); waiter.cancel() instead when a
 *   copy's op was dropped unfinished.  Called again, the new waiter
 *   replaces the old one.
 *  [cancel()]  The queued jobs are dropped (neither copied nor handed
 *   back); those in flight end as above.
 *  [in_flight], [copied], [handed_back]  Copies started and not ended,
 *   copies made, jobs handed back.
 *
 * aior_treecopy_add(module) -> 0 | -1  Adds the functions and CopyQueue to
 *  module.
 */
#ifndef AIORING_TREECOPY_H
#define AIORING_TREECOPY_H

#include <Python.h>

int aior_treecopy_add(PyObject *module);

#endif
