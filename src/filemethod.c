/* aioring._core's file methods that need no coroutine frame (see filemethod.h). */
#define PY_SSIZE_T_CLEAN
#include "filemethod.h"
#include "awaitable.h"
#include "fileops.h"

#include <stddef.h>
#include <structmember.h>

/* The raw file's slots the call reads and sets, by their offsets in the
   object (what their member descriptors say), and FileIO's `closed`. */
enum { BUSY, QUEUE, SHARED_OFFSET, POS, FD, WAITERS, N_SLOTS };
static const char *const slot_names[N_SLOTS] = {"busy", "queue", "shared_offset", "pos", "_fd", "_waiters"};

/* The methods it stands for: read(size), seek(offset). */
enum { READ, SEEK };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;                /* READ or SEEK, by name */
    PyObject *public_fn;     /* the Python method it stands for */
    PyObject *ops;           /* READ: the module whose read(fd, size, offset) is aioring.read */
    Py_ssize_t limit;        /* READ: sizes of this or more are public's; SEEK: offsets above this */
    PyTypeObject *raw_type;  /* the raw files it reads (RingFileIO; not a subclass) */
    Py_ssize_t slots[N_SLOTS];
    getter closed;           /* FileIO's closed getter, and its closure */
    void *closed_closure;
    PyObject *dict;          /* its attributes (functools.update_wrapper's) */
} FileMethod;

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* obj's slot at offset = value (a new reference taken). */
static void
slot_set(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(obj, offset);
    SLOT(obj, offset) = Py_NewRef(value);
    Py_XDECREF(old);
}

enum { UNSTARTED, READING, PACED, DELEGATING, FINISHED };

typedef struct {
    AIOR_AWAITABLE_HEAD     /* (public_fn: owner's, held) */
    FileMethod *owner;
    PyObject *args[3];      /* the call's arguments: the file, size (READ) or offset (SEEK), whence (SEEK, or NULL) */
    PyObject *raw;          /* the raw file, while the call has it (READING) */
    PyObject *inner;        /* the read (READING), or public's coroutine (DELEGATING) */
    int state;
} FileMethodCall;

static PyTypeObject FileMethod_Type, FileMethodCall_Type;
static PyObject *str_raw, *str_readable, *str_release, *str_read, *str_throw, *str_close;

/* -------------------------------------------------------------- FileMethod */

static PyObject *
file_method_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FileMethod *self = (FileMethod *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || nargs < 2 || nargs > (self->kind == SEEK ? 3 : 2))
        return PyObject_Vectorcall(self->public_fn, args, nargsf, kwnames);  /* (its errors, its binding) */
    FileMethodCall *call = PyObject_GC_New(FileMethodCall, &FileMethodCall_Type);
    if (call == NULL)
        return NULL;
    call->owner = (FileMethod *)Py_NewRef(callable);
    call->public_fn = Py_NewRef(self->public_fn);
    call->args[0] = Py_NewRef(args[0]);
    call->args[1] = Py_NewRef(args[1]);
    call->args[2] = nargs == 3 ? Py_NewRef(args[2]) : NULL;
    call->raw = NULL;
    call->inner = NULL;
    call->state = UNSTARTED;
    PyObject_GC_Track(call);
    return (PyObject *)call;
}

/* Where raw_type keeps the slots FileMethod reads and sets, and its closed
   getter: 0, or -1 with an exception set. */
