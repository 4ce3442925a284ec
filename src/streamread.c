/* aioring._core's stream reads that need no coroutine frame (see streamread.h). */
#define PY_SSIZE_T_CLEAN
#include "streamread.h"
#include "awaitable.h"
#include "channel.h"

#include <stddef.h>
#include <string.h>

/* The reads it stands for: readinto_exactly(buf), readinto(buf), read(n). */
enum { EXACTLY, INTO, BYTES };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *public_fn;    /* the Python method it stands for */
    PyObject *name;         /* its name (interned): what arrival() is told */
    PyObject *incomplete;   /* asyncio.IncompleteReadError */
    Py_ssize_t read_ahead;  /* buffers of this size or more are public's, unless all buffered */
    int kind;               /* EXACTLY, INTO or BYTES, by name */
    PyObject *dict;         /* its attributes (functools.update_wrapper's) */
} StreamRead;

enum { UNSTARTED, WAITING, DELEGATING, FINISHED };

typedef struct {
    AIOR_AWAITABLE_HEAD     /* (public_fn: owner's, held) */
    StreamRead *owner;
    PyObject *reader, *arg;  /* the call's arguments: buf (EXACTLY, INTO) or n (BYTES) */
    PyObject *buffered;     /* the reader's _buffer, from the first step on */
    PyObject *rx;           /* the reader's _rx (its Receiver), from the first step on */
    AiorRecv *fed;          /* rx, when it feeds this reader (borrowed), else NULL */
    PyObject *inner;        /* what it waits on (WAITING), or public's coroutine (DELEGATING) */
    Py_buffer view;         /* INTO: buf, held from the first step to the end (held) */
    Py_ssize_t n;           /* the bytes wanted (EXACTLY), or the most taken */
    int state;
    char held;
} StreamReadCall;

static PyTypeObject StreamRead_Type, StreamReadCall_Type;
static PyObject *str_tls, *str_rx, *str_exception, *str_buffer, *str_eof, *str_waiter, *str_paused,
    *str_resume, *str_throw, *str_close, *everything;

/* ------------------------------------------------------------ StreamRead */

static PyObject *
stream_read_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    StreamRead *self = (StreamRead *)callable;
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || PyVectorcall_NARGS(nargsf) != 2)
        return PyObject_Vectorcall(self->public_fn, args, nargsf, kwnames);  /* (its errors, its binding) */
    StreamReadCall *call = PyObject_GC_New(StreamReadCall, &StreamReadCall_Type);
    if (call == NULL)
        return NULL;
    call->owner = (StreamRead *)Py_NewRef(callable);
    call->public_fn = Py_NewRef(self->public_fn);
    call->reader = Py_NewRef(args[0]);
    call->arg = Py_NewRef(args[1]);
    call->held = 0;
    call->buffered = NULL;
    call->rx = NULL;
    call->fed = NULL;
    call->inner = NULL;
    call->n = 0;
    call->state = UNSTARTED;
    PyObject_GC_Track(call);
    return (PyObject *)call;
}

static PyObject *
stream_read_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *public_fn, *name, *incomplete;
    Py_ssize_t read_ahead;
    static const char *const names[] = {[EXACTLY] = "readinto_exactly", [INTO] = "readinto", [BYTES] = "read"};

    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "StreamRead() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OUnO:StreamRead", &public_fn, &name, &read_ahead, &incomplete))
        return NULL;
    if (!PyCallable_Check(public_fn) || !PyCallable_Check(incomplete)) {
        PyErr_SetString(PyExc_ValueError, "StreamRead(public, name, read_ahead, incomplete) needs callables");
        return NULL;
    }
    int kind = EXACTLY;
    while (kind <= BYTES && PyUnicode_CompareWithASCIIString(name, names[kind]) != 0)
        kind++;
    if (kind > BYTES) {
        PyErr_Format(PyExc_ValueError, "StreamRead() reads as readinto_exactly, readinto or read, not %R", name);
        return NULL;
    }
    StreamRead *self = (StreamRead *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = stream_read_vectorcall;
    self->kind = kind;
    self->name = Py_NewRef(name);
    PyUnicode_InternInPlace(&self->name);
    self->public_fn = Py_NewRef(public_fn);
    self->incomplete = Py_NewRef(incomplete);
    self->read_ahead = read_ahead;
    return (PyObject *)self;
}

