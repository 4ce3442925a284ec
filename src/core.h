/* aioring._core: the per-operation mechanism of an io_uring ring, in C.
 *
 * The seam between the three layers:
 *
 *   binding (aioring._liburing, cffi)  makes the ring, probes it, owns the
 *       struct io_uring and its mappings, prepares the SQEs of the cold
 *       opcodes (aior_prep_*), and keeps the cold-path C helpers.
 *   core (this module)                 owns the in-flight table and what it
 *       holds (buffer pins), prepares the SQEs of reads, writes, sends,
 *       receives and polls itself, submits, harvests CQEs and dispatches
 *       each to its completion target.
 *   policy (aioring._ring, Python)     decides when to submit, holds ops
 *       back (backpressure), redelivers cancellations, survives fork, and
 *       serves every public API.
 *
 * Two types cross the seam.
 *
 * Op: one request, the entry of the in-flight table.  Its fields are read
 * and written by the policy layer as plain attributes (future, prep, args,
 * keep, finish, waiter, sink, key, state, res, poll_mask, polling, readied,
 * unbounded, cancelled) and by the core as C fields.  What the kernel may
 * read or write for the request is held by the op in one of two ways:
 *   - its pin (Op.pin below): a Python buffer taken with PyObject_GetBuffer,
 *     the memory of a read or write the core prepares itself;
 *   - `keep`, for an SQE the binding prepares: a cffi export of the
 *     caller's buffer, or a tuple of objects.
 * The entry holds both until the request's CQE arrived; the core releases
 * the pin and an export (not a tuple) as soon as the request's target has
 * its result (a sink's op: before the sink is called, its memory being the
 * sink's own).  Cancelling never releases them: only the CQE does, or
 * policy once the kernel never saw the request (withdrawn, dropped).
 *
 * Op.prep says who prepares the SQE:
 *   - None: the core, with liburing's inline io_uring_prep_rw.  op.args is
 *     (opcode, fd, start, length, offset, rw_flags[, sqe_flags]): a READ,
 *     WRITE, RECV or SEND (rw_flags: the msg_flags of the last two) of
 *     `length` bytes of the pinned buffer from `start` on (no pin: a NULL
 *     address, and start and length 0, as for FSYNC).
 *   - a prep function of the binding, called as prep(ring, *args, key).
 *
 * A completion target is where a CQE's result goes.  Four kinds exist:
 *   - a sink: any callable taking the result (an int, negative for -errno);
 *     a stream's send queue is one.  Set as op.sink; called once per CQE.
 *   - a receiver (src/channel.h): a stream's receive target, set as op.sink
 *     too; the core appends the received bytes to the reader's buffer,
 *     wakes the reader and re-arms the receive in C, calling policy only
 *     for EOF, errors, closing and pause.
 *   - a step target (src/newfile.h's NewFile), set as op.finish: an
 *     operation of several requests, each started by the core at the CQE
 *     of the one before (op.continued); the last one's result goes to the
 *     op's future as below, or to the hook of the target's owner (a
 *     CopyQueue's, src/treecopy.h).
 *   - a future: any object with done(), set_result(x) and set_exception(e)
 *     (asyncio.Future is one; nothing here assumes asyncio).  Set as
 *     op.future; it gets finish(op, res), or res when finish is None, or the
 *     OSError of a negative res.  When the caller was cancelled and waits
 *     for the CQE (op.waiter, a future too), the waiter gets None instead and
 *     the caller finishes the op itself.
 *
 * Core: one ring's table and harvest.  Every entry point below says what it
 * takes, what it owns and what it returns.
 */
#ifndef AIORING_CORE_H
#define AIORING_CORE_H

#include <Python.h>
#include <stdint.h>

/* The tag bit of an op whose caller awaits its future (see start). */
#define AIOR_AWAITED (1ULL << 62)