static int
find_slots(FileMethod *self, PyTypeObject *raw_type)
{
    for (int i = 0; i < N_SLOTS; i++) {
        PyObject *descr = PyObject_GetAttrString((PyObject *)raw_type, slot_names[i]);
        if (descr == NULL)
            return -1;
        PyMemberDef *member = Py_IS_TYPE(descr, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        Py_DECREF(descr);
        if (member == NULL || member->type != T_OBJECT_EX || (member->flags & READONLY)) {
            PyErr_Format(PyExc_ValueError, "FileMethod() needs %s a slot of the raw file's", slot_names[i]);
            return -1;
        }
        self->slots[i] = member->offset;
    }
    PyObject *descr = PyObject_GetAttrString((PyObject *)raw_type, "closed");
    if (descr == NULL)
        return -1;
    if (!Py_IS_TYPE(descr, &PyGetSetDescr_Type) || ((PyGetSetDescrObject *)descr)->d_getset->get == NULL) {
        Py_DECREF(descr);
        PyErr_SetString(PyExc_ValueError, "FileMethod() needs FileIO's closed");
        return -1;
    }
    self->closed = ((PyGetSetDescrObject *)descr)->d_getset->get;
    self->closed_closure = ((PyGetSetDescrObject *)descr)->d_getset->closure;
    Py_DECREF(descr);  /* (the type holds it) */
    return 0;
}

static PyObject *
file_method_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *public_fn, *name, *ops;
    PyTypeObject *raw_type;
    Py_ssize_t limit;

    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "FileMethod() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OUO!On:FileMethod", &public_fn, &name, &PyType_Type, &raw_type, &ops, &limit))
        return NULL;
    int kind = PyUnicode_CompareWithASCIIString(name, "read") == 0   ? READ
               : PyUnicode_CompareWithASCIIString(name, "seek") == 0 ? SEEK
                                                                     : -1;
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError, "FileMethod() stands for read or seek, not %R", name);
        return NULL;
    }
    if (!PyCallable_Check(public_fn)) {
        PyErr_SetString(PyExc_ValueError, "FileMethod(public, name, raw_type, ops, limit) needs a callable public");
        return NULL;
    }
    FileMethod *self = (FileMethod *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = file_method_vectorcall;
    self->kind = kind;
    self->public_fn = Py_NewRef(public_fn);
    self->ops = Py_NewRef(ops);
    self->limit = limit;
    self->raw_type = (PyTypeObject *)Py_NewRef(raw_type);
    if (find_slots(self, raw_type) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* As a function's: bound to an instance, a method. */
static PyObject *
file_method_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int
file_method_traverse(FileMethod *self, visitproc visit, void *arg)
{
    Py_VISIT(self->public_fn);
    Py_VISIT(self->ops);
    Py_VISIT(self->raw_type);
    Py_VISIT(self->dict);
    return 0;
}

static int
file_method_clear(FileMethod *self)
{
    Py_CLEAR(self->public_fn);
    Py_CLEAR(self->ops);
    Py_CLEAR(self->raw_type);
    Py_CLEAR(self->dict);
    return 0;
}

static void
file_method_dealloc(FileMethod *self)
{
    PyObject_GC_UnTrack(self);
    file_method_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
file_method_repr(FileMethod *self)
{
    return PyObject_Repr(self->public_fn);
}

static PyGetSetDef file_method_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict},
    {NULL},
};

static PyTypeObject FileMethod_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.FileMethod",
    .tp_basicsize = sizeof(FileMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "FileMethod(public, name, raw_type, ops, limit): a coroutine method (read or seek) whose calls on a "
              "free file run in C (see filemethod.h).",
    .tp_new = file_method_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FileMethod, vectorcall),
    .tp_descr_get = file_method_get,
    .tp_dictoffset = offsetof(FileMethod, dict),
    .tp_traverse = (traverseproc)file_method_traverse,
    .tp_clear = (inquiry)file_method_clear,
    .tp_dealloc = (destructor)file_method_dealloc,
    .tp_getset = file_method_getset,
    .tp_repr = (reprfunc)file_method_repr,
};

/* ---------------------------------------------------------- FileMethodCall */

/* Whether raw is free for the call: a raw file of raw_type, not closed,
   readable (READ), its slots busy and shared_offset False and queue empty:
   1, 0, or -1 with an exception set. */
