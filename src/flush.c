/* aioring._core's flush: one submit per loop iteration, in C (see flush.h). */
#define PY_SSIZE_T_CLEAN
#include "flush.h"
#include "sqtail.h"

#include <errno.h>
#include <liburing.h>
#include <structmember.h>

static PyObject *str_flush, *str_flush_tail, *str_submit_queued, *str_append,
    *str_call_soon, *str_is_closed, *str_debug, *str_call_exception_handler, *str_message,
    *str_exception, *str_handle, *str_callbacks, *str_remove_done_callback;
static PyTypeObject *future_type; /* asyncio's C Future (_asyncio.Future) */

/* ---------------------------------------------------------- FlushHandle */

typedef struct {
    PyObject_HEAD
    AiorCore *core;   /* whose flush it runs */
    char cancelled;   /* asyncio's loop skips it (Handle._cancelled) */
} AiorFlushHandle;

static int
handle_traverse(AiorFlushHandle *self, visitproc visit, void *arg)
{
    Py_VISIT(self->core);
    return 0;
}

static int
handle_clear(AiorFlushHandle *self)
{
    Py_CLEAR(self->core);
    return 0;
}

static void
handle_dealloc(AiorFlushHandle *self)
{
    PyObject_GC_UnTrack(self);
    handle_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
handle_repr(AiorFlushHandle *self)
{
    return PyUnicode_FromFormat("<aioring flush%s>", self->cancelled ? " cancelled" : "");
}

/* What asyncio.Handle._run does with the exception set by a callback that
   `handle` ran: SystemExit and KeyboardInterrupt propagate (NULL), any other
   goes to the handler of core's loop (its result), or propagates when the
   loop is gone. */
static PyObject *
report(AiorCore *core, PyObject *handle)
{
    if (PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
        return NULL;
    PyObject *type, *value, *tb, *r;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *loop = NULL, *context = NULL, *message = NULL;
    if (core != NULL && PyWeakref_Check(core->loop_ref) && (loop = PyObject_CallNoArgs(core->loop_ref)) == NULL)
        PyErr_Clear();
    if (loop == NULL || loop == Py_None) {
        /* (no loop to report to: the error is raised to whoever ran it) */
        Py_XDECREF(loop);
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    message = PyUnicode_FromFormat("Exception in callback %R", handle);
    context = PyDict_New();
    if (message == NULL || context == NULL || PyDict_SetItem(context, str_message, message) < 0 ||
        PyDict_SetItem(context, str_exception, value) < 0 || PyDict_SetItem(context, str_handle, handle) < 0)
        r = NULL;
    else
        r = PyObject_CallMethodOneArg(loop, str_call_exception_handler, context);
    Py_XDECREF(message);
    Py_XDECREF(context);
    Py_DECREF(loop);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return r;
}

static PyObject *
handle_run(AiorFlushHandle *self, PyObject *unused)
{
    if (self->core == NULL)
        Py_RETURN_NONE;
    PyObject *r = aior_core_flush(self->core, NULL);
    return r != NULL ? r : report(self->core, (PyObject *)self);
}

static PyObject *
handle_cancel(AiorFlushHandle *self, PyObject *unused)
{
    self->cancelled = 1;
    Py_RETURN_NONE;
}

static PyObject *
handle_is_cancelled(AiorFlushHandle *self, PyObject *unused)
{
    return PyBool_FromLong(self->cancelled);
}

static PyObject *
handle_get_callback(AiorFlushHandle *self, void *unused)
{
    if (self->core == NULL || self->core->flush_meth == NULL)
        Py_RETURN_NONE;
    return Py_NewRef(self->core->flush_meth);
}

static PyObject *
handle_get_args(AiorFlushHandle *self, void *unused)
{
    return PyTuple_New(0);
}

static PyMethodDef handle_methods[] = {
    {"_run", (PyCFunction)handle_run, METH_NOARGS, "Run the flush (the loop calls it)."},
    {"cancel", (PyCFunction)handle_cancel, METH_NOARGS, "The loop skips it from now on."},
    {"cancelled", (PyCFunction)handle_is_cancelled, METH_NOARGS, "Whether it was cancelled."},
    {NULL},
};

static PyMemberDef handle_members[] = {
    {"_cancelled", T_BOOL, offsetof(AiorFlushHandle, cancelled), READONLY, NULL},
    {NULL},
};

static PyGetSetDef handle_getset[] = {
    {"_callback", (getter)handle_get_callback, NULL, "The flush it runs (debug reports).", NULL},
    {"_args", (getter)handle_get_args, NULL, "()", NULL},
    {NULL},
};

static PyTypeObject AiorFlushHandle_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.FlushHandle",
    .tp_doc = "A ring's flush in an asyncio loop's ready queue (see flush.h).",
    .tp_basicsize = sizeof(AiorFlushHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_repr = (reprfunc)handle_repr,
    .tp_methods = handle_methods,
    .tp_members = handle_members,
    .tp_getset = handle_getset,
};

/* ------------------------------------------------------------ ReadyCall */

typedef struct {
    PyObject_HEAD
    PyObject *callback; /* called as callback(arg) in context */
    PyObject *arg;
    PyObject *context;
    AiorCore *core;     /* whose loop's handler hears of an exception */
    char cancelled;
} AiorReadyCall;

static int
call_traverse(AiorReadyCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->callback);
    Py_VISIT(self->arg);
    Py_VISIT(self->context);
    Py_VISIT(self->core);
    return 0;
}

static int
call_clear(AiorReadyCall *self)
{
    Py_CLEAR(self->callback);
    Py_CLEAR(self->arg);
    Py_CLEAR(self->context);
    Py_CLEAR(self->core);
    return 0;
}

static void
call_dealloc(AiorReadyCall *self)
{
    PyObject_GC_UnTrack(self);
    call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
call_repr(AiorReadyCall *self)
{
    if (self->callback == NULL)
        return PyUnicode_FromString("<aioring call cleared>");
    return PyUnicode_FromFormat("<aioring call %R(%R)%s>", self->callback, self->arg,
                                self->cancelled ? " cancelled" : "");
}

static PyObject *
call_run(AiorReadyCall *self, PyObject *unused)
{
    if (self->callback == NULL || self->cancelled)
        Py_RETURN_NONE;
    if (PyContext_Enter(self->context) < 0)
        return NULL;
    PyObject *r = PyObject_CallOneArg(self->callback, self->arg);
    if (PyContext_Exit(self->context) < 0) {
        Py_XDECREF(r);
        return NULL;
    }
    return r != NULL ? r : report(self->core, (PyObject *)self);
}

static PyObject *
call_cancel(AiorReadyCall *self, PyObject *unused)
{
    self->cancelled = 1;
    Py_RETURN_NONE;
}

static PyObject *
call_is_cancelled(AiorReadyCall *self, PyObject *unused)
{
    return PyBool_FromLong(self->cancelled);
}

static PyObject *
call_get_args(AiorReadyCall *self, void *unused)
{
    return self->arg == NULL ? PyTuple_New(0) : PyTuple_Pack(1, self->arg);
}

static PyMethodDef call_methods[] = {
    {"_run", (PyCFunction)call_run, METH_NOARGS, "Run the callback in its context (the loop calls it)."},
    {"cancel", (PyCFunction)call_cancel, METH_NOARGS, "The loop skips it from now on."},
    {"cancelled", (PyCFunction)call_is_cancelled, METH_NOARGS, "Whether it was cancelled."},
    {NULL},
};

static PyMemberDef call_members[] = {
    {"_cancelled", T_BOOL, offsetof(AiorReadyCall, cancelled), READONLY, NULL},
    {"_callback", T_OBJECT, offsetof(AiorReadyCall, callback), READONLY, NULL},
    {"_context", T_OBJECT, offsetof(AiorReadyCall, context), READONLY, NULL},
    {NULL},
};

static PyGetSetDef call_getset[] = {
    {"_args", (getter)call_get_args, NULL, "(arg,)", NULL},
    {NULL},
};

static PyTypeObject AiorReadyCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.ReadyCall",
    .tp_doc = "A future's done callback in an asyncio loop's ready queue (see flush.h).",
    .tp_basicsize = sizeof(AiorReadyCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)call_traverse,
    .tp_clear = (inquiry)call_clear,
    .tp_dealloc = (destructor)call_dealloc,
    .tp_repr = (reprfunc)call_repr,
    .tp_methods = call_methods,
    .tp_members = call_members,
    .tp_getset = call_getset,
};

/* ------------------------------------------------------------ scheduling */

PyObject *
aior_core_bind(AiorCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind() takes policy, loop_ref, ready, stranded");
        return NULL;
    }
    if (args[2] != Py_None && !PyObject_HasAttr(args[2], str_append)) {
        PyErr_SetString(PyExc_TypeError, "bind(): ready must be a deque or None");
        return NULL;
    }
    if (!PyWeakref_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind(): loop_ref must be a weak reference");
        return NULL;
    }
    PyObject *meth = PyObject_GetAttr((PyObject *)self, str_flush);
    if (meth == NULL)
        return NULL;
    aior_set_field(&self->policy, args[0]);
    aior_set_field(&self->loop_ref, args[1]);
    aior_set_field(&self->ready, args[2]);
    aior_set_field(&self->stranded, args[3]);
    Py_XSETREF(self->flush_meth, meth);
    Py_CLEAR(self->handle);
    Py_RETURN_NONE;
}

/* The handle to append: the last one, unless the loop was told to skip it. */
static PyObject *
fresh_handle(AiorCore *self)
{
    if (self->handle != NULL && !((AiorFlushHandle *)self->handle)->cancelled)
        return self->handle;
    AiorFlushHandle *h = PyObject_GC_New(AiorFlushHandle, &AiorFlushHandle_Type);
    if (h == NULL)
        return NULL;
    h->core = (AiorCore *)Py_NewRef(self);
    h->cancelled = 0;
    PyObject_GC_Track(h);
    Py_XSETREF(self->handle, (PyObject *)h);
    return self->handle;
}

/* 1 if loop._debug is true, 0 if not (or absent), -1 on error. */
static int
loop_debug(PyObject *loop)
{
    PyObject *debug = PyObject_GetAttr(loop, str_debug);
    if (debug == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    int on = PyObject_IsTrue(debug);
    Py_DECREF(debug);
    return on;
}

int
aior_schedule_flush(AiorCore *self, PyObject *loop)
{
    PyObject *loop_given = loop != Py_None ? loop : NULL, *r;
    int debug = 0;

    if (self->closed || (self->flush_handle != NULL && self->flush_handle != Py_None))
        return 0;
    if (loop_given != NULL) {
        Py_INCREF(loop);
    } else {
        if (!PyWeakref_Check(self->loop_ref))
            return 0;
        if ((loop = PyObject_CallNoArgs(self->loop_ref)) == NULL)
            return -1;
        if (loop == Py_None) {
            Py_DECREF(loop);
            return 0;
        }
    }
    if (loop_given == NULL && (self->ready == NULL || self->ready == Py_None)) {
        /* (a closed asyncio loop never runs what its ready deque holds) */
        r = PyObject_CallMethodNoArgs(loop, str_is_closed);
        int closed = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
        if (closed != 0) {
            Py_DECREF(loop);
            return closed < 0 ? -1 : 0;
        }
    }
    if (self->ready != NULL && self->ready != Py_None && (debug = loop_debug(loop)) == 0) {
        PyObject *handle = fresh_handle(self);
        if (handle == NULL)
            goto fail;
        r = PyObject_CallMethodOneArg(self->ready, str_append, handle);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        aior_set_field(&self->flush_handle, handle);
    } else {
        if (self->ready != NULL && self->ready != Py_None && debug < 0)
            goto fail;
        if (self->flush_meth == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "the ring's flush is not bound to a loop");
            goto fail;
        }
        r = PyObject_CallMethodOneArg(loop, str_call_soon, self->flush_meth);
        if (r == NULL)
            goto fail;
        Py_XSETREF(self->flush_handle, r);
    }
    Py_DECREF(loop);
    return 0;
fail:
    Py_DECREF(loop);
    return -1;
}

/* Whether core's loop is bound with its ready deque, alive and not in debug
   mode: a future's callbacks may go straight to the deque.  1, 0, or -1
   with an exception set. */
static int
direct_ready(AiorCore *self)
{
    if (self->ready == NULL || self->ready == Py_None || !PyWeakref_Check(self->loop_ref))
        return 0;
    PyObject *loop = PyObject_CallNoArgs(self->loop_ref);
    if (loop == NULL)
        return -1;
    int debug = loop == Py_None ? 1 : loop_debug(loop);
    Py_DECREF(loop);
    return debug < 0 ? -1 : !debug;
}

int
aior_set_result(AiorCore *self, PyObject *fut, PyObject *value)
{
    PyObject *r, *callbacks = NULL;

    if (self != NULL && future_type != NULL && Py_TYPE(fut) == future_type && self->ready != NULL &&
        self->ready != Py_None) {
        /* (a future that is done has none: set_result below raises) */
        callbacks = PyObject_GetAttr(fut, str_callbacks);
        if (callbacks == NULL)
            return -1;
        int direct = PyList_CheckExact(callbacks) && PyList_GET_SIZE(callbacks) > 0 ? direct_ready(self) : 0;
        if (direct <= 0) {
            Py_CLEAR(callbacks);
            if (direct < 0)
                return -1;
        }
    }
    Py_ssize_t n = callbacks != NULL ? PyList_GET_SIZE(callbacks) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(callbacks, i);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "a future's callbacks are not (callback, context) pairs");
            goto fail;
        }
        /* (none of them is run by set_result now: each goes to the deque below) */
        r = PyObject_CallMethodOneArg(fut, str_remove_done_callback, PyTuple_GET_ITEM(entry, 0));
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    static AiorMethod set_result = AIOR_METHOD("set_result");
    PyObject *args[2] = {fut, value};
    r = aior_call_known(&set_result, args, 2);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(callbacks, i);
        AiorReadyCall *call = PyObject_GC_New(AiorReadyCall, &AiorReadyCall_Type);
        if (call == NULL)
            goto fail;
        call->callback = Py_NewRef(PyTuple_GET_ITEM(entry, 0));
        call->arg = Py_NewRef(fut);
        call->context = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
        call->core = (AiorCore *)Py_NewRef(self);
        call->cancelled = 0;
        PyObject_GC_Track(call);
        r = PyObject_CallMethodOneArg(self->ready, str_append, (PyObject *)call);
        Py_DECREF(call);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    Py_XDECREF(callbacks);
    return 0;