/* Op.state */
enum aior_state {
    AIOR_WAITING = 0,   /* held back by backpressure: no SQE, not in the table */
    AIOR_SUBMITTED = 1, /* in the SQ or the kernel: in the in-flight table */
    AIOR_DONE = 2,      /* its CQE arrived (or it was dropped before submission) */
};

typedef struct {
    PyObject_HEAD
    PyObject *future;  /* a future target, or None */
    PyObject *prep;    /* the binding's aior_prep_* for its SQE */
    PyObject *args;    /* prep's arguments between the ring and the key */
    PyObject *keep;    /* what the kernel may touch; None once released */
    PyObject *finish;  /* (op, res >= 0) -> result, or None: the result is res */
    PyObject *waiter;  /* set once the awaiting caller was cancelled */
    PyObject *sink;    /* a sink target, or None */
    unsigned long long key; /* its user_data while in the table; never reused */
    int state;         /* enum aior_state */
    int res;           /* the CQE's result once DONE */
    int poll_mask;     /* for -EAGAIN on a non-blocking fd: poll, then retry */
    char polling;      /* its SQE is (or was last) the poll of that retry */
    char readied;      /* (threads backend) it waited for readiness */
    char unbounded;    /* may wait for a peer indefinitely: no backpressure */
    char cancelled;    /* its cancellation was asked for */
    char continued;    /* its target started it again for a later step of
                          the same operation (see NewFile, treecopy.h):
                          never withdrawn */
    char pinned;       /* view holds a buffer for the kernel */
    unsigned int limit;/* a read the core prepares moves at most this many
                          bytes, less than its args' length (0: no limit);
                          set by its target for one start (a Receiver's
                          capped receive, channel.h), which clears it */
    Py_buffer view;    /* the pin (see Op.pin) */
} AiorOp;

extern PyTypeObject AiorOp_Type;

struct io_uring;

typedef struct {
    PyObject_HEAD
    struct io_uring *ring; /* borrowed from `owner`; NULL: no ring (threads
                              backend) or detached (closed, forked) */
    PyObject *owner;       /* the binding's struct io_uring cdata: kept alive */
    PyObject *ops;         /* the in-flight table: dict key -> Op */
    PyObject *cancel_entry;/* the table entry of every ASYNC_CANCEL: skipped */
    PyObject *release;     /* ffi.release: lets go of an export */
    PyObject *os_error;    /* res -> the OSError of a negative result */
    PyObject *retry;       /* policy for a CQE the core does not finish itself
                              (see Core.complete_batch) */
    PyObject *strand;      /* policy for CQEs an exception left unhandled */
    PyObject *invalid_state; /* asyncio.InvalidStateError (set_result on a
                                cancelled future) */
    PyObject *flush_handle;/* policy's: the flush scheduled for this loop
                              iteration (its handle), or None */
    PyObject *deferred;    /* policy's: the callbacks of that flush (a list) */
    Py_ssize_t unbounded;  /* unbounded ops in the table */
    Py_ssize_t limit;      /* policy's: launch() starts ops while fewer than
                              this (less the unbounded) are in the table; 0:
                              launch() declines every call */
    PyObject *waiting;     /* policy's: the ops it holds back (a deque, or
                              None); launch() declines while it is not empty */
    char preps;            /* policy's: launch() takes ops a prep function
                              prepares too (none of their opcodes emulated) */
    int eager_left;        /* policy's: starts its caller's task may still
                              submit at once this iteration (launch()
                              declines while it is not 0) */
    char muted;            /* the eventfd's notification is off (mute) */
    /* The flush (src/flush.h): */
    PyObject *policy;      /* the ring whose flush the core runs (bind) */
    PyObject *loop_ref;    /* a weak reference to its loop (None: unbound) */
    PyObject *ready;       /* the loop's ready deque, or None: call_soon */
    PyObject *handle;      /* the FlushHandle appended there (NULL: none yet) */
    PyObject *flush_meth;  /* the bound core.flush, for call_soon (NULL) */
    PyObject *stranded;    /* policy's stranded CQEs (a list), or None */
    PyObject *eager_task;  /* policy's: the task of the iteration's eager run */
    PyObject *task_of;     /* policy's: task_of(loop), the loop's running task
                              (asyncio.current_task), or None */
    char solo;             /* policy's: the last flush had at most one SQE */
    char closed;           /* policy closed the ring: nothing is scheduled */
    Py_ssize_t sq_tagged;  /* SQEs started with tag bits since the SQ was
                              last empty after a submit (0: none in the SQ) */
    unsigned long long next_key; /* keys are never reused */
    long long submit_calls, wakeups, completions;
} AiorCore;