/* As a function's: bound to an instance, a method. */
static PyObject *
stream_read_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int
stream_read_traverse(StreamRead *self, visitproc visit, void *arg)
{
    Py_VISIT(self->public_fn);
    Py_VISIT(self->name);
    Py_VISIT(self->incomplete);
    Py_VISIT(self->dict);
    return 0;
}

static int
stream_read_clear(StreamRead *self)
{
    Py_CLEAR(self->public_fn);
    Py_CLEAR(self->name);
    Py_CLEAR(self->incomplete);
    Py_CLEAR(self->dict);
    return 0;
}

static void
stream_read_dealloc(StreamRead *self)
{
    PyObject_GC_UnTrack(self);
    stream_read_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
stream_read_repr(StreamRead *self)
{
    return PyObject_Repr(self->public_fn);
}

static PyGetSetDef stream_read_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict},
    {NULL},
};

static PyTypeObject StreamRead_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.StreamRead",
    .tp_basicsize = sizeof(StreamRead),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "StreamRead(public, name, read_ahead, incomplete): a coroutine method whose reads that need no "
              "coroutine frame run in C (see streamread.h).",
    .tp_new = stream_read_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(StreamRead, vectorcall),
    .tp_descr_get = stream_read_get,
    .tp_dictoffset = offsetof(StreamRead, dict),
    .tp_traverse = (traverseproc)stream_read_traverse,
    .tp_clear = (inquiry)stream_read_clear,
    .tp_dealloc = (destructor)stream_read_dealloc,
    .tp_getset = stream_read_getset,
    .tp_repr = (reprfunc)stream_read_repr,
};

/* -------------------------------------------------------- StreamReadCall */

/* The length of buf when the small path takes it (a bytearray, or a
   writable one-dimensional C-contiguous memoryview of format "B"), else -1;
   no exception either way. */
static Py_ssize_t
small_length(PyObject *buf)
{
    if (PyByteArray_CheckExact(buf))
        return PyByteArray_GET_SIZE(buf);
    if (!PyMemoryView_Check(buf))
        return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_STRIDES) < 0) {
        PyErr_Clear();  /* (released, read-only: public's errors) */
        return -1;
    }
    Py_ssize_t n = -1;
    if (view.ndim == 1 && view.format != NULL && strcmp(view.format, "B") == 0 && PyBuffer_IsContiguous(&view, 'C'))
        n = view.len;
    PyBuffer_Release(&view);
    return n;
}

/* reader.<name> is not None: 1, 0, or -1 with an exception set. */
static int
attr_set(PyObject *reader, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(reader, name);
    if (value == NULL)
        return -1;
    int set = value != Py_None;
    Py_DECREF(value);
    return set;
}

/* reader._waiter = None, keeping any exception set meanwhile: 0, or -1
   with the setter's exception set (when none was). */
static int
unset_waiter(PyObject *reader)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int ret = PyObject_SetAttr(reader, str_waiter, Py_None);
    if (type != NULL) {
        if (ret < 0)
            PyErr_WriteUnraisable(reader);
        PyErr_Restore(type, value, tb);
        return -1;
    }
    return ret;
}

/* Whether the reader's _exception and _eof are known unset: its Receiver
   feeds it and says so (channel.h's _ended). */
static int
reader_quiet(StreamReadCall *self)
{
    return self->fed != NULL && self->fed->reader == self->reader && !self->fed->ended;
}

/* INTO: buf is let go (the call has ended). */
static void
let_go(StreamReadCall *self)
{
    if (self->held) {
        self->held = 0;
        PyBuffer_Release(&self->view);
    }
}

/* The buffer's first k bytes leave it. */
static int
drop_front(PyObject *buffered, Py_ssize_t k)
{
    if (PyByteArray_GET_SIZE(buffered) == k)
        return PyByteArray_Resize(buffered, 0);
    return PySequence_DelSlice(buffered, 0, k);
}