fail:
    Py_XDECREF(callbacks);
    return -1;
}

PyObject *
aior_core_schedule_flush(AiorCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "schedule_flush() takes at most one argument (loop)");
        return NULL;
    }
    if (aior_schedule_flush(self, nargs ? args[0] : NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------- the flush */

/* Whether policy's _flush_tail must do the rest of the flush. */
static int
uncommon(AiorCore *self)
{
    if (self->ring == NULL || self->closed)
        return 1;
    if (self->stranded != NULL && PyList_Check(self->stranded) && PyList_GET_SIZE(self->stranded))
        return 1;
    if (self->waiting != NULL && self->waiting != Py_None) {
        Py_ssize_t n = PyObject_Length(self->waiting);
        if (n < 0)
            PyErr_Clear();  /* (policy's _flush_tail meets the error itself) */
        return n != 0;
    }
    return 0;
}

static PyObject *
call_policy(AiorCore *self, PyObject *name)
{
    if (self->policy == NULL || self->policy == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "the ring's flush is not bound to a loop");
        return NULL;
    }
    return PyObject_CallMethodNoArgs(self->policy, name);
}

/* The deferred callbacks, muted.  -1 with an exception set: the callbacks
   not called yet are deferred again, first. */
static int
run_deferred(AiorCore *self)
{
    PyObject *callbacks = self->deferred;
    if (callbacks == NULL || !PyList_CheckExact(callbacks) || PyList_GET_SIZE(callbacks) == 0)
        return 0;
    /* The sends they make may complete a receive on this ring (a peer in
       the same loop): muted, its CQE is harvested by this flush's submit
       instead of waking the loop again. */
    if (self->ring != NULL) {
        io_uring_cq_eventfd_toggle(self->ring, false);
        self->muted = 1;
    }
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return -1;
    self->deferred = fresh;  /* (the core's reference moves to `callbacks`) */
    Py_ssize_t n = PyList_GET_SIZE(callbacks);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyObject_CallNoArgs(PyList_GET_ITEM(callbacks, i));
        if (r == NULL) {
            /* The others still run, at the next flush (before any deferred since). */
            if (self->deferred != NULL && PyList_CheckExact(self->deferred)) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyObject *rest = PyList_GetSlice(callbacks, i + 1, n);
                if (rest == NULL || PyList_SetSlice(self->deferred, 0, 0, rest) < 0)
                    PyErr_Clear();
                Py_XDECREF(rest);
                PyErr_Restore(type, value, tb);
            }
            Py_DECREF(callbacks);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(callbacks);
    return 0;
}

/* The submit of what the iteration queued (policy's _submit_queued and
   _submit, in their common case).  -1 with an exception set. */
static int
submit_queued(AiorCore *self)
{
    unsigned pending = aior_sq_unsent(self->ring);
    int submitted;

    self->solo = pending <= 1;
    if (pending) {
        if (self->sq_tagged) {
            PyObject *found = aior_withdrawable(self, AIOR_AWAITED);
            if (found == NULL)
                return -1;
            Py_ssize_t n = PyObject_Length(found);
            Py_DECREF(found);
            if (n != 0) {  /* callers cancelled before their SQE left: policy withdraws them */
                PyObject *r = n < 0 ? NULL : call_policy(self, str_submit_queued);
                Py_XDECREF(r);
                return r == NULL ? -1 : 0;
            }
        }
    } else if (!aior_cq_due(self)) {
        return 0;
    }
    /* (with nothing to submit: muted, or completions wait, and an empty
       submit turns the eventfd on again and harvests them without a wakeup) */
    if (aior_submit(self, &submitted) < 0)
        return -1;
    if (submitted < 0) {
        if (submitted != -EAGAIN && submitted != -EBUSY && submitted != -EINTR) {
            PyObject *exc = PyObject_CallFunction(self->os_error, "i", submitted);
            if (exc != NULL) {
                PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
                Py_DECREF(exc);
            }
            return -1;
        }
        /* The kernel could not take the SQEs now; they stay queued. */
        Py_XSETREF(self->flush_handle, Py_NewRef(Py_None));
        if (aior_schedule_flush(self, NULL) < 0)
            return -1;
    }
    int waits = uncommon(self);
    if (waits || (pending && self->ring != NULL && aior_sq_unsent(self->ring) &&
                  self->flush_handle == Py_None))
        /* Room freed for the waiting ops (or a poll requeued one), or the
           kernel stopped short of the batch: they go with the next flush. */
        return aior_schedule_flush(self, NULL);
    return 0;
}

PyObject *
aior_core_flush(AiorCore *self, PyObject *unused)
{
    PyObject *r;

    Py_XSETREF(self->eager_task, Py_NewRef(Py_None));
    self->eager_left = 0;
    if (self->closed) {
        Py_XSETREF(self->flush_handle, Py_NewRef(Py_None));
        Py_RETURN_NONE;
    }
    /* (Still scheduled while they run: what they start is queued, not
       submitted eagerly.) */
    if (run_deferred(self) < 0)
        goto error;
    Py_XSETREF(self->flush_handle, Py_NewRef(Py_None));
    if (uncommon(self)) {
        r = call_policy(self, str_flush_tail);
        if (r == NULL)
            goto error;
        return r;
    }
    if (submit_queued(self) < 0)
        goto error;
    Py_RETURN_NONE;
error:
    /* A KeyboardInterrupt (raised at any line by the default SIGINT
       handler): the flush must come again, or nothing queued would ever
       reach the kernel.  (An error goes to the loop's handler, and the next
       operation schedules the flush.) */
    {
        PyObject *type, *value, *tb;
        int again = !PyErr_ExceptionMatches(PyExc_Exception) || aior_cq_due(self);
        PyErr_Fetch(&type, &value, &tb);
        Py_XSETREF(self->flush_handle, Py_NewRef(Py_None));
        if (again && aior_schedule_flush(self, NULL) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    return NULL;
}

/* -------------------------------------------------------------- module */

int
aior_flush_add_types(PyObject *module)
{
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return -1
    INTERN(str_flush, "flush");
    INTERN(str_flush_tail, "_flush_tail");
    INTERN(str_submit_queued, "_submit_queued");
    INTERN(str_append, "append");
    INTERN(str_call_soon, "call_soon");
    INTERN(str_is_closed, "is_closed");
    INTERN(str_debug, "_debug");
    INTERN(str_call_exception_handler, "call_exception_handler");
    INTERN(str_message, "message");
    INTERN(str_exception, "exception");
    INTERN(str_handle, "handle");
    INTERN(str_callbacks, "_callbacks");
    INTERN(str_remove_done_callback, "remove_done_callback");
#undef INTERN
    PyObject *asyncio_c = PyImport_ImportModule("_asyncio");
    if (asyncio_c != NULL) {
        PyObject *type = PyObject_GetAttrString(asyncio_c, "Future");
        Py_DECREF(asyncio_c);
        if (type != NULL && PyType_Check(type))
            future_type = (PyTypeObject *)type; /* (held for the life of the process) */
        else
            Py_XDECREF(type);
    }
    PyErr_Clear(); /* (no C Future: every future is resolved by its set_result) */
    if (PyType_Ready(&AiorFlushHandle_Type) < 0 || PyType_Ready(&AiorReadyCall_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "ReadyCall", (PyObject *)&AiorReadyCall_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "FlushHandle", (PyObject *)&AiorFlushHandle_Type);
}
