/* aioring._core: the in-flight table's Op and the ring's harvest and
 * dispatch (see core.h for the seam and what each entry point owns). */
#define PY_SSIZE_T_CLEAN
#include "core.h"
#include "channel.h"
#include "fileops.h"
#include "wholefile.h"
#include "treecopy.h"
#include "newfile.h"
#include "flush.h"
#include "streamread.h"
#include "filemethod.h"
#include "sqtail.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>
#include <liburing.h>
#include <structmember.h>

#ifndef IORING_SQ_TASKRUN
#define IORING_SQ_TASKRUN (1U << 2)
#endif

/* CQEs taken from the CQ per step, on the C stack of each harvest (a target
   may start operations whose own submit harvests again: each call has its
   own batch). */
#define AIOR_BATCH 64

static PyObject *str_set_result, *str_set_exception, *str_create_future;

/* ------------------------------------------------------------------ Op */

static PyObject *
op_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *future, *prep, *opargs, *keep, *finish;
    int poll_mask;
    static char *kwlist[] = {"future", "prep", "args", "keep", "finish", "poll_mask", NULL};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOi:Op", kwlist, &future, &prep,
                                     &opargs, &keep, &finish, &poll_mask))
        return NULL;
    AiorOp *op = (AiorOp *)type->tp_alloc(type, 0);
    if (op == NULL)
        return NULL;
    op->future = Py_NewRef(future);
    op->prep = Py_NewRef(prep);
    op->args = Py_NewRef(opargs);
    op->keep = Py_NewRef(keep);
    op->finish = Py_NewRef(finish);
    op->waiter = Py_NewRef(Py_None);
    op->sink = Py_NewRef(Py_None);
    op->poll_mask = poll_mask;
    return (PyObject *)op;
}

static int
op_traverse(AiorOp *op, visitproc visit, void *arg)
{
    Py_VISIT(op->future);
    Py_VISIT(op->prep);
    Py_VISIT(op->args);
    Py_VISIT(op->keep);
    Py_VISIT(op->finish);
    Py_VISIT(op->waiter);
    Py_VISIT(op->sink);
    if (op->pinned)
        Py_VISIT(op->view.obj);
    return 0;
}

/* Let go of op's pin, if it holds one. */
void
aior_unpin(AiorOp *op)
{
    if (op->pinned) {
        op->pinned = 0;
        PyBuffer_Release(&op->view);
    }
}

static int
op_clear(AiorOp *op)
{
    aior_unpin(op);
    Py_CLEAR(op->future);
    Py_CLEAR(op->prep);
    Py_CLEAR(op->args);
    Py_CLEAR(op->keep);
    Py_CLEAR(op->finish);
    Py_CLEAR(op->waiter);
    Py_CLEAR(op->sink);
    return 0;
}

static void
op_dealloc(AiorOp *op)
{
    PyObject_GC_UnTrack(op);
    op_clear(op);
    Py_TYPE(op)->tp_free((PyObject *)op);
}

#define OP_OBJ(name) {#name, T_OBJECT, offsetof(AiorOp, name), 0, NULL}
static PyMemberDef op_members[] = {
    OP_OBJ(future), OP_OBJ(prep), OP_OBJ(args), OP_OBJ(keep), OP_OBJ(finish),
    OP_OBJ(waiter), OP_OBJ(sink),
    {"key", T_ULONGLONG, offsetof(AiorOp, key), 0, NULL},
    {"state", T_INT, offsetof(AiorOp, state), 0, NULL},
    {"res", T_INT, offsetof(AiorOp, res), 0, NULL},
    {"poll_mask", T_INT, offsetof(AiorOp, poll_mask), 0, NULL},
    {"polling", T_BOOL, offsetof(AiorOp, polling), 0, NULL},
    {"readied", T_BOOL, offsetof(AiorOp, readied), 0, NULL},
    {"unbounded", T_BOOL, offsetof(AiorOp, unbounded), 0, NULL},
    {"cancelled", T_BOOL, offsetof(AiorOp, cancelled), 0, NULL},
    {"continued", T_BOOL, offsetof(AiorOp, continued), 0, NULL},
    {NULL},
};

static PyObject *
op_pin(AiorOp *op, PyObject *const *args, Py_ssize_t nargs)
{
    int writable = 0;

    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "pin() takes a buffer and, optionally, writable");
        return NULL;
    }
    if (nargs == 2 && (writable = PyObject_IsTrue(args[1])) < 0)
        return NULL;
    if (op->state == AIOR_SUBMITTED) {
        PyErr_SetString(PyExc_RuntimeError, "the kernel may touch this op's pinned buffer");
        return NULL;
    }
    aior_unpin(op);
    /* PyBUF_SIMPLE asks for C-contiguous memory: the stdlib's TypeError for
       a non-buffer (or a str), BufferError for a non-contiguous one or a
       read-only one asked to be writable. */
    if (PyObject_GetBuffer(args[0], &op->view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return NULL;
    op->pinned = 1;
    return PyLong_FromSsize_t(op->view.len);
}

static PyObject *
op_unpin(AiorOp *op, PyObject *unused)
{
    if (op->state == AIOR_SUBMITTED) {
        PyErr_SetString(PyExc_RuntimeError, "the kernel may touch this op's pinned buffer");
        return NULL;
    }
    aior_unpin(op);
    Py_RETURN_NONE;
}

static PyObject *
op_get_pinned(AiorOp *op, void *unused)
{
    return Py_NewRef(op->pinned && op->view.obj != NULL ? op->view.obj : Py_None);
}

static PyObject *
op_get_address(AiorOp *op, void *unused)
{
    return PyLong_FromVoidPtr(op->pinned ? op->view.buf : NULL);
}

static PyMethodDef op_methods[] = {
    {"pin", (PyCFunction)(void (*)(void))op_pin, METH_FASTCALL,
     "pin(buffer, writable=False) -> int: hold `buffer` for the kernel (see core.h)."},
    {"unpin", (PyCFunction)op_unpin, METH_NOARGS,
     "unpin(): let go of the pinned buffer (not while the kernel may touch it)."},
    {NULL},
};

static PyGetSetDef op_getset[] = {
    {"pinned", (getter)op_get_pinned, NULL, "The object whose buffer op holds, or None.", NULL},
    {"address", (getter)op_get_address, NULL, "The address of the pinned buffer (0: none).", NULL},
    {NULL},
};

PyTypeObject AiorOp_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.Op",
    .tp_doc = "Op(future, prep, args, keep, finish, poll_mask): one request, "
              "the entry of a ring's in-flight table (see core.h).",
    .tp_basicsize = sizeof(AiorOp),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = op_new,
    .tp_traverse = (traverseproc)op_traverse,
    .tp_clear = (inquiry)op_clear,
    .tp_dealloc = (destructor)op_dealloc,
    .tp_members = op_members,
    .tp_methods = op_methods,
    .tp_getset = op_getset,
};