/* EXACTLY: buf[:] = the buffer's first n bytes, which leave it (as public
   does). */
static int
take(StreamReadCall *self)
{
    Py_buffer view;
    if (PyObject_GetBuffer(self->arg, &view, PyBUF_WRITABLE) == 0) {
        int same = view.len == self->n;
        if (same)
            memcpy(view.buf, PyByteArray_AS_STRING(self->buffered), (size_t)self->n);
        PyBuffer_Release(&view);
        if (same)
            return drop_front(self->buffered, self->n);
    } else {
        PyErr_Clear(); /* (what the assignment below raises instead) */
    }
    /* (buf changed size while the read waited: as an assignment to it does.) */
    PyObject *part = PyByteArray_GET_SIZE(self->buffered) == self->n
                         ? Py_NewRef(self->buffered)
                         : PySequence_GetSlice(self->buffered, 0, self->n);
    if (part == NULL)
        return -1;
    int ret = PyObject_SetItem(self->arg, everything, part);
    Py_DECREF(part);
    if (ret < 0)
        return -1;
    return drop_front(self->buffered, self->n);
}

/* A large read found its bytes read ahead, to be copied: its receiver's
   next header wait takes no more than it lacks (channel.h), and its next
   readinto() receives straight into the caller's buffer again. */
static void
read_ahead_body(StreamReadCall *self)
{
    if (AiorRecv_Check(self->rx)) {
        ((AiorRecv *)self->rx)->bodies = 1;
        ((AiorRecv *)self->rx)->into_small = 0;
    }
}

/* reader._maybe_resume_transport() when reader._paused (as asyncio's
   read() does after taking bytes): 0, or -1 with an exception set. */
static int
resume_if_paused(PyObject *reader)
{
    PyObject *paused = PyObject_GetAttr(reader, str_paused);
    int set = paused == NULL ? -1 : PyObject_IsTrue(paused);
    Py_XDECREF(paused);
    if (set <= 0)
        return set;
    PyObject *r = PyObject_CallMethodNoArgs(reader, str_resume);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The read's result, from what the buffer holds now (at least what the
   read needs, or at EOF anything): EXACTLY n (buf filled), INTO the bytes
   copied into buf (0: EOF), BYTES those bytes. */
static PySendResult
finish(StreamReadCall *self, PyObject **result)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(self->buffered), k;
    switch (self->owner->kind) {
    case EXACTLY:
        if (take(self) < 0)
            return PYGEN_ERROR;
        *result = PyLong_FromSsize_t(self->n);
        break;
    case INTO:
        k = size < self->view.len ? size : self->view.len;
        memcpy(self->view.buf, PyByteArray_AS_STRING(self->buffered), (size_t)k);
        let_go(self);
        if (k >= self->owner->read_ahead)
            read_ahead_body(self);
        if (drop_front(self->buffered, k) < 0)
            return PYGEN_ERROR;
        *result = PyLong_FromSsize_t(k);
        break;
    default:
        k = size < self->n ? size : self->n;
        *result = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(self->buffered), k);
        if (*result != NULL && (drop_front(self->buffered, k) < 0 || resume_if_paused(self->reader) < 0))
            Py_CLEAR(*result);
    }
    return *result == NULL ? PYGEN_ERROR : PYGEN_RETURN;
}

static PySendResult wait_ended(StreamReadCall *self, PySendResult status, PyObject **result);

/* The read's loop: the buffer holds what the read needs (EXACTLY n bytes,
   the others one), or an EOF ends it, or it waits (WAITING, its first
   yield in *result). */
