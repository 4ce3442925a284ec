/* aioring._core's channel targets: the receive target of a socket or pipe
 * stream, in C (see core.h for the seam of the core itself).
 *
 * Receiver is a completion target of its own kind, beside a future and a
 * sink (core.h): an op whose sink is a Receiver (or an instance of a
 * subclass) has its CQE handed to aior_recv_complete() without a call into
 * Python on the hot path.  The Python subclass (aioring._channel._Receiver)
 * is the policy: pause and resume, close, the reads that do not wait, the
 * receive into the caller's buffer, EOF and errors.
 *
 * What a Receiver holds and how it is shared with its policy:
 *   - a chunk of AIOR_RECV_CHUNK bytes, malloc'd (not zeroed: untouched
 *     pages cost no memory) the first time its buffer is asked for, freed
 *     with the object.  The Receiver exposes it through the buffer protocol
 *     (writable): policy pins the Receiver itself as the receive op's
 *     buffer, and receives into it directly (recv_into) after an idle
 *     socket's poll.  Until then no chunk exists: an idle connection holds
 *     no buffer.
 *   - attributes policy reads and writes as plain attributes, and the C
 *     side reads as C fields:
 *       _reader      the StreamReader it feeds (None: none yet).  Its
 *                    `_buffer` (a bytearray) gets the bytes; its `_waiter`
 *                    (None, or any object with done() and set_result())
 *                    is woken, and unset first, as asyncio's reader
 *                    unsets it.  Setting _reader also takes the reader's
 *                    `_buffer` and `_loop` once, for the hot paths: an
 *                    asyncio StreamReader binds neither again.
 *       _ended       the reader's `_exception` or `_eof` may be set: its
 *                    set_exception() and feed_eof() set this (and setting
 *                    _reader, when the reader has either), so that a read
 *                    that finds it clear need not look.
 *       _armed       a receive into the chunk is in the kernel (its op
 *                    SUBMITTED); cleared by every completion.
 *       _closing     closing: every completion goes to policy.
 *       _paused      pause_reading(): every completion goes to policy.
 *       _core        the Core that starts the op again when the reader
 *                    waits (None: policy always does; the threads
 *                    backend, an emulated opcode).
 *       _flush       called (no arguments) after a receive into the
 *                    caller's buffer was started, so that the SQE it
 *                    prepared is submitted (the ring's flush); with a
 *                    _core, the core schedules its flush itself instead
 *                    (aior_schedule_flush, flush.h).
 *       _bodies      the last read was a body's (16 KiB or more) into the
 *                    caller's buffer: set by policy, the core's
 *                    readinto_exactly and _receive_into; taken by the
 *                    next arrival() (see framed reads below).
 *       _eager       a completion starts the receive again at once,
 *                    before the reader's waiter is woken, for a reader
 *                    that reads all the time (the TLS layer, as asyncio's
 *                    TLS transport reads); otherwise the reader's next wait
 *                    starts it (arrival()).
 *       _into_small  the last readinto() that received straight into the
 *                    caller's (large) buffer got fewer than 16 KiB: the
 *                    peer sends small messages, so the next readinto() of
 *                    a large buffer reads ahead into the chunk and copies,
 *                    as a small one does, until one copies 16 KiB or more
 *                    at once (bulk data again).  Set and cleared by
 *                    policy's readinto and the core's (streamread.h).
 *   - the receive into the caller's own buffer (readinto and
 *     readinto_exactly of a large buffer), a second op whose sink is the
 *     bound _into_done: started by _receive_into(), re-armed in C into the
 *     rest of the buffer while an exact receive is short, its waiter woken
 *     in C once it ends.  Its fields (policy reads them, C writes them):
 *       _into_op     the Op of these receives (None: policy's path only).
 *                    Its args, as policy made it, name the opcode, fd and
 *                    offset; C sets the part of the buffer each time.
 *       _waitall     the rw_flags of an exact receive (MSG_WAITALL for a
 *                    socket's RECV, 0 for a pipe's READ).
 *       _into_out    a receive into the caller's buffer is out (in the SQ,
 *                    the kernel, or policy's queue for a poll and retry).
 *       _into_got    the bytes at the front of the caller's buffer: those
 *                    that were there when it started (copied from the
 *                    reader's buffer) and those received since.
 *       _into_waiter what is woken when it ends (policy replaces it with a
 *                    fresh one when its caller was cancelled), or None.
 *       _into_res    once it ended: the last result (> 0: it stopped with
 *                    the buffer full, or after one receive when not exact,
 *                    or short when the SQ stayed full; 0: EOF; < 0: -errno).
 *   - framed reads, a small header and then a body received into the
 *     caller's buffer: the header's wait (arrival(func_name, want)) after
 *     such a body read receives just the `want` bytes it lacks (the
 *     receive into the chunk capped through the limit of its op, policy's
 *     _op (core.h), or pull()'s read), so that the body stays in the
 *     socket instead of being read ahead into the reader's buffer and
 *     copied out of it twice.  After a capped receive that came back
 *     full, the body's receive into the caller's buffer that follows is
 *     tried at once first (recv(2) with MSG_DONTWAIT): no ring
 *     receive, no wake-up, no copy.
 *     Only a socket's, and only with a core (the threads backend reads
 *     ahead as before: a receive there is a thread's hop).
 *     The caller's buffer is pinned by the op while the kernel has it and
 *     referenced by the receiver (not exported) between two receives; both
 *     end with the receive.  At most one of the two ops is out at a time
 *     (policy's rule: a read waits for the other's bytes first).
 */