/* Replace a field with a new reference (the old one dropped last, as its
   destructor may run code that reads the op). */
void
aior_set_field(PyObject **field, PyObject *value)
{
    PyObject *old = *field;
    *field = Py_NewRef(value);
    Py_XDECREF(old);
}

/* ---------------------------------------------------------------- Core */

static int
core_init(AiorCore *self, PyObject *args, PyObject *kwds)
{
    PyObject *owner, *ops, *cancel_entry, *release, *os_error, *retry, *strand;
    PyObject *invalid;
    unsigned long long address;
    static char *kwlist[] = {"owner", "address", "ops", "cancel_entry", "release",
                             "os_error", "retry", "strand", "invalid_state", NULL};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OKO!OOOOOO:Core", kwlist, &owner, &address,
                                     &PyDict_Type, &ops, &cancel_entry, &release,
                                     &os_error, &retry, &strand, &invalid))
        return -1;
    self->ring = (struct io_uring *)(uintptr_t)address;
    aior_set_field(&self->owner, owner);
    aior_set_field(&self->ops, ops);
    aior_set_field(&self->cancel_entry, cancel_entry);
    aior_set_field(&self->release, release);
    aior_set_field(&self->os_error, os_error);
    aior_set_field(&self->retry, retry);
    aior_set_field(&self->strand, strand);
    aior_set_field(&self->invalid_state, invalid);
    aior_set_field(&self->flush_handle, Py_None);
    aior_set_field(&self->waiting, Py_None);
    aior_set_field(&self->policy, Py_None);
    aior_set_field(&self->loop_ref, Py_None);
    aior_set_field(&self->ready, Py_None);
    aior_set_field(&self->stranded, Py_None);
    aior_set_field(&self->eager_task, Py_None);
    aior_set_field(&self->task_of, Py_None);
    self->solo = 1;
    PyObject *deferred = PyList_New(0);
    if (deferred == NULL)
        return -1;
    aior_set_field(&self->deferred, deferred);
    Py_DECREF(deferred);
    self->next_key = 1;
    return 0;
}

static int
core_traverse(AiorCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->ops);
    Py_VISIT(self->cancel_entry);
    Py_VISIT(self->release);
    Py_VISIT(self->os_error);
    Py_VISIT(self->retry);
    Py_VISIT(self->strand);
    Py_VISIT(self->invalid_state);
    Py_VISIT(self->flush_handle);
    Py_VISIT(self->deferred);
    Py_VISIT(self->waiting);
    Py_VISIT(self->policy);
    Py_VISIT(self->loop_ref);
    Py_VISIT(self->ready);
    Py_VISIT(self->handle);
    Py_VISIT(self->flush_meth);
    Py_VISIT(self->stranded);
    Py_VISIT(self->eager_task);
    Py_VISIT(self->task_of);
    return 0;
}

static int
core_clear(AiorCore *self)
{
    Py_CLEAR(self->owner);
    Py_CLEAR(self->ops);
    Py_CLEAR(self->cancel_entry);
    Py_CLEAR(self->release);
    Py_CLEAR(self->os_error);
    Py_CLEAR(self->retry);
    Py_CLEAR(self->strand);
    Py_CLEAR(self->invalid_state);
    Py_CLEAR(self->flush_handle);
    Py_CLEAR(self->deferred);
    Py_CLEAR(self->waiting);
    Py_CLEAR(self->policy);
    Py_CLEAR(self->loop_ref);
    Py_CLEAR(self->ready);
    Py_CLEAR(self->handle);
    Py_CLEAR(self->flush_meth);
    Py_CLEAR(self->stranded);
    Py_CLEAR(self->eager_task);
    Py_CLEAR(self->task_of);
    return 0;
}

static void
core_dealloc(AiorCore *self)
{
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------ harvest */

static unsigned
harvest(struct io_uring *ring, uint64_t *ud, int32_t *res, unsigned max)
{
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;

    io_uring_for_each_cqe(ring, head, cqe) {
        if (n == max)
            break;
        ud[n] = cqe->user_data;
        res[n] = cqe->res;
        n++;
    }
    io_uring_cq_advance(ring, n);
    return n;
}

/* Completions the kernel holds back (overflow list, deferred task work)
   appear only after an enter with GETEVENTS. */
static int
needs_enter(struct io_uring *ring)
{
    return IO_URING_READ_ONCE(*ring->sq.kflags) & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN);
}

/* Up to max CQEs, with what needs an enter to appear. */
static unsigned
harvest_all(struct io_uring *ring, uint64_t *ud, int32_t *res, unsigned max)
{
    unsigned n = harvest(ring, ud, res, max);

    if (n < max && needs_enter(ring)) {
        io_uring_get_events(ring);
        n += harvest(ring, ud + n, res + n, max - n);
    }
    return n;
}

/* --------------------------------------------------------- dispatching */

/* Let go of what the kernel touched for `op`: the export is released now,
   not when the last reference goes (a traceback can hold the caller's frame
   for long), so that a bytearray can be resized again at once. */
static int
release_keep(AiorCore *self, AiorOp *op)
{
    PyObject *keep = op->keep;

    aior_unpin(op);
    if (keep == Py_None)
        return 0;
    op->keep = Py_NewRef(Py_None);
    if (!PyTuple_CheckExact(keep)) {
        PyObject *r = PyObject_CallOneArg(self->release, keep);
        if (r == NULL) {
            Py_DECREF(keep);
            return -1;
        }
        Py_DECREF(r);
    }
    Py_DECREF(keep);
    return 0;
}