static PySendResult
fill(StreamReadCall *self, PyObject **result)
{
    int exact = self->owner->kind == EXACTLY;
    Py_ssize_t need = exact ? self->n : 1;
    while (PyByteArray_GET_SIZE(self->buffered) < need) {
        int at_eof = 0;
        if (!reader_quiet(self)) {
            PyObject *eof = PyObject_GetAttr(self->reader, str_eof);
            at_eof = eof == NULL ? -1 : PyObject_IsTrue(eof);
            Py_XDECREF(eof);
        }
        if (at_eof < 0)
            return PYGEN_ERROR;
        if (at_eof && !exact)
            break;
        if (at_eof) {
            PyObject *partial = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(self->buffered),
                                                          PyByteArray_GET_SIZE(self->buffered));
            if (partial == NULL || PyByteArray_Resize(self->buffered, 0) < 0) {
                Py_XDECREF(partial);
                return PYGEN_ERROR;
            }
            PyObject *exc = PyObject_CallFunction(self->owner->incomplete, "Nn", partial, self->n);
            if (exc != NULL) {
                PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
                Py_DECREF(exc);
            }
            return PYGEN_ERROR;
        }
        PyObject *rx = self->rx;
        if (!AiorRecv_Check(rx)) {
            PyErr_Format(PyExc_TypeError, "a ring stream's _rx is %.100s, not a Receiver", Py_TYPE(rx)->tp_name);
            return PYGEN_ERROR;
        }
        Py_ssize_t want = exact ? self->n - PyByteArray_GET_SIZE(self->buffered) : 0;
        PyObject *waiter = aior_recv_arrival((AiorRecv *)rx, self->owner->name, want);
        if (waiter == NULL)
            return PYGEN_ERROR;
        if (waiter == Py_None) {
            Py_DECREF(waiter);
            continue;
        }
        if (PyCoro_CheckExact(waiter)) {
            self->inner = waiter;
        } else {
            unaryfunc await = Py_TYPE(waiter)->tp_as_async != NULL ? Py_TYPE(waiter)->tp_as_async->am_await : NULL;
            if (await == NULL)
                PyErr_Format(PyExc_TypeError, "arrival() answered %.100s, not an awaitable", Py_TYPE(waiter)->tp_name);
            self->inner = await == NULL ? NULL : await(waiter);
            Py_DECREF(waiter);
            if (self->inner == NULL) {
                unset_waiter(self->reader);  /* (the error stays the one set) */
                return PYGEN_ERROR;
            }
        }
        self->state = WAITING;
        PySendResult status = PyIter_Send(self->inner, Py_None, result);
        if (status == PYGEN_NEXT)
            return status;
        return wait_ended(self, status, result);
    }
    self->state = FINISHED;
    return finish(self, result);
}

/* The wait ended (status, as PyIter_Send's): reader._waiter = None, then
   the loop again, or the wait's exception. */
static PySendResult
wait_ended(StreamReadCall *self, PySendResult status, PyObject **result)
{
    Py_CLEAR(self->inner);
    self->state = FINISHED;
    if (status == PYGEN_RETURN)
        Py_CLEAR(*result);
    if (unset_waiter(self->reader) < 0 || status == PYGEN_ERROR)
        return PYGEN_ERROR;
    return fill(self, result);
}

/* The first step: public's coroutine's (delegated: DELEGATING). */
static PySendResult
delegate(StreamReadCall *self, PyObject **result)
{
    let_go(self);
    Py_CLEAR(self->buffered);
    PyObject *args[2] = {self->reader, self->arg};
    self->inner = PyObject_Vectorcall(self->owner->public_fn, args, 2, NULL);
    if (self->inner == NULL)
        return PYGEN_ERROR;
    self->state = DELEGATING;
    PySendResult status = PyIter_Send(self->inner, Py_None, result);
    if (status != PYGEN_NEXT) {
        self->state = FINISHED;
        Py_CLEAR(self->inner);
    }
    return status;
}

/* A large read's bytes that the socket holds right after its header
   (aior_recv_body_now), received into buf: n when they filled it.  Fewer
   go to the front of the reader's buffer (public's then copies them back
   and receives the rest).  As aior_recv_body_now's otherwise (0, -1, -2). */