#ifndef AIORING_CHANNEL_H
#define AIORING_CHANNEL_H

#include "core.h"

/* What one receive into the chunk takes at most (asyncio's socket
   transport receives 256 KiB at a time). */
#define AIOR_RECV_CHUNK (256 * 1024)
/* _pull_skip of a receiver whose reads that do not wait fail: never again. */
#define AIOR_RING_ONLY (1ULL << 62)

typedef struct {
    PyObject_HEAD
    PyObject *reader;      /* _reader */
    PyObject *buffer;      /* its _buffer when a bytearray, else NULL */
    PyObject *loop;        /* its _loop, or NULL */
    char ended;            /* _ended */
    PyObject *core;        /* _core: an AiorCore, or None */
    PyObject *flush;       /* _flush: callable, or None */
    char armed;            /* _armed */
    char closing;          /* _closing */
    char paused;           /* _paused */
    char *chunk;           /* NULL until its buffer is first asked for */
    PyObject *into_op;     /* _into_op: an AiorOp, or None */
    PyObject *into_buf;    /* the caller's buffer while _into_out, else NULL */
    PyObject *into_waiter; /* the waiter woken when it ends, else NULL */
    Py_ssize_t into_got;   /* _into_got */
    Py_ssize_t into_end;   /* the caller's buffer's length */
    int into_res;          /* _into_res */
    int waitall;           /* _waitall */
    char into_out;         /* _into_out */
    char into_exact;       /* receives until the buffer is full */
    PyObject *scratch;     /* _scratch: the buffer pull() reads into, or NULL */
    unsigned long long pull_skip;    /* _pull_skip */
    unsigned long long pull_backoff; /* _pull_backoff */
    int fd;                /* _fd */
    int rwf_nowait;        /* _rwf_nowait: preadv2's flag for a pipe's pull() (RWF_NOWAIT) */
    char is_socket;        /* _is_socket */
    char bodies;           /* the last read was a receive into the caller's buffer */
    char into_small;       /* _into_small */
    char eager;            /* _eager */
    char rest_due;         /* a capped read came back full: more is likely there */
    Py_ssize_t cap;        /* the most the next read into the chunk takes (0: all it can) */
} AiorRecv;

extern PyTypeObject AiorRecv_Type;