PyObject *
aior_call_known(AiorMethod *m, PyObject *const *args, size_t nargs)
{
    PyTypeObject *type = Py_TYPE(args[0]);
    if (m->str == NULL && (m->str = PyUnicode_InternFromString(m->name)) == NULL)
        return NULL;
    if (m->type == NULL && PyType_HasFeature(type, Py_TPFLAGS_IMMUTABLETYPE) && type->tp_dictoffset >= 0) {
        PyObject *func = _PyType_Lookup(type, m->str);
        if (func != NULL && PyType_HasFeature(Py_TYPE(func), Py_TPFLAGS_METHOD_DESCRIPTOR)) {
            m->func = Py_NewRef(func); /* (both held for the life of the process) */
            m->type = (PyTypeObject *)Py_NewRef(type);
        }
    }
    if (type == m->type) {
        PyObject *dict = type->tp_dictoffset ? *(PyObject **)((char *)args[0] + type->tp_dictoffset) : NULL;
        if (dict == NULL || (PyDict_Check(dict) && PyDict_GET_SIZE(dict) == 0))
            return PyObject_Vectorcall(m->func, args, nargs, NULL);
    }
    return PyObject_VectorcallMethod(m->str, (PyObject **)args, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

PyObject *
aior_call_method1(PyObject *obj, PyObject *name, PyObject *arg)
{
    PyObject *args[2] = {obj, arg};
    return PyObject_VectorcallMethod(name, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

int
aior_flush_scheduled(AiorCore *core)
{
    return core->flush_handle != NULL && core->flush_handle != Py_None;
}

int
aior_eager_run(AiorCore *core, PyObject *loop)
{
    if (!core->eager_left)
        return 0;
    if (core->task_of == NULL || core->task_of == Py_None || loop == NULL)
        return 1;
    PyObject *task = PyObject_CallOneArg(core->task_of, loop);
    if (task == NULL)
        return -1;
    int same = task == core->eager_task;
    Py_DECREF(task);
    return same;
}

int
aior_defer(AiorCore *core, PyObject *callback)
{
    if (!aior_flush_scheduled(core) || core->deferred == NULL || !PyList_CheckExact(core->deferred))
        return 0;
    return PyList_Append(core->deferred, callback) < 0 ? -1 : 1;
}

/* 1 if the future is done, 0 if not, -1 on error. */
int
aior_future_done(PyObject *fut)
{
    static AiorMethod done_method = AIOR_METHOD("done");
    PyObject *args[1] = {fut};
    PyObject *r = aior_call_known(&done_method, args, 1);
    if (r == NULL)
        return -1;
    int done = PyObject_IsTrue(r);
    Py_DECREF(r);
    return done;
}

static int
set_exception_of(AiorCore *self, PyObject *fut, int res)
{
    PyObject *exc = PyObject_CallFunction(self->os_error, "i", res);
    if (exc == NULL)
        return -1;
    PyObject *r = aior_call_method1(fut, str_set_exception, exc);
    Py_DECREF(exc);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Hand the result of op's CQE to its target.  op was taken from the table.
   -1 with an exception set when one escaped (see strand). */
static int
finish_op(AiorCore *self, AiorOp *op, int res)
{
    PyObject *r;

    if (res < 0 || op->polling) {
        /* A poll's result, a retry of -EAGAIN, an ECANCELED nobody asked
           for, an error: the policy layer's call. */
        PyObject *args[2] = {(PyObject *)op, NULL};
        PyObject *num = PyLong_FromLong(res);
        if (num == NULL)
            return -1;
        args[1] = num;
        r = PyObject_Vectorcall(self->retry, args, 2, NULL);
        Py_DECREF(num);
        if (r == NULL)
            return -1;
        if (r == Py_None) {
            Py_DECREF(r);
            return 0; /* requeued */
        }
        res = PyLong_AsLong(r);
        Py_DECREF(r);
        if (res == -1 && PyErr_Occurred())
            return -1;
    }
    op->state = AIOR_DONE;
    op->res = res;
    if (AiorNewFile_Check(op->finish)) {
        int step = aior_newfile_step(self, op, &res); /* (1: nothing left to do here) */
        if (step != 0)
            return step < 0 ? -1 : 0;
        op->res = res;
    }
    if (op->sink != Py_None) {
        aior_unpin(op); /* (the sink's memory is its own: see core.h) */
        if (AiorRecv_Check(op->sink)) {
            PyObject *rx = Py_NewRef(op->sink);
            int ret = aior_recv_complete(self, op, (AiorRecv *)rx, res);
            Py_DECREF(rx);
            return ret;
        }
        PyObject *num = PyLong_FromLong(res);
        if (num == NULL)
            return -1;
        PyObject *sink = Py_NewRef(op->sink);
        r = PyObject_CallOneArg(sink, num); /* which may start op again */
        Py_DECREF(sink);
        Py_DECREF(num);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    if (op->future == Py_None)
        return 0; /* completed inside the submit call: start()'s caller finishes it */
    PyObject *fut = Py_NewRef(op->future);
    int ret = -1;
    if (op->waiter != Py_None) {
        /* The caller was cancelled and waits for this CQE (Ring.settle). */
        PyObject *waiter = Py_NewRef(op->waiter);
        int done = aior_future_done(waiter);
        if (done == 0) {
            r = aior_call_method1(waiter, str_set_result, Py_None);
            if (r != NULL) {
                Py_DECREF(r);
                ret = 0;
            }
        } else {
            ret = done < 0 ? -1 : 0;
        }
        Py_DECREF(waiter);
        Py_DECREF(fut);
        return ret;
    }
    if (res >= 0 && op->finish == Py_None) {
        PyObject *num = PyLong_FromLong(res);
        if (num == NULL)
            goto out;
        int set = aior_set_result(self, fut, num);
        Py_DECREF(num);
        if (set < 0) {
            if (PyErr_ExceptionMatches(self->invalid_state)) {
                PyErr_Clear();
                ret = 0; /* cancelled: the caller's settle() finishes it */
            }
            goto out;
        }
    } else {
        int done = aior_future_done(fut);
        if (done < 0)
            goto out;
        if (done) {
            ret = 0; /* cancelled: the caller's settle() finishes it */
            goto out;
        }
        if (res < 0 || op->finish == Py_None) {
            if (set_exception_of(self, fut, res) < 0)
                goto out;
        } else {
            PyObject *finish = Py_NewRef(op->finish);
            PyObject *args[2] = {(PyObject *)op, NULL};
            PyObject *num = PyLong_FromLong(res);
            if (num == NULL) {
                Py_DECREF(finish);
                goto out;
            }
            args[1] = num;
            PyObject *result = PyObject_Vectorcall(finish, args, 2, NULL);
            Py_DECREF(num);
            Py_DECREF(finish);
            if (result == NULL) {
                /* The op's error goes to its caller; a KeyboardInterrupt is
                   the loop's, not the op's. */
                if (!PyErr_ExceptionMatches(PyExc_Exception))
                    goto out;
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_NormalizeException(&type, &value, &tb);
                if (tb != NULL)
                    PyException_SetTraceback(value, tb);
                r = aior_call_method1(fut, str_set_exception, value);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
            } else {
                r = aior_set_result(self, fut, result) < 0 ? NULL : Py_NewRef(Py_None);
                Py_DECREF(result);
            }
            if (r == NULL)
                goto out;
            Py_DECREF(r);
        }
    }
    ret = release_keep(self, op);
out:
    Py_DECREF(fut);
    return ret;
}

/* Hand an exception's leftovers to the policy layer: the CQE being
   dispatched (and its op, if it was taken from the table) and those after
   it, ud/res[from..n), plus whatever the CQ still holds (nothing would
   signal those again).  The exception stays set. */
static void
strand(AiorCore *self, uint64_t key, int res, AiorOp *op,
       const uint64_t *ud, const int32_t *rs, unsigned from, unsigned n)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *rest = PyList_New(0);
    uint64_t more_ud[AIOR_BATCH];
    int32_t more_res[AIOR_BATCH];

    for (;;) {
        for (unsigned i = from; rest != NULL && i < n; i++) {
            PyObject *pair = Py_BuildValue("(Ki)", (unsigned long long)ud[i], (int)rs[i]);
            if (pair == NULL || PyList_Append(rest, pair) < 0)
                Py_CLEAR(rest);
            Py_XDECREF(pair);
        }
        if (rest == NULL || self->ring == NULL)
            break;
        n = harvest_all(self->ring, more_ud, more_res, AIOR_BATCH);
        if (n == 0)
            break;
        ud = more_ud;
        rs = more_res;
        from = 0;
    }
    if (rest != NULL) {
        PyObject *r = PyObject_CallFunction(self->strand, "KiOO", (unsigned long long)key, res,
                                            op == NULL ? Py_None : (PyObject *)op, rest);
        Py_XDECREF(r);
        Py_DECREF(rest);
    }
    PyErr_Clear(); /* (an error of strand itself: the first one is what is raised) */
    PyErr_Restore(type, value, tb);
}

/* The table's entry under key, taken out of it (a new reference); NULL
   without an exception when there is none, or with one set. */
static PyObject *
pop_entry(PyObject *ops, PyObject *key)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *entry = NULL;
    return PyDict_Pop(ops, key, &entry) < 0 ? NULL : entry;
#else
    PyObject *entry = _PyDict_Pop(ops, key, Py_None); /* (no entry is None) */
    if (entry == Py_None) {
        Py_DECREF(entry);
        return NULL;
    }
    return entry;
#endif
}

/* Dispatch n CQEs.  -1 with the exception set (and the rest stranded). */
static int
dispatch(AiorCore *self, const uint64_t *ud, const int32_t *res, unsigned n)
{
    self->completions += n;
    for (unsigned i = 0; i < n; i++) {
        PyObject *key = PyLong_FromUnsignedLongLong(ud[i]);
        if (key == NULL) {
            strand(self, ud[i], res[i], NULL, ud, res, i, n);
            return -1;
        }
        PyObject *entry = pop_entry(self->ops, key);
        Py_DECREF(key);
        if (entry == NULL) {
            if (PyErr_Occurred()) {
                strand(self, ud[i], res[i], NULL, ud, res, i, n);
                return -1;
            }
            continue; /* (an ASYNC_CANCEL's target that is already done) */
        }
        if (entry == self->cancel_entry || !PyObject_TypeCheck(entry, &AiorOp_Type)) {
            Py_DECREF(entry);
            continue;
        }
        AiorOp *op = (AiorOp *)entry;
        self->unbounded -= op->unbounded;
        if (finish_op(self, op, res[i]) < 0) {
            strand(self, ud[i], res[i], op, ud, res, i + 1, n);
            Py_DECREF(entry);
            return -1;
        }
        Py_DECREF(entry);
    }
    return 0;
}

/* Harvest and dispatch until the CQ is empty. */
static int
dispatch_ready(AiorCore *self)
{
    uint64_t ud[AIOR_BATCH];
    int32_t res[AIOR_BATCH];
    unsigned n;

    do {
        n = harvest_all(self->ring, ud, res, AIOR_BATCH);
        if (dispatch(self, ud, res, n) < 0)
            return -1;
    } while (n == AIOR_BATCH);
    return 0;
}

static int
check_ring(AiorCore *self)
{
    if (self->ring == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this io_uring is closed");
        return -1;
    }
    return 0;
}

int
aior_submit(AiorCore *self, int *submitted_out)
{
    uint64_t ud[AIOR_BATCH];
    int32_t res[AIOR_BATCH];
    struct io_uring *ring = self->ring;
    unsigned n;
    int submitted;

    if (check_ring(self) < 0)
        return -1;
    /* Cached reads complete inside the submit call: their CQEs are taken
       here without a wakeup.  Notification is off while we submit, and the
       CQ is read again after it is back on, so that a CQE posted in between
       is never stranded. */
    io_uring_cq_eventfd_toggle(ring, false);
    submitted = io_uring_submit(ring);
    if (aior_sq_unsent(ring) == 0)
        self->sq_tagged = 0;
    n = harvest(ring, ud, res, AIOR_BATCH);
    io_uring_cq_eventfd_toggle(ring, true);
    self->muted = 0;
    /* The kernel publishes a CQE, then reads the flag; we publish the flag,
       then read the CQ tail.  Without a full fence both may read the old
       value, and a CQE would be neither harvested nor signalled. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (n < AIOR_BATCH)
        n += harvest_all(ring, ud + n, res + n, AIOR_BATCH - n);
    self->submit_calls++;
    *submitted_out = submitted;
    if (dispatch(self, ud, res, n) < 0)
        return -1;
    if (n == AIOR_BATCH && dispatch_ready(self) < 0)
        return -1;
    return 0;
}

static PyObject *
core_submit(AiorCore *self, PyObject *unused)
{
    int submitted;

    if (aior_submit(self, &submitted) < 0)
        return NULL;
    return PyLong_FromLong(submitted);
}

static PyObject *
core_reap(AiorCore *self, PyObject *arg)
{
    long efd = PyLong_AsLong(arg);
    uint64_t value;

    if (efd == -1 && PyErr_Occurred())
        return NULL;
    if (check_ring(self) < 0)
        return NULL;
    self->wakeups++;
    /* The eventfd is level-triggered: drained before the harvest, so that a
       CQE posted after the harvest signals it afresh. */
    if (read((int)efd, &value, sizeof(value)) < 0 && errno != EAGAIN)
        return PyErr_SetFromErrno(PyExc_OSError);
    long long before = self->completions;
    if (dispatch_ready(self) < 0)
        return NULL;
    return PyLong_FromLongLong(self->completions - before);
}

static PyObject *
core_complete_batch(AiorCore *self, PyObject *pairs)
{
    uint64_t ud[AIOR_BATCH];
    int32_t res[AIOR_BATCH];

    if (!PyList_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "complete_batch() takes a list of (key, res)");
        return NULL;
    }
    PyObject *batch = PySequence_List(pairs); /* (a target may change the caller's list) */
    if (batch == NULL)
        return NULL;
    Py_ssize_t total = PyList_GET_SIZE(batch);
    for (Py_ssize_t at = 0; at < total; at += AIOR_BATCH) {
        unsigned n = (unsigned)(total - at < AIOR_BATCH ? total - at : AIOR_BATCH);
        for (unsigned i = 0; i < n; i++) {
            unsigned long long key;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(batch, at + i), "Ki", &key, &res[i]))
                goto error;
            ud[i] = key;
        }
        if (dispatch(self, ud, res, n) < 0) {
            /* (dispatch stranded this batch's rest; the later ones go too) */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyObject *later = PyList_GetSlice(batch, at + n, total);
            if (later != NULL && PyList_GET_SIZE(later)) {
                PyObject *r = PyObject_CallFunction(self->strand, "KiOO", 0ULL, 0, Py_None, later);
                Py_XDECREF(r);
            }
            Py_XDECREF(later);
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
            goto error;
        }
    }
    Py_DECREF(batch);
    Py_RETURN_NONE;
error:
    Py_DECREF(batch);
    return NULL;
}

/* ---------------------------------------------------------- submitting */

/* An SQE, submitting the SQ first if it is full; NULL if it stays full. */
static struct io_uring_sqe *
get_sqe(AiorCore *self)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(self->ring);

    if (sqe == NULL) {
        io_uring_submit(self->ring);
        self->submit_calls++;
        sqe = io_uring_get_sqe(self->ring);
    }
    return sqe;
}