static Py_ssize_t
body_now(StreamReadCall *self, Py_ssize_t n)
{
    PyObject *rx = self->rx;
    Py_ssize_t got = -1;
    Py_buffer view;
    if (AiorRecv_Check(rx) && ((AiorRecv *)rx)->rest_due) {
        if (PyObject_GetBuffer(self->arg, &view, PyBUF_WRITABLE) < 0)
            return -2;
        got = aior_recv_body_now((AiorRecv *)rx, view.buf, n);
        if (got > 0 && got < n &&
            PyByteArray_Resize(self->buffered, got) == 0)  /* (empty before: see start) */
            memcpy(PyByteArray_AS_STRING(self->buffered), view.buf, (size_t)got);
        else if (got > 0 && got < n)
            got = -2;
        PyBuffer_Release(&view);
    }
    return got;
}

/* The size the core's path takes for the call's argument, else -1 (no
   exception either way): EXACTLY and INTO a buffer small_length() takes
   (INTO a non-empty one, held from here on, as public holds it); BYTES an
   int n > 0. */
static Py_ssize_t
size_wanted(StreamReadCall *self)
{
    PyObject *arg = self->arg;
    switch (self->owner->kind) {
    case EXACTLY:
        return small_length(arg);
    case INTO:
        if (!PyByteArray_CheckExact(arg) && !PyMemoryView_Check(arg))
            return -1;
        if (PyObject_GetBuffer(arg, &self->view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_STRIDES) < 0) {
            PyErr_Clear();  /* (released, read-only: public's errors) */
            return -1;
        }
        self->held = 1;
        if (self->view.len > 0 && self->view.ndim == 1 &&
            (self->view.format == NULL || strcmp(self->view.format, "B") == 0) &&
            PyBuffer_IsContiguous(&self->view, 'C'))
            return self->view.len;
        let_go(self);
        return -1;
    default: {
        if (!PyLong_CheckExact(arg))
            return -1;
        Py_ssize_t n = PyLong_AsSsize_t(arg);
        if (n == -1 && PyErr_Occurred())
            PyErr_Clear();  /* (too large: public's) */
        return n > 0 ? n : -1;
    }
    }
}

/* The first step: the core's path (for EXACTLY a small buffer, or a large
   one whose bytes are all buffered; for INTO one that reads ahead), or
   public's coroutine's. */
static PySendResult
start(StreamReadCall *self, PyObject **result)
{
    Py_ssize_t n = size_wanted(self);
    if (n < 0)
        return delegate(self, result);
    self->rx = PyObject_GetAttr(self->reader, str_rx);
    if (self->rx == NULL)
        return PYGEN_ERROR;
    /* A reader its Receiver feeds has no TLS layer (_secure unsets _rx
       first), and the Receiver holds its buffer. */
    PyObject *held = AiorRecv_Check(self->rx) ? aior_recv_buffer_of((AiorRecv *)self->rx, self->reader) : NULL;
    if (held != NULL)
        self->fed = (AiorRecv *)self->rx;
    else {
        int tls = attr_set(self->reader, str_tls);
        if (tls < 0)
            return PYGEN_ERROR;
        if (tls || self->rx == Py_None) {
            Py_CLEAR(self->rx);
            return delegate(self, result);
        }
    }
    PyObject *exc = reader_quiet(self) ? Py_NewRef(Py_None) : PyObject_GetAttr(self->reader, str_exception);
    if (exc == NULL)
        return PYGEN_ERROR;
    if (exc != Py_None) {
        if (PyExceptionInstance_Check(exc))
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        else
            PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
        Py_DECREF(exc);
        return PYGEN_ERROR;
    }
    Py_DECREF(exc);
    self->buffered = held != NULL ? Py_NewRef(held) : PyObject_GetAttr(self->reader, str_buffer);
    if (self->buffered == NULL)
        return PYGEN_ERROR;
    if (!PyByteArray_Check(self->buffered)) {
        PyErr_SetString(PyExc_TypeError, "a stream reader's _buffer is a bytearray");
        return PYGEN_ERROR;
    }
    if (n >= self->owner->read_ahead && self->owner->kind == EXACTLY) {
        if (PyByteArray_GET_SIZE(self->buffered) < n) {
            /* A large read that waits: received straight into buf, at once
               when its header was just read (and all of it is there), else
               by public's coroutine. */
            Py_ssize_t got = PyByteArray_GET_SIZE(self->buffered) ? -1 : body_now(self, n);
            if (got == -2)
                return PYGEN_ERROR;
            if (got == n) {
                *result = PyLong_FromSsize_t(n);
                return *result == NULL ? PYGEN_ERROR : PYGEN_RETURN;
            }
            return delegate(self, result);
        }
        read_ahead_body(self);
    } else if (n >= self->owner->read_ahead && self->owner->kind == INTO && !PyByteArray_GET_SIZE(self->buffered)) {
        /* A large readinto() with nothing buffered receives straight into
           buf (public's), unless the receive into the chunk is out already
           or the peer's messages are small (_into_small). */
        AiorRecv *rx = AiorRecv_Check(self->rx) ? (AiorRecv *)self->rx : NULL;
        if (rx == NULL || !(rx->armed || rx->into_small))
            return delegate(self, result);
    }
    self->n = n;
    return fill(self, result);
}