static int
file_free(FileMethod *owner, PyObject *raw)
{
    if (!Py_IS_TYPE(raw, owner->raw_type))
        return 0;
    PyObject *busy = SLOT(raw, owner->slots[BUSY]), *queue = SLOT(raw, owner->slots[QUEUE]);
    if (busy != Py_False || SLOT(raw, owner->slots[SHARED_OFFSET]) != Py_False || queue == NULL ||
        SLOT(raw, owner->slots[POS]) == NULL || SLOT(raw, owner->slots[FD]) == NULL)
        return 0;
    int queued = PyObject_IsTrue(queue);
    if (queued != 0)
        return queued < 0 ? -1 : 0;
    PyObject *closed = owner->closed(raw, owner->closed_closure);
    if (closed != Py_False) {
        Py_XDECREF(closed);
        return closed == NULL ? -1 : 0;
    }
    Py_DECREF(closed);
    if (owner->kind == SEEK)
        return 1;
    PyObject *readable = PyObject_CallMethodNoArgs(raw, str_readable);
    if (readable == NULL)
        return -1;
    Py_DECREF(readable);
    return readable == Py_True;
}

/* The call gives the file up, keeping any exception set meanwhile: busy
   False when no other call waits for it (release's answer then), else
   raw.release(); 0, or -1 with release's exception set (when none was). */
static int
give_up(FileMethodCall *self)
{
    PyObject *raw = self->raw;
    if (raw == NULL)
        return 0;
    self->raw = NULL;
    PyObject *waiters = SLOT(raw, self->owner->slots[WAITERS]);
    int waited = waiters == NULL ? 1 : PyObject_IsTrue(waiters);
    if (waited == 0) {
        slot_set(raw, self->owner->slots[BUSY], Py_False);
        Py_DECREF(raw);
        return 0;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = waited < 0 ? NULL : PyObject_CallMethodNoArgs(raw, str_release);
    int ret = r == NULL ? -1 : 0;
    Py_XDECREF(r);
    if (type != NULL) {
        if (ret < 0)
            PyErr_WriteUnraisable(raw);
        PyErr_Restore(type, value, tb);
        ret = -1;
    }
    Py_DECREF(raw);
    return ret;
}

/* The read ended (status PYGEN_RETURN: *result its bytes; PYGEN_ERROR: an
   exception set): the position moves past the bytes, and the call gives
   the file up. */
static PySendResult
ended(FileMethodCall *self, PySendResult status, PyObject **result)
{
    self->state = FINISHED;
    Py_CLEAR(self->inner);
    if (status == PYGEN_RETURN) {
        /* raw.pos += len(data) */
        PyObject *pos = SLOT(self->raw, self->owner->slots[POS]);
        Py_ssize_t n = PyObject_Size(*result);
        if (pos == NULL && n >= 0) {
            PyErr_SetString(PyExc_AttributeError, "pos");  /* (deleted while the call read) */
            n = -1;
        }
        PyObject *count = n < 0 ? NULL : PyLong_FromSsize_t(n);
        PyObject *moved = count == NULL ? NULL : PyNumber_Add(pos, count);
        Py_XDECREF(count);
        if (moved == NULL) {
            Py_CLEAR(*result);
            status = PYGEN_ERROR;
        } else {
            slot_set(self->raw, self->owner->slots[POS], moved);
            Py_DECREF(moved);
        }
    }
    if (give_up(self) < 0 && status == PYGEN_RETURN) {
        Py_CLEAR(*result);
        status = PYGEN_ERROR;
    }
    return status;
}

/* Whether obj is the int 0 (an exact int), no exception either way. */
static int
int_zero(PyObject *obj)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        PyErr_Clear();
    return v == 0;
}

/* How many arguments the call has (whence given: 3). */
static size_t
nargs_of(FileMethodCall *self)
{
    return self->args[2] != NULL ? 3 : 2;
}