extern PyTypeObject AiorCore_Type;
#define AiorCore_Check(obj) (Py_TYPE(obj) == &AiorCore_Type)

/* Entry points of Op (Python names in brackets):
 *
 * [Op(future, prep, args, keep, finish, poll_mask)]  A new entry, WAITING.
 *
 * [pin(buffer, writable=False) -> int]  Hold `buffer`'s C-contiguous memory
 *  (writable: for the kernel to write into) for the op's next request,
 *  releasing an earlier pin first; returns its size in bytes.  Raises what
 *  the buffer protocol raises, as os.write and socket.recv_into do:
 *  TypeError for a non-buffer (a str), BufferError for a non-contiguous
 *  buffer or a read-only one asked to be writable; RuntimeError while the
 *  op is SUBMITTED.  A pinned bytearray cannot be resized.
 *
 * [unpin()]  Release the pin now (policy, for a request the kernel never
 *  saw or whose CQE it finishes itself); RuntimeError while SUBMITTED.
 *
 * [pinned], [address]  The pinned object (None) and its address (0): for
 *  the threads backend, which makes the same call as a system call.
 *
 * Entry points of Core (methods; Python names in brackets):
 *
 * [Core(owner, address, ops, cancel_entry, release, os_error,
 *  retry, strand, invalid_state)]  address: the struct io_uring the binding made (0 for
 *  none), as an int; owner keeps it alive.  ops: the table (a dict the core
 *  fills and empties; policy reads it and, on cold paths, edits it).
 *  retry(op, res) -> None when policy took the CQE over (it requeued the op
 *  to poll or resubmit it), else the result to finish the op with.  Called
 *  for every negative result and every poll's result.
 *  strand(key, res, op, rest): an exception escaped while the CQE (key, res)
 *  was dispatched to `op` (None if none); `rest` is the list of (key, res)
 *  of every CQE harvested but not dispatched; policy keeps them for later.
 *
 * [start(op, tag=0) -> int]  Prepare op's SQE (see Op.prep), or a one-shot
 *  poll for op.poll_mask on the fd op.args[1] when op.polling (the poll
 *  that retries an -EAGAIN on a non-blocking fd), under a new key (with the bits of `tag` set:
 *  policy marks the ops whose callers await them, to find them among the
 *  unsubmitted SQEs) (submitting the SQ first if
 *  it is full), and put op in the table: state SUBMITTED, op.key set, counted
 *  if unbounded.  The table holds op, and through it its pin and op.keep,
 *  until the CQE.  Returns the key, or 0 when the SQ stays full (nothing
 *  changed).  Raises what prep raises (the core's own: TypeError or
 *  OverflowError for args that are not ints of the kinds above, ValueError
 *  for a start and length outside the pin), before anything is queued.
 *
 * [start_chain(ops, tag, link) -> bool]  start(op, tag) for each op of the
 *  list `ops`, in order, their SQEs consecutive in the SQ, each but the last
 *  flagged `link` (IOSQE_IO_LINK, with IOSQE_CQE_SKIP_SUCCESS for a chain
 *  whose steps but the one ending it complete silently).  False, nothing
 *  changed, when the SQ has no room for all of them (it is not submitted to
 *  make room: a submit would cut the chain).  What prep raises leaves the
 *  steps queued before it as a chain of their own.
 *
 * [sq_tagged]  Ops started with tag bits since the SQ was last found empty
 *  after a submit: 0 when none can be among the unsubmitted SQEs (policy
 *  then skips looking for them).
 *
 * [launch(loop, prep, args, keep, finish, poll_mask, writable) -> Op | None]
 *  Policy's start() of an awaited request that is not unbounded, in its
 *  common case: nothing owed (see fileops.h), this loop iteration's flush
 *  scheduled already (flush_handle not None) and the call not one of an
 *  eager run (aior_eager_run 0: none goes on, or another task's), nothing waiting, fewer than `limit` bounded ops in the
 *  table, and room in the SQ.  Then a new Op(None, prep, args, keep,
 *  finish, poll_mask) is started with the AWAITED tag, gets
 *  loop.create_future() as its future and is returned; with prep None it
 *  pins `keep` instead of holding it (writable: for the kernel to write
 *  into; see Op.prep).  In every other case None, nothing changed: policy's
 *  own start() serves the call, as for an op with a prep function unless
 *  `preps`.  Raises what pin() and start() raise, before anything is queued.
 *
 * [limit], [waiting], [eager_left], [preps]  Policy's state that launch()
 *  reads.
 *
 * [AWAITED]  (module constant) The tag bit of the ops whose callers await
 *  them; launch() starts its ops with it.
 *
 * [withdrawable(tag) -> sequence]  The ops in the table whose SQEs the
 *  kernel has not read yet, started with every bit of `tag`, and whose
 *  future is done (callers cancelled before the SQE left: policy withdraws
 *  them), oldest first.  Empty with no ring, or with an SQ the kernel polls.
 *
 * [cancel(key) -> bool]  Prepare an ASYNC_CANCEL of the request `key`, its
 *  own entry in the table being cancel_entry.  False when the SQ stays full.
 *
 * [next_key]  The next key start() or cancel() gives; policy takes keys
 *  from it too (emulated requests, the threads backend).
 *
 * [sq_pending]  SQEs prepared and not submitted yet.
 *
 * [cq_due]  Whether completions may wait to be harvested by a submit():
 *  muted (see mute), CQEs in the CQ, or completions the kernel posts only
 *  at the next enter (task work, an overflow).  No system call.
 *
 * [submit() -> int]  Submit what the SQ holds, with the eventfd's
 *  notification off, harvest what completed meanwhile and dispatch it, then
 *  anything else ready.  Returns io_uring_submit's result (count or -errno);
 *  raises what a target raised, after handing the undispatched CQEs to
 *  strand.
 *
 * [mute() -> None]  Turn the eventfd's notification off until the next
 *  submit(), which turns it on again and then harvests (with a full fence
 *  between): what completes meanwhile is harvested there without a wakeup.
 *  Policy must call submit() after it, whatever happens.
 *
 * [reap(efd) -> int]  The eventfd's reader: drain efd, then harvest and
 *  dispatch every ready CQE.  Returns their number; OSError if efd fails.
 *
 * [complete_batch(pairs) -> None]  Dispatch CQEs given as a list of
 *  (key, res): results made elsewhere (worker threads, stranded CQEs).
 *
 * [harvest() -> list]  Closing: every ready CQE as (key, res), taken from
 *  the CQ without dispatching it.
 *
 * [detach() -> None]  The ring is about to be unmapped (closed, or a forked
 *  child's copy): the core never touches it again.
 *
 * [flush_handle], [deferred]  Policy's flush of the loop iteration: its
 *  handle while one is scheduled (None otherwise), and the list of callbacks
 *  it calls before it submits (ring.defer).  Policy sets both; the core only
 *  reads them, so that a stream's targets skip the call into policy when the
 *  flush is scheduled already (aior_flush_scheduled, aior_defer).
 */