static int
long_arg(PyObject *args, Py_ssize_t i, long long *out)
{
    *out = PyLong_AsLongLong(PyTuple_GET_ITEM(args, i));
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The SQE of a read or write the core prepares itself (op.prep is None):
   op.args is (opcode, fd, start, length, offset, rw_flags[, sqe_flags]),
   the memory op's pin from `start` on (length at most op->limit, if set).  Everything is checked before an SQE
   is taken.  0, -EBUSY (the SQ stays full), or -1 with an exception set. */
static int
prep_rw(AiorCore *self, AiorOp *op, unsigned long long key)
{
    PyObject *args = op->args;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    long long v[7] = {0};

    if (nargs != 6 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "a read or write is (opcode, fd, start, length, offset, rw_flags[, sqe_flags])");
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (long_arg(args, i, &v[i]) < 0)
            return -1;
    long long start = v[2], length = v[3];
    Py_ssize_t size = op->pinned ? op->view.len : 0;
    if (start < 0 || length < 0 || start > size || length > size - start || length > UINT_MAX) {
        PyErr_SetString(PyExc_ValueError, "a read or write outside the op's pinned buffer");
        return -1;
    }
    if (v[0] < 0 || v[0] > 255 || v[1] < INT_MIN || v[1] > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "opcode or fd out of range");
        return -1;
    }
    if (op->limit && length > op->limit)
        length = op->limit;
    char *addr = op->pinned ? (char *)op->view.buf + start : NULL;
    struct io_uring_sqe *sqe = get_sqe(self);
    if (sqe == NULL)
        return -EBUSY;
    io_uring_prep_rw((int)v[0], sqe, (int)v[1], addr, (unsigned)length, (__u64)v[4]);
    sqe->rw_flags = (__u32)v[5];
    if (nargs == 7)
        io_uring_sqe_set_flags(sqe, (unsigned)v[6]);
    sqe->user_data = key;
    return 0;
}