/* The call goes on in public's coroutine. */
static PySendResult
delegate(FileMethodCall *self, PyObject **result)
{
    self->inner = PyObject_Vectorcall(self->owner->public_fn, self->args, nargs_of(self), NULL);
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

/* SEEK's first step (paced: its second, after the yield pace asked for):
   to an int offset of 0 to limit (whence, if given, the int 0), on a free
   file, the position set; else public's.  Unless paced, pace() first,
   whose True makes the step a bare yield to the task (as
   asyncio.sleep(0)'s). */
static PySendResult
seek_start(FileMethodCall *self, PyObject **result, int paced)
{
    PyObject *whence = self->args[2];
    long long offset = PyLong_CheckExact(self->args[1]) ? PyLong_AsLongLong(self->args[1]) : -1;
    if (offset == -1 && PyErr_Occurred())
        PyErr_Clear();  /* (beyond a long long: public's) */
    if (offset < 0 || offset > self->owner->limit ||
        (whence != NULL && !int_zero(whence)))
        return delegate(self, result);
    PyObject *raw = PyObject_GetAttr(self->args[0], str_raw);
    if (raw == NULL)
        return PYGEN_ERROR;
    int taken = file_free(self->owner, raw);
    if (taken > 0 && !paced) {
        PyObject *due = aior_pace();
        taken = due == NULL ? -1 : PyObject_IsTrue(due) ? 2 : 1;
        Py_XDECREF(due);
    }
    if (taken == 1)
        slot_set(raw, self->owner->slots[POS], self->args[1]);
    Py_DECREF(raw);
    switch (taken) {
    case 1:
        *result = Py_NewRef(self->args[1]);
        return PYGEN_RETURN;
    case 2:
        self->state = PACED;
        *result = Py_NewRef(Py_None);
        return PYGEN_NEXT;
    case 0:
        return delegate(self, result);
    default:
        return PYGEN_ERROR;
    }
}

/* The first step: the read in C when the file is free, else public's. */
static PySendResult
start(FileMethodCall *self, PyObject **result)
{
    if (self->owner->kind == SEEK)
        return seek_start(self, result, 0);
    Py_ssize_t n = PyLong_CheckExact(self->args[1]) ? PyLong_AsSsize_t(self->args[1]) : -1;
    if (n == -1 && PyErr_Occurred())
        PyErr_Clear();  /* (too large for an ssize_t: public's) */
    if (n <= 0 || n >= self->owner->limit)
        return delegate(self, result);
    PyObject *raw = PyObject_GetAttr(self->args[0], str_raw);
    if (raw == NULL)
        return PYGEN_ERROR;
    int taken = file_free(self->owner, raw);
    if (taken <= 0) {
        Py_DECREF(raw);
        return taken < 0 ? PYGEN_ERROR : delegate(self, result);
    }
    slot_set(raw, self->owner->slots[BUSY], Py_True);
    self->raw = raw;
    PyObject *args[3] = {Py_NewRef(SLOT(raw, self->owner->slots[FD])), self->args[1],
                         Py_NewRef(SLOT(raw, self->owner->slots[POS]))};
    PyObject *read = PyObject_GetAttr(self->owner->ops, str_read);  /* (looked up at each call, as Python would) */
    self->inner = read == NULL ? NULL : PyObject_Vectorcall(read, args, 3, NULL);
    Py_XDECREF(read);
    Py_DECREF(args[0]);
    Py_DECREF(args[2]);
    if (self->inner == NULL) {
        give_up(self);
        return PYGEN_ERROR;
    }
    self->state = READING;
    PySendResult status = PyIter_Send(self->inner, Py_None, result);
    return status == PYGEN_NEXT ? status : ended(self, status, result);
}

static PySendResult
step(FileMethodCall *self, PyObject *arg, PyObject **result)
{
    PySendResult status;
    switch (self->state) {
    case UNSTARTED:
        self->state = FINISHED;
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
            return PYGEN_ERROR;
        }
        return start(self, result);
    case READING:
        status = PyIter_Send(self->inner, arg, result);
        return status == PYGEN_NEXT ? status : ended(self, status, result);
    case PACED:
        self->state = FINISHED;
        return seek_start(self, result, 1);
    case DELEGATING:
        status = PyIter_Send(self->inner, arg, result);
        if (status != PYGEN_NEXT) {
            self->state = FINISHED;
            Py_CLEAR(self->inner);
        }
        return status;
    default:
        aior_reused();
        return PYGEN_ERROR;
    }
}