/* The core's C entry points for the channel's targets (src/channel.c):
 *
 * aior_start(core, op, tag, &key) -> 1 | 0 | -1  What start() does, from C:
 *  prepare op's SQE under a new key and put op in the table (see start).
 *  1: started, *key set; 0: the SQ stays full (nothing changed); -1 with an
 *  exception set (the ring is detached, or what prep raises).
 *
 * aior_unpin(op)  Release op's pin, if it holds one (see Op.pin).
 *
 * aior_future_done(fut) -> 1 | 0 | -1  fut.done(), as a C truth value.
 *
 * aior_call_method1(obj, name, arg) -> new reference | NULL  obj.name(arg).
 *
 * aior_call_known(&method, args, nargs) -> new reference | NULL
 *  args[0].<name>(*args[1:nargs]) for an AiorMethod of that name (static,
 *  made with AIOR_METHOD(name)), without the lookup when args[0]'s type is
 *  the one the method remembers: the first immutable type (its dict fixed)
 *  whose `name` is a method descriptor, found once; an object of it with
 *  an instance dict that holds anything, or of any other type, is looked
 *  up as PyObject_VectorcallMethod looks it up.
 */
typedef struct {
    const char *name;
    PyObject *str;      /* name, interned at the first call */
    PyTypeObject *type; /* the type remembered (NULL: none yet) */
    PyObject *func;     /* its method (borrowed from the type's dict) */
} AiorMethod;
#define AIOR_METHOD(name) {(name), NULL, NULL, NULL}
PyObject *aior_call_known(AiorMethod *method, PyObject *const *args, size_t nargs);
int aior_start(AiorCore *core, AiorOp *op, unsigned long long tag, unsigned long long *key);
void aior_unpin(AiorOp *op);
int aior_future_done(PyObject *fut);