/* The poll that retries an -EAGAIN on a non-blocking fd: for op.poll_mask,
   on the fd of op.args[1]. */
static int
prep_poll(AiorCore *self, AiorOp *op, unsigned long long key)
{
    if (PyTuple_GET_SIZE(op->args) < 2) {
        PyErr_SetString(PyExc_TypeError, "a polled op's args[1] is its fd");
        return -1;
    }
    long fd = PyLong_AsLong(PyTuple_GET_ITEM(op->args, 1));
    if (fd == -1 && PyErr_Occurred())
        return -1;
    struct io_uring_sqe *sqe = get_sqe(self);
    if (sqe == NULL)
        return -EBUSY;
    io_uring_prep_poll_add(sqe, (int)fd, (unsigned)op->poll_mask);
    sqe->user_data = key;
    return 0;
}

/* Prepare op's SQE under `key` with the binding's prep function,
   op.prep(ring, *op.args, key), submitting a full SQ first.  0, -EBUSY
   (the SQ stays full), or -1 with an exception set. */
static int
prep_binding(AiorCore *self, AiorOp *op, unsigned long long k)
{
    PyObject *stack[16];
    Py_ssize_t nargs = PyTuple_GET_SIZE(op->args);

    if (nargs > 14) {
        PyErr_SetString(PyExc_TypeError, "an op has at most 14 arguments");
        return -1;
    }
    PyObject *key = PyLong_FromUnsignedLongLong(k);
    if (key == NULL)
        return -1;
    stack[0] = self->owner;
    for (Py_ssize_t i = 0; i < nargs; i++)
        stack[i + 1] = PyTuple_GET_ITEM(op->args, i);
    stack[nargs + 1] = key;
    PyObject *prep = Py_NewRef(op->prep);
    long ret = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        PyObject *r = PyObject_Vectorcall(prep, stack, nargs + 2, NULL);
        if (r == NULL) {
            ret = -1;
            break;
        }
        ret = PyLong_AsLong(r);
        Py_DECREF(r);
        if (ret == -1 && PyErr_Occurred())
            break;
        if (ret != -EBUSY || attempt) {
            ret = ret == -EBUSY ? -EBUSY : 0;
            break;
        }
        /* The SQ is full: hand what it holds to the kernel, prepare again. */
        io_uring_submit(self->ring);
        self->submit_calls++;
    }
    Py_DECREF(prep);
    Py_DECREF(key);
    return (int)ret;
}