static PySendResult step(StreamReadCall *self, PyObject *arg, PyObject **result);

/* am_send: a step, whose error leaves no result behind (a task takes a
   result beside an error for a return). */
static PySendResult
call_am_send(StreamReadCall *self, PyObject *arg, PyObject **result)
{
    *result = NULL;
    PySendResult status = step(self, arg, result);
    if (status == PYGEN_ERROR)
        *result = NULL;
    if (status != PYGEN_NEXT)
        let_go(self);
    return status;
}

static PySendResult
step(StreamReadCall *self, PyObject *arg, PyObject **result)
{
    switch (self->state) {
    case UNSTARTED:
        self->state = FINISHED;
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
            return PYGEN_ERROR;
        }
        return start(self, result);
    case WAITING: {
        PySendResult status = PyIter_Send(self->inner, arg, result);
        return status == PYGEN_NEXT ? status : wait_ended(self, status, result);
    }
    case DELEGATING: {
        PySendResult status = PyIter_Send(self->inner, arg, result);
        if (status != PYGEN_NEXT) {
            self->state = FINISHED;
            Py_CLEAR(self->inner);
        }
        return status;
    }
    default:
        aior_reused();
        return PYGEN_ERROR;
    }
}

/* throw() and close(): while it waits, the awaitable's first (what it
   answers by yielding goes on; its end goes on in the loop); while
   DELEGATING, public's coroutine's; otherwise those of an unstarted
   coroutine of public, which ends as a native one does (the exception
   raised, nothing run). */
static PyObject *
call_forward(StreamReadCall *self, PyObject *method, PyObject *args)
{
    PyObject *result = NULL;
    if (self->state == WAITING) {
        PySendResult status = aior_inner_call(self->inner, method, args, &result);
        if (status == PYGEN_NEXT && method == str_throw)
            return result;
        if (method == str_close) {
            Py_XDECREF(result);
            Py_CLEAR(self->inner);
            self->state = FINISHED;
            let_go(self);
            if (unset_waiter(self->reader) < 0 || status == PYGEN_ERROR)
                return NULL;
            Py_RETURN_NONE;
        }
        status = wait_ended(self, status, &result);
        if (status != PYGEN_NEXT)
            let_go(self);
        return aior_step_result(status, result);
    }
    PyObject *target = self->inner;
    self->inner = NULL;
    int delegating = self->state == DELEGATING;
    self->state = FINISHED;
    if (!delegating) {
        if (method == str_close)
            Py_RETURN_NONE;
        PyObject *cargs[2] = {self->reader, self->arg};
        target = PyObject_Vectorcall(self->owner->public_fn, cargs, 2, NULL);
        if (target == NULL)
            return NULL;
    }
    result = aior_forward(target, method, args, method == str_throw, &self->inner);
    if (self->inner != NULL)
        self->state = DELEGATING;
    return result;
}

static PyObject *
call_throw(StreamReadCall *self, PyObject *args)
{
    return call_forward(self, str_throw, args);
}

