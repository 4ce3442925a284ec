/* aioring._core's file methods that need no coroutine frame: AsyncFileIO's
 * read(size) and seek(offset) (aioring.open's files opened with
 * buffering=0), in C where no other call has the file.
 *
 * FileMethod(public, name, raw_type, ops, limit)  A coroutine method (it
 *  binds as a function does) that stands for public, the Python method
 *  `name` ("read" or "seek"; any other raises ValueError), whose coroutine
 *  does every call that C does not.  raw_type is the raw files' class
 *  (RingFileIO; a subclass's files are public's): the call reads and sets
 *  its slots busy, queue, shared_offset, pos, _fd and _waiters through
 *  their member descriptors' offsets (ValueError when one is not a slot),
 *  and FileIO's closed getter.  Its call (file, arg) returns a
 *  coroutine-like object (FileMethodCall).  Awaited, its first step takes
 *  the call in C when file's raw file (file._raw) is free: of raw_type, not
 *  closed, no call has it (busy False), nothing queued (queue empty) and no
 *  offset shared with the caller's fd (shared_offset False):
 *   - read, arg an int size of 1 to limit - 1, the file readable: the call
 *     takes the file (busy = True), awaits ops.read(_fd, size, pos) (ops the
 *     module aioring._ops, looked up at each call as Python code does; its
 *     read is aioring.read: the page cache's try, then the ring), adds the length of its bytes to
 *     pos, and gives the file up however it ends: with the bytes, an
 *     exception, a throw or a close (a close, or a finalization while it
 *     waits, closes the read first, which lets the kernel's read go).  A
 *     read that raises leaves the position as it was.  Giving up is busy =
 *     False when no other call waits (_waiters empty: release's own answer
 *     then), else raw.release().
 *   - seek, arg an int offset of 0 to limit: pace() (fileops.h), and pos =
 *     offset, the result; when pace() answers True, the step is a bare
 *     yield to the task first (as asyncio.sleep(0)'s), and the next step
 *     sets the position if the file is still free (else public's).
 *  The window and begin_call/end_call are left alone: these calls neither
 *  use the window nor move a shared offset, and every call that uses them
 *  begins with begin_call.  Any other call goes on in public's coroutine,
 *  to which it delegates send, throw and close; so does a call with
 *  keywords or not two arguments (public's own call: seek's whence given,
 *  say).  As a native coroutine otherwise: reused after its end it raises
 *  RuntimeError, never awaited it warns, thrown into or closed before its
 *  first step (or at seek's yield) it runs nothing.  Its attributes (a
 *  __dict__) take public's name, docstring and __wrapped__.
 *
 * aior_filemethod_add(module) -> 0 | -1  Adds FileMethod to module.
 */
#ifndef AIORING_FILEMETHOD_H
#define AIORING_FILEMETHOD_H

#include <Python.h>

int aior_filemethod_add(PyObject *module);

#endif
