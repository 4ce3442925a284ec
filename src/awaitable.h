/* What the core's C awaitables (CacheFirstCall, StreamReadCall,
 * FileMethodCall) share of a native coroutine's protocol: one
 * implementation of each piece.
 *
 * AIOR_AWAITABLE_HEAD  The fields every such awaitable starts with: its
 *  object head and public_fn, the Python coroutine function or method it
 *  stands for (held from its creation to its deallocation).  Then, for
 *  each type:
 *   - aior_awaitable_send, _iternext and _await: send(value), next() and
 *     __await__ from its am_send;
 *   - aior_awaitable_getset: __name__ and __qualname__, public_fn's (as a
 *     native coroutine's are its function's).
 * aior_awaitable_finalize(self, waiting, close)  A finalization as a native
 *  coroutine's, any exception set meanwhile kept: one waiting is closed
 *  (close(self), whose error goes to sys.unraisablehook), any other was
 *  never awaited and warns (aior_warn_unawaited).
 *
 * aior_step_result(status, result) -> object | NULL  A step's answer
 *  (PySendResult and its result, which it takes) as a method's: the
 *  yielded value; NULL with StopIteration(value) set for a return; NULL
 *  with the step's exception for an error.
 * aior_reused() -> NULL  RuntimeError, as a native coroutine's send after
 *  its end.
 * aior_forward(target, method, args, is_throw, &inner) -> object | NULL
 *  target.<method>(*args) (target a new reference, which it takes) for an
 *  awaitable that delegates its throw and close: the answer.  When a throw
 *  answered by yielding, the awaitable goes on delegating: *inner gets
 *  target; otherwise target is released and *inner is left alone.
 * aior_inner_call(inner, method, args, &result) -> PySendResult
 *  inner.<method>(*args) (throw or close) of the awaitable an awaitable
 *  waits on, answered as a step: PYGEN_NEXT with what it yielded (or
 *  close's None), PYGEN_RETURN with StopIteration's value (it ended),
 *  PYGEN_ERROR with its exception set.
 * aior_warn_unawaited(self, public)  The RuntimeWarning of a coroutine of
 *  public (its __qualname__) never awaited, any exception set meanwhile
 *  kept; a failing warning goes to sys.unraisablehook for self.
 */
#ifndef AIORING_AWAITABLE_H
#define AIORING_AWAITABLE_H

#include <Python.h>

PyObject *aior_step_result(PySendResult status, PyObject *result);
PyObject *aior_reused(void);
PyObject *aior_forward(PyObject *target, PyObject *method, PyObject *args, int is_throw, PyObject **inner);
PySendResult aior_inner_call(PyObject *inner, PyObject *method, PyObject *args, PyObject **result);
#define AIOR_AWAITABLE_HEAD PyObject_HEAD PyObject *public_fn;

typedef struct {
    AIOR_AWAITABLE_HEAD
} AiorAwaitable;

PyObject *aior_awaitable_send(PyObject *self, PyObject *arg);
PyObject *aior_awaitable_iternext(PyObject *self);
PyObject *aior_awaitable_await(PyObject *self);
extern PyGetSetDef aior_awaitable_getset[];
void aior_awaitable_finalize(PyObject *self, int waiting, PyObject *(*close)(PyObject *, PyObject *));
void aior_warn_unawaited(PyObject *self, PyObject *public_fn);

#endif