/* Sender: the hot path of a stream's send queue, the base of the Python
 * policy class (aioring._channel._SendQueue), whose fields it shares as
 * plain attributes (C fields on this side):
 *       _pending       a collections.deque of the buffers to send, in order
 *                      (None until the first write, which policy makes)
 *       _pending_size  their bytes in all
 *       _sending       the ring op of the send in flight, or None
 *       _write_exc     the error that failed the writer, or None
 *       _pooled        policy's copies of large buffers (falsy: none)
 *       _drain_waiters drain()'s futures (falsy: none)
 *       _eof_wanted, _closing, _soon (a send is deferred to the flush),
 *       _direct (sends are tried without waiting), _is_socket, _fd,
 *       _sent_total
 *       _rwf_nowait    the pwritev2 flag of a pipe's send that does not
 *                      wait (RWF_NOWAIT)
 *       _defer         the ring's defer(callback)
 *       _send_soon     what _defer is given: the bound _send_now
 *       _core          the ring's Core (None: none): with its flush
 *                      scheduled already, write() appends _send_soon to
 *                      its deferred callbacks itself (aior_defer) instead
 *                      of calling _defer
 */
#define AIOR_JOIN_MAX (16 * 1024)
/* Buffers other than bytes this large are copied by policy, into memory it
   reuses; smaller ones by write() itself, as bytes. */
#define AIOR_POOL_MIN (256 * 1024)
/* The flush sends at most this many pending buffers in one vectored send
   itself; more go to policy. */
#define AIOR_SEND_IOV 64

typedef struct {
    PyObject_HEAD
    PyObject *pending, *sending, *write_exc, *pooled, *drain_waiters, *defer, *send_soon, *core;
    Py_ssize_t pending_size;
    long long sent_total;
    int fd;
    int rwf_nowait;
    char eof_wanted, closing, soon, direct, is_socket;
} AiorSender;

extern PyTypeObject AiorSender_Type;

#define AiorRecv_Check(obj) PyObject_TypeCheck((obj), &AiorRecv_Type)