static PyObject *
call_close(StreamReadCall *self, PyObject *unused)
{
    PyObject *none = PyTuple_New(0);
    if (none == NULL)
        return NULL;
    PyObject *result = call_forward(self, str_close, none);
    Py_DECREF(none);
    return result;
}

static int
call_traverse(StreamReadCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->public_fn);
    Py_VISIT(self->reader);
    Py_VISIT(self->arg);
    Py_VISIT(self->buffered);
    Py_VISIT(self->rx);
    Py_VISIT(self->inner);
    return 0;
}

static int
call_clear(StreamReadCall *self)
{
    let_go(self);
    Py_CLEAR(self->reader);
    Py_CLEAR(self->arg);
    Py_CLEAR(self->buffered);
    self->fed = NULL;
    Py_CLEAR(self->rx);
    Py_CLEAR(self->inner);
    return 0;
}

/* As a native coroutine: never awaited, a RuntimeWarning; dropped while it
   waits, closed. */
static void
call_finalize(StreamReadCall *self)
{
    if ((self->state != UNSTARTED && self->state != WAITING) || self->owner == NULL || self->reader == NULL)
        return;
    int waiting = self->state == WAITING;
    if (!waiting)
        self->state = FINISHED;
    aior_awaitable_finalize((PyObject *)self, waiting, (PyObject * (*)(PyObject *, PyObject *)) call_close);
}

static void
call_dealloc(StreamReadCall *self)
{
    if ((self->state == UNSTARTED || self->state == WAITING) &&
        PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0)
        return;  /* (resurrected) */
    PyObject_GC_UnTrack(self);
    call_clear(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->public_fn);
    PyObject_GC_Del(self);
}

static PyMethodDef call_methods[] = {
    {"send", (PyCFunction)aior_awaitable_send, METH_O, "send(value): as a coroutine's."},
    {"throw", (PyCFunction)call_throw, METH_VARARGS, "throw(exc): as a coroutine's."},
    {"close", (PyCFunction)call_close, METH_NOARGS, "close(): as a coroutine's."},
    {NULL},
};

static PyAsyncMethods call_as_async = {
    .am_await = (unaryfunc)aior_awaitable_await,
    .am_send = (sendfunc)call_am_send,
};

static PyTypeObject StreamReadCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.StreamReadCall",
    .tp_basicsize = sizeof(StreamReadCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A StreamRead call's coroutine: the small (or all-buffered) path in C, or public's coroutine.",
    .tp_as_async = &call_as_async,
    .tp_iternext = (iternextfunc)aior_awaitable_iternext,
    .tp_traverse = (traverseproc)call_traverse,
    .tp_clear = (inquiry)call_clear,
    .tp_finalize = (destructor)call_finalize,
    .tp_dealloc = (destructor)call_dealloc,
    .tp_methods = call_methods,
    .tp_getset = aior_awaitable_getset,
};

int
aior_streamread_add(PyObject *module)
{
    str_tls = PyUnicode_InternFromString("_tls");
    str_rx = PyUnicode_InternFromString("_rx");
    str_exception = PyUnicode_InternFromString("_exception");
    str_buffer = PyUnicode_InternFromString("_buffer");
    str_eof = PyUnicode_InternFromString("_eof");
    str_waiter = PyUnicode_InternFromString("_waiter");
    str_paused = PyUnicode_InternFromString("_paused");
    str_resume = PyUnicode_InternFromString("_maybe_resume_transport");
    str_throw = PyUnicode_InternFromString("throw");
    str_close = PyUnicode_InternFromString("close");
    everything = PySlice_New(NULL, NULL, NULL);
    if (str_tls == NULL || str_rx == NULL || str_exception == NULL || str_buffer == NULL || str_eof == NULL ||
        str_waiter == NULL || str_paused == NULL || str_resume == NULL || str_throw == NULL || str_close == NULL ||
        everything == NULL)
        return -1;
    if (PyType_Ready(&StreamRead_Type) < 0 || PyType_Ready(&StreamReadCall_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "StreamRead", (PyObject *)&StreamRead_Type);
}