static int
prep_sqe(AiorCore *self, AiorOp *op, unsigned long long key)
{
    if (op->polling)
        return prep_poll(self, op, key);
    if (op->prep == Py_None)
        return prep_rw(self, op, key);
    return prep_binding(self, op, key);
}

int
aior_start(AiorCore *self, AiorOp *op, unsigned long long tag, unsigned long long *key_out)
{
    if (check_ring(self) < 0)
        return -1;
    if (!PyTuple_CheckExact(op->args)) {
        PyErr_SetString(PyExc_TypeError, "Op.args must be a tuple");
        return -1;
    }
    unsigned long long k = self->next_key | tag;
    int ret = prep_sqe(self, op, k);
    if (ret < 0)
        return ret == -EBUSY ? 0 : -1;
    self->next_key++;
    if (tag)
        self->sq_tagged++;
    PyObject *key = PyLong_FromUnsignedLongLong(k);
    if (key == NULL || PyDict_SetItem(self->ops, key, (PyObject *)op) < 0) {
        /* (the SQE is in the SQ: a CQE for a key not in the table is dropped) */
        Py_XDECREF(key);
        return -1;
    }
    Py_DECREF(key);
    op->key = k;
    op->state = AIOR_SUBMITTED;
    self->unbounded += op->unbounded;
    *key_out = k;
    return 1;
}

static PyObject *
core_start(AiorCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long long tag = 0, key;

    if (nargs < 1 || nargs > 2 || !PyObject_TypeCheck(args[0], &AiorOp_Type)) {
        PyErr_SetString(PyExc_TypeError, "start() takes an Op and, optionally, tag bits");
        return NULL;
    }
    if (nargs == 2) {
        tag = PyLong_AsUnsignedLongLong(args[1]);
        if (tag == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    int ret = aior_start(self, (AiorOp *)args[0], tag, &key);
    if (ret < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(ret ? key : 0);
}

static PyObject *
core_launch(AiorCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *loop, *prep, *opargs, *keep, *finish, *waiting = self->waiting;
    unsigned long long key;
    long poll_mask;
    int writable;

    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "launch() takes loop, prep, args, keep, finish, poll_mask, writable");
        return NULL;
    }
    loop = args[0], prep = args[1], opargs = args[2], keep = args[3], finish = args[4];
    poll_mask = PyLong_AsLong(args[5]);
    if (poll_mask == -1 && PyErr_Occurred())
        return NULL;
    if (poll_mask < INT_MIN || poll_mask > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "poll_mask is out of range for a C int");
        return NULL;
    }
    if ((writable = PyObject_IsTrue(args[6])) < 0)
        return NULL;
    if (self->ring == NULL || self->flush_handle == Py_None ||
        (prep != Py_None && !self->preps) ||
        waiting == NULL || waiting == Py_None || aior_owed() ||
        PyDict_GET_SIZE(self->ops) - self->unbounded >= self->limit)
        Py_RETURN_NONE;
    int eager = aior_eager_run(self, loop);
    if (eager != 0)
        return eager < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t held = PyObject_Length(waiting);
    if (held != 0)
        return held < 0 ? NULL : Py_NewRef(Py_None);
    AiorOp *op = (AiorOp *)AiorOp_Type.tp_alloc(&AiorOp_Type, 0);
    if (op == NULL)
        return NULL;
    op->future = Py_NewRef(Py_None);
    op->prep = Py_NewRef(prep);
    op->args = Py_NewRef(opargs);
    op->keep = Py_NewRef(prep == Py_None ? Py_None : keep);
    op->finish = Py_NewRef(finish);
    op->waiter = Py_NewRef(Py_None);
    op->sink = Py_NewRef(Py_None);
    op->poll_mask = (int)poll_mask;
    if (prep == Py_None) {
        /* (pin()'s errors: the stdlib's TypeError or BufferError) */
        if (PyObject_GetBuffer(keep, &op->view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
            goto fail;
        op->pinned = 1;
    }
    int ret = aior_start(self, op, AIOR_AWAITED, &key);
    if (ret <= 0) {
        if (ret < 0)
            goto fail;
        Py_DECREF(op);  /* the SQ stays full: policy's start() makes the op wait */
        Py_RETURN_NONE;
    }
    PyObject *future = PyObject_CallMethodNoArgs(loop, str_create_future);
    if (future == NULL)
        goto fail;  /* (the table holds the op, and what it holds, until the CQE) */
    Py_SETREF(op->future, future);
    return (PyObject *)op;
fail:
    Py_DECREF(op);
    return NULL;
}

/* Set `set` and clear `clear` in the flags of the SQE prepared last. */
static void
flag_tail(struct io_uring *ring, unsigned set, unsigned clear)
{
    struct io_uring_sq *sq = &ring->sq;
    unsigned shift = (ring->flags & IORING_SETUP_SQE128) ? 1 : 0;
    struct io_uring_sqe *sqe = &sq->sqes[((sq->sqe_tail - 1) & sq->ring_mask) << shift];

    sqe->flags = (__u8)((sqe->flags | set) & ~clear);
}

static PyObject *
core_start_chain(AiorCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long long tag, key;
    unsigned long link;

    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "start_chain() takes a list of Ops, tag bits and SQE flags");
        return NULL;
    }
    PyObject *ops = args[0];
    Py_ssize_t n = PyList_GET_SIZE(ops);
    tag = PyLong_AsUnsignedLongLong(args[1]);
    if (tag == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    link = PyLong_AsUnsignedLong(args[2]);
    if (link == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (check_ring(self) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(PyList_GET_ITEM(ops, i), &AiorOp_Type)) {
            PyErr_SetString(PyExc_TypeError, "start_chain() takes a list of Ops");
            return NULL;
        }
    }
    if (n == 0 || io_uring_sq_space_left(self->ring) < (unsigned)n)
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ret = aior_start(self, (AiorOp *)PyList_GET_ITEM(ops, i), tag, &key);
        if (ret <= 0) {
            /* (the SQ had room, so only what prep raises) The steps already
               queued end there, as a chain of their own. */
            if (i > 0)
                flag_tail(self->ring, 0, (unsigned)link);
            if (ret == 0)
                PyErr_SetString(PyExc_RuntimeError, "the SQ had no room left for the chain");
            return NULL;
        }
        if (i < n - 1)
            flag_tail(self->ring, (unsigned)link, 0);
    }
    Py_RETURN_TRUE;
}