/* am_send: a step, whose error leaves no result behind (a task takes a
   result beside an error for a return). */
static PySendResult
call_am_send(FileMethodCall *self, PyObject *arg, PyObject **result)
{
    *result = NULL;
    PySendResult status = step(self, arg, result);
    if (status == PYGEN_ERROR)
        *result = NULL;
    return status;
}

/* throw() and close(): while READING, the read's first (what it answers by
   yielding goes on; its end ends the call); while DELEGATING, public's
   coroutine's; otherwise those of an unstarted coroutine of public, which
   ends as a native one does (the exception raised, nothing run). */
static PyObject *
call_forward(FileMethodCall *self, PyObject *method, PyObject *args)
{
    PyObject *result = NULL;
    if (self->state == READING) {
        PySendResult status = aior_inner_call(self->inner, method, args, &result);
        if (status == PYGEN_NEXT && method == str_throw)
            return result;
        if (method == str_close) {
            Py_XDECREF(result);
            Py_CLEAR(self->inner);
            self->state = FINISHED;
            if (give_up(self) < 0 || status == PYGEN_ERROR)
                return NULL;
            Py_RETURN_NONE;
        }
        return aior_step_result(ended(self, status, &result), result);
    }
    PyObject *target = self->inner;
    self->inner = NULL;
    int delegating = self->state == DELEGATING;
    self->state = FINISHED;
    if (!delegating) {
        if (method == str_close)
            Py_RETURN_NONE;
        target = PyObject_Vectorcall(self->owner->public_fn, self->args, nargs_of(self), NULL);
        if (target == NULL)
            return NULL;
    }
    result = aior_forward(target, method, args, method == str_throw, &self->inner);
    if (self->inner != NULL)
        self->state = DELEGATING;
    return result;
}

static PyObject *
call_throw(FileMethodCall *self, PyObject *args)
{
    return call_forward(self, str_throw, args);
}

static PyObject *
call_close(FileMethodCall *self, PyObject *unused)
{
    PyObject *none = PyTuple_New(0);
    if (none == NULL)
        return NULL;
    PyObject *result = call_forward(self, str_close, none);
    Py_DECREF(none);
    return result;
}

static int
call_traverse(FileMethodCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->public_fn);
    Py_VISIT(self->args[0]);
    Py_VISIT(self->args[1]);
    Py_VISIT(self->args[2]);
    Py_VISIT(self->raw);
    Py_VISIT(self->inner);
    return 0;
}

static int
call_clear(FileMethodCall *self)
{
    Py_CLEAR(self->args[0]);
    Py_CLEAR(self->args[1]);
    Py_CLEAR(self->args[2]);
    Py_CLEAR(self->raw);
    Py_CLEAR(self->inner);
    return 0;
}

/* As a native coroutine: never awaited, a RuntimeWarning; dropped while it
   reads, closed (the read closed, the file given up). */
static void
call_finalize(FileMethodCall *self)
{
    if ((self->state != UNSTARTED && self->state != READING) || self->owner == NULL || self->args[0] == NULL)
        return;
    int waiting = self->state == READING;
    if (!waiting)
        self->state = FINISHED;
    aior_awaitable_finalize((PyObject *)self, waiting, (PyObject * (*)(PyObject *, PyObject *)) call_close);
}

static void
call_dealloc(FileMethodCall *self)
{
    if ((self->state == UNSTARTED || self->state == READING) &&
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

static PyTypeObject FileMethodCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.FileMethodCall",
    .tp_basicsize = sizeof(FileMethodCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A FileMethod call's coroutine: its read or seek of a free file in C, or public's coroutine.",
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
aior_filemethod_add(PyObject *module)
{
    static const char *const names[] = {"_raw", "readable", "release", "read", "throw", "close"};
    PyObject **strs[] = {&str_raw, &str_readable, &str_release, &str_read, &str_throw, &str_close};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if ((*strs[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    if (PyType_Ready(&FileMethod_Type) < 0 || PyType_Ready(&FileMethodCall_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "FileMethod", (PyObject *)&FileMethod_Type);
}