/* aior_flush_scheduled(core) -> 1 | 0  Whether policy's flush is scheduled
 *  for this iteration (core->flush_handle is not None): what it submits
 *  then needs no call into policy.
 *
 * aior_defer(core, callback) -> 1 | 0 | -1  What ring.defer(callback) does
 *  when the flush is scheduled already: callback appended to core->deferred
 *  (1).  0 (nothing done) when it is not, or deferred is not a list: the
 *  caller asks policy.  -1 with an exception set. */
int aior_flush_scheduled(AiorCore *core);

/* aior_eager_run(core, loop) -> 1 | 0 | -1  Whether a start by the task
 *  running on loop now is one of the iteration's eager run, which policy
 *  submits at once (see Ring.restart and _launch): eager_left not 0 and
 *  task_of(loop) is eager_task (1 also when there is no task_of or loop
 *  NULL: policy decides).  0 otherwise: another task's start is only
 *  queued for the flush, as when no eager run goes on.  -1 with an
 *  exception set. */
int aior_eager_run(AiorCore *core, PyObject *loop);

/* For the flush (src/flush.c):
 *
 * aior_submit(core, &submitted) -> 0 | -1  submit(): io_uring_submit's
 *  result in *submitted; -1 with an exception set (detached, or what a
 *  target raised).
 *
 * aior_cq_due(core) -> 1 | 0  cq_due.
 *
 * aior_withdrawable(core, tag) -> new reference | NULL  withdrawable(tag).
 *
 * aior_set_field(&field, value)  A field of an object replaced by a new
 *  reference to value (the old one dropped last: its destructor may run
 *  code that reads the object). */
int aior_submit(AiorCore *core, int *submitted);
void aior_set_field(PyObject **field, PyObject *value);
int aior_cq_due(AiorCore *core);
PyObject *aior_withdrawable(AiorCore *core, unsigned long long mask);
int aior_defer(AiorCore *core, PyObject *callback);
PyObject *aior_call_method1(PyObject *obj, PyObject *name, PyObject *arg);

#endif
