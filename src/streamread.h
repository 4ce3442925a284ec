/* aioring._core's part of a stream reader's reads: read(n), readinto(buf)
 * and readinto_exactly(buf) of a ring stream, without a Python frame,
 * where they read ahead into the reader's buffer or find their bytes there
 * already; readinto_exactly also where the socket holds a frame's body
 * whole right after its header.
 *
 * StreamRead(public, name, read_ahead, incomplete)  A coroutine method (it
 *  binds as a function does: StreamReader.read, readinto,
 *  readinto_exactly) that stands for public (the Python method of that
 *  name: "read", "readinto" or "readinto_exactly"; any other raises
 *  ValueError).  Its call (reader, arg) returns a coroutine-like object
 *  (StreamReadCall).  Awaited, its first step takes public's path in C
 *  when the reader has no TLS (_tls None) and a ring receiver (_rx), and
 *  arg is what the path takes:
 *   - read: an int n > 0;
 *   - readinto: a non-empty bytearray, or a writable one-dimensional
 *     C-contiguous memoryview of format "B", held (exported) from then
 *     until the call ends, as public holds it; with read_ahead bytes or
 *     more, only when the reader's buffer (_buffer, a bytearray) holds
 *     bytes, or the receive into it is out (_armed), or the peer's last
 *     message was small (the receiver's _into_small, channel.h);
 *   - readinto_exactly: a buffer as readinto's (not held; empty allowed)
 *     of fewer than read_ahead bytes, or one whose bytes the reader's
 *     buffer holds all of already (where public's large path only copies
 *     too).
 *  Then the reader's stored exception (_exception) is raised; while its
 *  buffer holds fewer bytes than the read needs (readinto_exactly all of
 *  buf, the others one), the call awaits what reader._rx.arrival(name,
 *  lacking) answers (None: bytes came at once; `lacking` only for
 *  readinto_exactly, else 0), setting reader._waiter to None once that
 *  ends, however it ends; an EOF (_eof) ends the wait: readinto_exactly
 *  raises incomplete(partial, n) with the buffer's bytes (the buffer
 *  emptied), the others return what is there (b"", 0 when nothing).  The
 *  result leaves the front of the reader's buffer: read's bytes (at most
 *  n; then reader._maybe_resume_transport() when reader._paused, as
 *  asyncio's read does), readinto's count copied into buf (at most its
 *  length), readinto_exactly's n (buf[:] got them; a buf whose size
 *  changed meanwhile gets them as an assignment does).  A readinto or a
 *  readinto_exactly that copies read_ahead bytes or more at once sets the
 *  receiver's _bodies (channel.h: framed reads) and clears _into_small.
 *  A large readinto_exactly that finds the reader's buffer empty right
 *  after a capped header came tries aior_recv_body_now() into buf first:
 *  when that fills buf the result is n at once; bytes that came short of
 *  it go into the reader's buffer, for public's coroutine to take first;
 *  the connection's error is raised.  Any other call goes on in public's
 *  coroutine, to which it delegates send, throw and close; so does a call
 *  with keywords or not two arguments (public's own call).  Thrown into or
 *  closed while it waits, the awaitable it waits on gets the throw or
 *  close first.  As a native coroutine otherwise: reused after its end it
 *  raises RuntimeError, never awaited it warns, thrown into or closed
 *  before its first step it runs nothing.  Its attributes (a __dict__)
 *  take public's name, docstring and __wrapped__.
 *
 * aior_streamread_add(module) -> 0 | -1  Adds StreamRead to module.
 */
#ifndef AIORING_STREAMREAD_H
#define AIORING_STREAMREAD_H

#include <Python.h>

int aior_streamread_add(PyObject *module);

#endif
