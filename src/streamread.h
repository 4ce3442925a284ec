/* aioring._core's part of a stream reader's reads: readinto_exactly of a
 * small buffer (the framed reader's hot path), or of one whose bytes are all
 * buffered, or of a body that the socket holds whole right after its
 * header, without a Python frame.
 *
 * ReadExactly(public, read_ahead, incomplete)  A coroutine method (it binds
 *  as a function does: StreamReader.readinto_exactly) whose call (reader,
 *  buf) returns a coroutine-like object (ReadExactlyCall).  Awaited, its
 *  first step takes public's (the Python method it stands for) small path
 *  when buf is a bytearray, or a writable one-dimensional C-contiguous
 *  memoryview of format "B", and the reader has no TLS (_tls None) and a
 *  ring receiver (_rx), and buf has fewer than read_ahead bytes or the
 *  reader's buffer (_buffer, a bytearray) holds all of them already (where
 *  public's large path only copies too): the reader's stored exception
 *  (_exception) is raised; while its buffer holds fewer bytes than buf, an
 *  EOF (_eof) raises incomplete(partial, n) with the buffer's bytes (the
 *  buffer emptied), and otherwise the call awaits what
 *  reader._rx.arrival("readinto_exactly", lacking) answers (None: bytes
 *  came at once), setting reader._waiter to None once that ends, however it
 *  ends; then buf[:] gets the buffer's first n bytes, which leave the
 *  buffer, and the result is n.  A read of read_ahead bytes or more that
 *  finds them all buffered sets the receiver's _bodies (channel.h: framed
 *  reads).  One that finds the reader's buffer empty right after a capped
 *  header came tries aior_recv_body_now() into buf first: when that fills
 *  buf the result is n at once; bytes that came short of it go into the
 *  reader's buffer, for public's coroutine to take first; the connection's
 *  error is raised.  Any other call goes on in public's coroutine, to which it
 *  delegates send, throw and close; so does a call with keywords or not two
 *  arguments (public's own call).  Thrown into or closed while it waits,
 *  the awaitable it waits on gets the throw or close first.  As a native
 *  coroutine otherwise: reused after its end it raises RuntimeError, never
 *  awaited it warns, thrown into or closed before its first step it runs
 *  nothing.  Its attributes (a __dict__) take public's name, docstring and
 *  __wrapped__.
 *
 * aior_streamread_add(module) -> 0 | -1  Adds ReadExactly to module.
 */
#ifndef AIORING_STREAMREAD_H
#define AIORING_STREAMREAD_H

#include <Python.h>

int aior_streamread_add(PyObject *module);

#endif