static PyObject *
core_cancel(AiorCore *self, PyObject *arg)
{
    unsigned long long target = PyLong_AsUnsignedLongLong(arg);
    struct io_uring_sqe *sqe;

    if (target == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (check_ring(self) < 0)
        return NULL;
    sqe = get_sqe(self);
    if (sqe == NULL)
        Py_RETURN_FALSE;
    unsigned long long k = self->next_key++;
    io_uring_prep_cancel64(sqe, target, 0);
    sqe->user_data = k;
    PyObject *key = PyLong_FromUnsignedLongLong(k);
    if (key == NULL || PyDict_SetItem(self->ops, key, self->cancel_entry) < 0) {
        Py_XDECREF(key);
        return NULL;
    }
    Py_DECREF(key);
    Py_RETURN_TRUE;
}

/* The ops among the SQEs the kernel has not read yet, started with every
   bit of `tag`, whose future is done: their callers were cancelled before
   the flush (see Core.withdrawable in core.h). */
PyObject *
aior_withdrawable(AiorCore *self, unsigned long long mask)
{
    PyObject *found = NULL;

    if (self->ring != NULL) {
        struct io_uring_sq *sq = &self->ring->sq;
        unsigned shift = (self->ring->flags & IORING_SETUP_SQE128) ? 1 : 0;
        unsigned i;

        for (i = aior_sq_unread_head(self->ring); i != sq->sqe_tail; i++) {
            unsigned long long tag = sq->sqes[(i & sq->ring_mask) << shift].user_data;
            PyObject *key, *op;
            int done;

            if ((tag & mask) != mask)
                continue;
            key = PyLong_FromUnsignedLongLong(tag);
            if (key == NULL)
                goto fail;
            op = PyDict_GetItemWithError(self->ops, key);
            Py_DECREF(key);
            if (op == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                continue;
            }
            if (Py_TYPE(op) != &AiorOp_Type || ((AiorOp *)op)->future == Py_None)
                continue;
            Py_INCREF(op);  /* (done() is Python's: it may change the table) */
            done = aior_future_done(((AiorOp *)op)->future);
            if (done > 0 && found == NULL)
                found = PyList_New(0);
            if (done < 0 || (done > 0 && (found == NULL || PyList_Append(found, op) < 0))) {
                Py_DECREF(op);
                goto fail;
            }
            Py_DECREF(op);
        }
    }
    return found != NULL ? found : PyTuple_New(0);
fail:
    Py_XDECREF(found);
    return NULL;
}

static PyObject *
core_withdrawable(AiorCore *self, PyObject *arg)
{
    unsigned long long mask = PyLong_AsUnsignedLongLong(arg);

    if (mask == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return aior_withdrawable(self, mask);
}

static PyObject *
core_sq_pending(AiorCore *self, void *unused)
{
    return PyLong_FromUnsignedLong(self->ring == NULL ? 0 : aior_sq_unsent(self->ring));
}

static PyObject *
core_harvest(AiorCore *self, PyObject *unused)
{
    uint64_t ud[AIOR_BATCH];
    int32_t res[AIOR_BATCH];
    unsigned n;

    if (check_ring(self) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    do {
        n = harvest_all(self->ring, ud, res, AIOR_BATCH);
        for (unsigned i = 0; i < n; i++) {
            PyObject *pair = Py_BuildValue("(Ki)", (unsigned long long)ud[i], (int)res[i]);
            if (pair == NULL || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(pair);
        }
    } while (n == AIOR_BATCH);
    return out;
}

static PyObject *
core_mute(AiorCore *self, PyObject *unused)
{
    if (self->ring != NULL) {
        io_uring_cq_eventfd_toggle(self->ring, false);
        self->muted = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *
core_detach(AiorCore *self, PyObject *unused)
{
    self->ring = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"submit", (PyCFunction)core_submit, METH_NOARGS,
     "submit() -> int: submit the SQ, harvest and dispatch (see core.h)."},
    {"reap", (PyCFunction)core_reap, METH_O,
     "reap(efd) -> int: drain the eventfd, harvest and dispatch (see core.h)."},
    {"complete_batch", (PyCFunction)core_complete_batch, METH_O,
     "complete_batch(pairs): dispatch (key, res) results made elsewhere."},
    {"start", (PyCFunction)(void (*)(void))core_start, METH_FASTCALL,
     "start(op, tag=0) -> key: prepare op's SQE and put op in the table (see core.h)."},
    {"start_chain", (PyCFunction)(void (*)(void))core_start_chain, METH_FASTCALL,
     "start_chain(ops, tag, link) -> bool: start ops as one chain (see core.h)."},
    {"launch", (PyCFunction)(void (*)(void))core_launch, METH_FASTCALL,
     "launch(loop, prep, args, keep, finish, poll_mask, writable) -> Op | None: start()'s common case."},
    {"withdrawable", (PyCFunction)core_withdrawable, METH_O,
     "withdrawable(tag) -> sequence of the unsubmitted ops of tag whose future is done."},
    {"cancel", (PyCFunction)core_cancel, METH_O,
     "cancel(key) -> bool: prepare an ASYNC_CANCEL of the request `key`."},
    {"harvest", (PyCFunction)core_harvest, METH_NOARGS,
     "harvest() -> list of (key, res): ready CQEs, not dispatched."},
    {"mute", (PyCFunction)core_mute, METH_NOARGS,
     "mute(): no eventfd notification until the next submit() (see core.h)."},
    {"detach", (PyCFunction)core_detach, METH_NOARGS,
     "detach(): never touch the ring again."},
    {"bind", (PyCFunction)(void (*)(void))aior_core_bind, METH_FASTCALL,
     "bind(policy, loop_ref, ready, stranded): the flush's ring and loop (see flush.h)."},
    {"schedule_flush", (PyCFunction)(void (*)(void))aior_core_schedule_flush, METH_FASTCALL,
     "schedule_flush(loop=None): schedule this iteration's flush (see flush.h)."},
    {"flush", (PyCFunction)aior_core_flush, METH_NOARGS,
     "flush(): this iteration's flush (see flush.h)."},
    {NULL},
};

static PyMemberDef core_members[] = {
    {"ops", T_OBJECT, offsetof(AiorCore, ops), READONLY, NULL},
    {"unbounded", T_PYSSIZET, offsetof(AiorCore, unbounded), 0, NULL},
    {"submit_calls", T_LONGLONG, offsetof(AiorCore, submit_calls), 0, NULL},
    {"wakeups", T_LONGLONG, offsetof(AiorCore, wakeups), 0, NULL},
    {"completions", T_LONGLONG, offsetof(AiorCore, completions), 0, NULL},
    {"next_key", T_ULONGLONG, offsetof(AiorCore, next_key), 0, NULL},
    {"sq_tagged", T_PYSSIZET, offsetof(AiorCore, sq_tagged), 0, NULL},
    {"flush_handle", T_OBJECT, offsetof(AiorCore, flush_handle), 0, NULL},
    {"limit", T_PYSSIZET, offsetof(AiorCore, limit), 0, NULL},
    {"waiting", T_OBJECT, offsetof(AiorCore, waiting), 0, NULL},
    {"eager_left", T_INT, offsetof(AiorCore, eager_left), 0, NULL},
    {"preps", T_BOOL, offsetof(AiorCore, preps), 0, NULL},
    {"deferred", T_OBJECT, offsetof(AiorCore, deferred), 0, NULL},
    {"eager_task", T_OBJECT, offsetof(AiorCore, eager_task), 0, NULL},
    {"task_of", T_OBJECT, offsetof(AiorCore, task_of), 0, NULL},
    {"solo", T_BOOL, offsetof(AiorCore, solo), 0, NULL},
    {"closed", T_BOOL, offsetof(AiorCore, closed), 0, NULL},
    {NULL},
};

int
aior_cq_due(AiorCore *self)
{
    return self->ring != NULL && (self->muted || io_uring_cq_ready(self->ring) || needs_enter(self->ring));
}

static PyObject *
core_cq_due(AiorCore *self, void *unused)
{
    return PyBool_FromLong(aior_cq_due(self));
}

static PyGetSetDef core_getset[] = {
    {"sq_pending", (getter)core_sq_pending, NULL, "SQEs prepared and not yet submitted.", NULL},
    {"cq_due", (getter)core_cq_due, NULL,
     "Whether completions may wait: muted, CQEs in the CQ, or ones the kernel posts at an enter.", NULL},
    {NULL},
};

PyTypeObject AiorCore_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.Core",
    .tp_doc = "One ring's in-flight table, harvest and dispatch (see core.h).",
    .tp_basicsize = sizeof(AiorCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_getset = core_getset,
};

/* -------------------------------------------------------------- module */

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aioring._core",
    .m_doc = "The per-operation mechanism of aioring's rings (see src/core.h).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    if (PyType_Ready(&AiorOp_Type) < 0 || PyType_Ready(&AiorCore_Type) < 0)
        return NULL;
    str_set_result = PyUnicode_InternFromString("set_result");
    str_set_exception = PyUnicode_InternFromString("set_exception");
    str_create_future = PyUnicode_InternFromString("create_future");
    if (str_set_result == NULL || str_set_exception == NULL || str_create_future == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (aior_channel_add_types(m) < 0 || aior_fileops_add(m) < 0 || aior_wholefile_add(m) < 0 ||
        aior_treecopy_add(m) < 0 || aior_newfile_add(m) < 0 || aior_flush_add_types(m) < 0 ||
        aior_streamread_add(m) < 0 || aior_filemethod_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Op", (PyObject *)&AiorOp_Type) < 0 ||
        PyModule_AddObjectRef(m, "Core", (PyObject *)&AiorCore_Type) < 0 ||
        PyModule_AddIntConstant(m, "WAITING", AIOR_WAITING) < 0 ||
        PyModule_AddIntConstant(m, "SUBMITTED", AIOR_SUBMITTED) < 0 ||
        PyModule_AddIntConstant(m, "DONE", AIOR_DONE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *awaited = PyLong_FromUnsignedLongLong(AIOR_AWAITED);
    if (awaited == NULL || PyModule_AddObjectRef(m, "AWAITED", awaited) < 0) {
        Py_XDECREF(awaited);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(awaited);
    return m;
}