/* Entry points (Python names in brackets):
 *
 * [Receiver()]  A new target: no reader, no chunk, nothing armed, no
 *  core.  Subclassed by policy (with __slots__ of its own).
 *
 * [receiver(res)]  The sink's call: the result of a receive into the chunk
 *  that the core did not dispatch itself (policy's withdraw of an op the
 *  kernel never saw).  Clears _armed; as aior_recv_complete() without the
 *  re-arm.
 *
 * [_deliver(res) -> None]  Append the chunk's first res bytes (0 < res <=
 *  AIOR_RECV_CHUNK) to the reader's buffer and wake its waiter: policy's
 *  own receive into the chunk (after a poll), or a completion it took over.
 *  Raises ValueError for a res out of range, TypeError when the reader's
 *  buffer is not a bytearray, BufferError when it cannot be resized (a view
 *  of it is held), and what the waiter's done() and set_result() raise.
 *
 * [has_chunk]  Whether the chunk exists.
 *
 * [pull_due() -> bool]  Whether the reader's next wait tries pull() first:
 *  False (and one less to skip) while _pull_skip is above 0.
 *
 * [pull() -> bool]  Feed the reader what _fd holds right now, without
 *  waiting: one recv(2) with MSG_DONTWAIT (a socket) or preadv2(2) with
 *  _rwf_nowait (RWF_NOWAIT; a pipe) into _scratch (a writable buffer shared by the
 *  thread's channels: its bytes are appended to the reader's buffer before
 *  this returns).  True when that fed the reader bytes (_pull_backoff reset
 *  to 1) or EOF (the reader's feed_eof() called).  False when closing, with
 *  no reader, or nothing there (EAGAIN: _pull_skip = _pull_backoff, which
 *  doubles up to 64; EINTR: as it is); the fd refusing such reads
 *  (EOPNOTSUPP, EINVAL, ENOSYS, ENOTSOCK) or _scratch not a writable buffer
 *  sets _pull_skip to AIOR_RING_ONLY (the ring only from then on).  Any
 *  other error goes to policy, _pull_failed(errno), which raises it.  Raises
 *  what appending to the reader's buffer raises (see _deliver).
 *
 * [arrival(func_name, want=0) -> awaitable | None]  What a read of the
 *  reader that wants more than its buffer holds awaits (the reader then
 *  sets its _waiter to None): a future of the reader's loop, made its
 *  _waiter, with the receive into the buffer armed unless _armed: first,
 *  policy's op (_op) started again by the core as _rearm() does, where it
 *  can; else, or None when a pull() (made first while pull_due() says so)
 *  brought bytes or EOF at once, or, when pace() says the loop is due a
 *  turn first, the reader's _turn_then_wait() coroutine; else policy's
 *  arm().  `want` > 0: the read is an
 *  exact one that lacks `want` bytes; after a body read into the caller's
 *  buffer, the pull() or receive it starts takes no more (see framed reads
 *  above).  Raises asyncio's RuntimeError naming
 *  func_name when the reader has a _waiter already, and what arm(),
 *  pull() and the loop's create_future() raise (the _waiter unset again).
 *
 * [_rearm(op) -> bool]  Policy's arm() of op, its receive into the chunk
 *  (an op the core prepares, whose CQE is in), in its common case: this
 *  loop iteration's flush scheduled already and the call not one of an
 *  eager run (aior_eager_run; see launch in core.h).  Then op is started again (the
 *  chunk pinned, the SQE prepared, the op in the table under a new key),
 *  _armed set, and True: the flush submits it.  arrival() does the same
 *  before it calls arm().
 *  False, with nothing changed, in every other case (policy's restart()
 *  serves it): no _core or its ring detached, closing, paused, armed
 *  already, no reader, op not such an op or not done, the SQ full.
 *
 * [_receive_into(buffer, start, exact, waiter) -> bool]  Start a receive
 *  into the writable `buffer` (C-contiguous) from `start` on: the buffer
 *  pinned by _into_op, its SQE prepared (MSG_WAITALL, _waitall, when
 *  exact), the op in the table, _into_out set, _into_got = start, _flush
 *  called.  `waiter` (done() and set_result()) is woken when the receive
 *  ends: after one CQE, or when exact once the buffer is full, at EOF, on
 *  an error, a cancellation, closing or pause.  An exact receive of a
 *  socket from start > 0 on (the rest of a frame whose start came already),
 *  and any receive right after a capped read that came back full (a
 *  header), first takes what the socket holds with one recv(2) that does
 *  not wait: when that fills the buffer (or finds EOF, _into_res 0; or any
 *  bytes, when not exact) the receive ends there, the waiter woken before
 *  this returns, with no ring op; an error there is raised (as pull()'s);
 *  else the
 *  ring receives the rest (should the SQ stay full, the receive ends short
 *  with what came, _into_res > 0).  False (nothing changed)
 *  when policy has to receive: no _core or its ring detached, no
 *  _into_op, a receive out, closing, paused, or the SQ stays full.
 *  Raises ValueError for a start outside the buffer, and what the buffer
 *  protocol raises (see Op.pin), before anything is queued.
 *
 * [_into_done(res) -> None]  _into_op's sink: the result of one receive
 *  into the caller's buffer (the core's dispatch after the op's pin was
 *  released; policy's withdraw, cancel or close with -ECANCELED).  Adds a
 *  positive res to _into_got; when exact, not full, neither closing,
 *  paused nor cancelled (op.cancelled), receives into the rest at once (the
 *  buffer pinned again, the op back in the table, _flush called).
 *  Otherwise the receive ends: _into_res = res, _into_out cleared, the
 *  buffer let go, the waiter woken if it is not done.  Raises what the
 *  waiter's done() and set_result() raise (the receive has ended then).
 *
 * aior_recv_complete(core, op, rx, res) -> 0 | -1 (C, called by the core's
 *  dispatch for an op whose sink is rx, after the op's pin was released
 *  and its state set DONE).  Clears _armed.  On res > 0 when neither
 *  closing nor paused, with a reader: appends the bytes to the reader's
 *  buffer and wakes the reader's waiter if it is not done.  The op is
 *  started again here (first) only when _eager (and the core can: _core
 *  set and its ring attached, op a receive the core prepares; the chunk
 *  pinned again, the SQE prepared and the op put in the table under a new
 *  key, _armed set); otherwise the reader's next wait does it
 *  (arrival()), after what its task sent meanwhile.  Either way the loop's
 *  flush is scheduled after the waiter was woken.  Anything else (EOF,
 *  an error, closing, paused, no reader) goes to policy: the subclass's
 *  _received(res).  -1 with an exception set when one escaped (the core
 *  strands the CQEs after it).
 *
 * [Sender()]  A send queue with nothing pending (fields None, 0, False;
 *  _direct True).  Subclassed by policy (with __slots__ of its own).
 *
 * [write(data) -> None]  asyncio's transport.write: bytes of a writer that
 *  may write are queued (empty ones: nothing), and so is a copy, as bytes,
 *  of another C-contiguous buffer below AIOR_POOL_MIN (one of AIOR_JOIN_MAX
 *  or more, when nothing is pending or in flight, is first sent at once
 *  without waiting, and only what the kernel did not take is copied and
 *  queued); the first write of
 *  the iteration defers _send_soon to the flush (unless a send is in
 *  flight, whose completion sends the rest).  Anything else (not a buffer,
 *  a larger or non-contiguous one, the first write, after write_eof() or
 *  close() or a failed send) goes to policy's _write(data), which raises
 *  what asyncio's write raises.
 *
 * [_send_now() -> None]  The flush's send (and drain()'s): the pending
 *  bytes, when nothing is in flight (not closing, no error, direct sends
 *  on), are sent at once without waiting: few (at most AIOR_JOIN_MAX, no
 *  pooled copies) joined on the C stack, with send(2) (MSG_DONTWAIT and
 *  MSG_NOSIGNAL; a pipe's pwritev2 with RWF_NOWAIT), more (up to
 *  AIOR_SEND_IOV buffers) as they are, with sendmsg(2) (a pipe's
 *  pwritev2).  All taken: the queue is emptied, and policy's _after_send()
 *  called only when drain() waits or an EOF is wanted (with pooled copies:
 *  policy's _sent(n) and _after_send(), which take the copies back).
 *  Otherwise policy goes on, in order: send() (not direct, or more
 *  buffers; or the system call refused: EINTR, EOPNOTSUPP,
 *  EINVAL, ENOSYS, ENOTSOCK), send(False) after the part taken was
 *  accounted by _sent(n) (the kernel is full: EAGAIN or a partial send),
 *  or _sent(-errno) and _after_send() (the connection's error).  The joined
 *  writes then wait in the queue as one bytes object.
 *
 * aior_channel_add_types(module) -> 0 | -1  Adds Receiver, Sender,
 *  RECV_CHUNK, JOIN_MAX and POOL_MIN to the module (its init).
 */
int aior_recv_complete(AiorCore *core, AiorOp *op, AiorRecv *rx, int res);
/* A body's receive at once, for the core's readinto_exactly (streamread.h):
   right after a capped read came back full (see framed reads above), one
   recv(2) that does not wait into buf[:n].  The bytes taken (0: EOF), -1
   when none were (not due, nothing there), or -2 with the connection's
   error raised (policy's _pull_failed, as pull()'s). */
Py_ssize_t aior_recv_body_now(AiorRecv *rx, char *buf, Py_ssize_t n);
/* arrival(func_name, want) (above) for C callers: a new reference, or NULL. */
PyObject *aior_recv_arrival(AiorRecv *rx, PyObject *func_name, Py_ssize_t want);

/* The buffer of rx's reader when that reader is `reader` (borrowed), else
   NULL; no exception either way. */
PyObject *aior_recv_buffer_of(AiorRecv *rx, PyObject *reader);
int aior_channel_add_types(PyObject *module);

#endif
