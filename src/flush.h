/* aioring._core's flush: what a ring submits once per loop iteration, in C
 * (see core.h for the seam of the core itself).
 *
 * Every operation started in a loop iteration is prepared in the SQ and
 * leaves with the iteration's flush: one submit for all of them (and, for
 * the first of the iteration, an eager submit that policy decides on).  The
 * flush is a callback the loop runs after the tasks that started them.
 * Policy (aioring._ringbase) decides what it does; the core does it here,
 * calling into Python only for the uncommon cases below:
 *
 *   - the eager run of the iteration ends (eager_task None, eager_left 0);
 *   - the deferred callbacks run (a stream's sends of the iteration), with
 *     the eventfd muted, so that a peer's receive they complete on this
 *     ring is harvested by the submit below instead of waking the loop;
 *   - the flush is no longer scheduled (flush_handle None);
 *   - the SQ is submitted, and what completed meanwhile is dispatched; with
 *     nothing to submit, a submit still harvests completions that wait
 *     (cq_due);
 *   - `solo` records whether this flush had at most one SQE (policy's
 *     eager runs serve a lone task);
 *   - the flush is scheduled again when the kernel stopped short of the
 *     SQ, could not take it now (EAGAIN, EBUSY, EINTR), or when ops wait
 *     behind backpressure after the completions.
 *
 * A closed ring's flush does nothing but end the eager run.  After the
 * deferred callbacks, the rest goes to policy's `_flush_tail` where the
 * core has no ring (the threads backend, or one detached), CQEs were
 * stranded by an exception, or ops wait behind backpressure; and the
 * submit goes to policy's `_submit_queued` when callers were cancelled
 * before their SQE left (withdrawable), which it withdraws.
 *
 * An exception escaping the flush leaves it unscheduled (flush_handle
 * None), scheduled again only if it is not an Exception (a
 * KeyboardInterrupt, raised at any line by the default SIGINT handler) or
 * completions wait, and propagates to the loop.  The callbacks not run yet
 * stay deferred, for the next flush.
 *
 * Scheduling.  The flush runs from the loop's ready queue.  On asyncio's
 * own loops, where policy hands the core the loop's ready deque (bind),
 * the core appends a FlushHandle of its own there: an object with what the
 * loop reads of a handle (_cancelled, _run(), cancel(), and _callback for
 * debug reports), reused from one iteration to the next while it is not
 * cancelled.  Its _run() reports an exception as asyncio.Handle's does,
 * through the loop's call_exception_handler.  In debug mode, and on every
 * other loop, loop.call_soon(core.flush) schedules it.
 *
 * Entry points of Core (Python names in brackets):
 *
 * [bind(policy, loop_ref, ready, stranded)]  Once, by policy, for its loop:
 *  `policy` the ring whose _flush_tail and _submit_queued the core
 *  calls, `loop_ref` a weak reference to the loop, `ready` the loop's ready
 *  deque (None: call_soon), `stranded` policy's list of stranded CQEs (the
 *  core reads whether it is empty).
 *
 * [schedule_flush(loop=None) -> None]  Schedule the flush, unless it is
 *  scheduled already or the core is closed.  loop None: the bound loop,
 *  nothing done when it is gone or closed.  Raises what call_soon raises.
 *
 * [flush() -> None]  Run the flush (see above).
 *
 * [eager_task], [solo], [closed]  Policy's state: the task of the
 *  iteration's eager run, whether the last flush had at most one SQE, and
 *  whether policy closed the ring (nothing is scheduled then).
 *
 * aior_schedule_flush(core, loop) -> 0 | -1  schedule_flush, from C (loop
 *  NULL: the bound one).
 *
 * aior_set_result(core, fut, value) -> 0 | -1  fut.set_result(value), with
 *  fut's done callbacks appended to the ready deque of core's loop as
 *  ReadyCall handles instead of through loop.call_soon (asyncio's Handle,
 *  made and run in Python), when core is bound with a deque (see above),
 *  the loop is not in debug mode and fut is an asyncio C Future not done
 *  yet.  Each callback then runs as call_soon would run it: in its
 *  context, in the order they were added, with its exception reported to
 *  the loop's handler.  Otherwise (core NULL too) fut.set_result(value)
 *  itself.  -1 with an exception set: set_result's (InvalidStateError for a
 *  future that is done).
 *
 * ReadyCall  The handle of one such callback: what asyncio's _run_once
 *  reads of a Handle (_cancelled, _run(), and _callback, _args for
 *  reports), cancel() and cancelled().
 *
 * aior_flush_add_types(module) -> 0 | -1  Adds FlushHandle and ReadyCall.
 */
#ifndef AIORING_FLUSH_H
#define AIORING_FLUSH_H

#include "core.h"

PyObject *aior_core_bind(AiorCore *core, PyObject *const *args, Py_ssize_t nargs);
PyObject *aior_core_schedule_flush(AiorCore *core, PyObject *const *args, Py_ssize_t nargs);
PyObject *aior_core_flush(AiorCore *core, PyObject *unused);
int aior_schedule_flush(AiorCore *core, PyObject *loop);
int aior_set_result(AiorCore *core, PyObject *fut, PyObject *value);
int aior_flush_add_types(PyObject *module);

#endif
