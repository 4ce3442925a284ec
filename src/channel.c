/* aioring._core's Receiver: a stream's receive target (see channel.h for
 * what it holds and each entry point). */
#define PY_SSIZE_T_CLEAN
#include "channel.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

static PyObject *str_buffer, *str_waiter, *str_received, *str_set_result;

static int
no_reader(AiorRecv *rx)
{
    return rx->reader == NULL || rx->reader == Py_None;
}

/* Policy's part: the subclass's _received(res). */
static int
to_policy(AiorRecv *rx, int res)
{
    PyObject *num = PyLong_FromLong(res);
    if (num == NULL)
        return -1;
    PyObject *r = aior_call_method1((PyObject *)rx, str_received, num);
    Py_DECREF(num);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The reader's buffer (a new reference), or NULL with TypeError. */
static PyObject *
reader_buffer(AiorRecv *rx)
{
    PyObject *buf = PyObject_GetAttr(rx->reader, str_buffer);
    if (buf != NULL && !PyByteArray_CheckExact(buf)) {
        Py_DECREF(buf);
        PyErr_SetString(PyExc_TypeError, "a stream reader's buffer must be a bytearray");
        return NULL;
    }
    return buf;
}

/* Append the chunk's first n bytes to buf (feed_data, less a transport's needs). */
static int
append(AiorRecv *rx, PyObject *buf, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, size + n) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(buf) + size, rx->chunk, (size_t)n);
    return 0;
}

/* Wake the reader's waiter, if one waits and is not done, as asyncio's
   StreamReader does: it is the reader's waiter no more (a completion that
   follows before its task runs, EOF say, finds none to wake again). */
static int
wake(AiorRecv *rx)
{
    PyObject *waiter = PyObject_GetAttr(rx->reader, str_waiter);
    if (waiter == NULL)
        return -1;
    int ret = 0;
    if (waiter != Py_None) {
        int done = aior_future_done(waiter);
        if (done == 0 && PyObject_SetAttr(rx->reader, str_waiter, Py_None) < 0)
            done = -1;
        if (done == 0) {
            PyObject *r = aior_call_method1(waiter, str_set_result, Py_None);
            if (r == NULL)
                ret = -1;
            Py_XDECREF(r);
        } else if (done < 0) {
            ret = -1;
        }
    }
    Py_DECREF(waiter);
    return ret;
}

/* Start op again: the chunk pinned, its SQE prepared, op in the table.
   1: re-armed; 0: not (the SQ stays full, or op was started meanwhile);
   -1 with an exception set. */
static int
rearm(AiorRecv *rx, AiorCore *core, AiorOp *op)
{
    unsigned long long key;

    if (op->state == AIOR_SUBMITTED || op->pinned || op->polling || op->prep != Py_None)
        return 0; /* (started again meanwhile, or not a receive the core prepares) */
    if (PyObject_GetBuffer((PyObject *)rx, &op->view, PyBUF_WRITABLE) < 0)
        return -1;
    op->pinned = 1;
    op->cancelled = 0;
    int ret = aior_start(core, op, 0, &key);
    if (ret <= 0) {
        aior_unpin(op);
        return ret;
    }
    rx->armed = 1;
    return 1;
}

/* After a re-arm: the flush that submits its SQE.  Called after the waiter
   was woken, so that the flush runs after the reader's task (call_soon's
   order): what the task writes leaves in the same submit. */
static int
schedule_flush(AiorRecv *rx)
{
    if (rx->flush == NULL || rx->flush == Py_None)
        return 0;
    PyObject *r = PyObject_CallNoArgs(rx->flush);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The hot path's share: the bytes appended, the op re-armed (core: may
   re-arm), the waiter woken.  -1 with an exception set. */
static int
deliver(AiorRecv *rx, AiorCore *core, AiorOp *op, int res)
{
    PyObject *buf = reader_buffer(rx);
    if (buf == NULL)
        return -1;
    if (append(rx, buf, res) < 0) {
        Py_DECREF(buf);
        return -1;
    }
    int armed = 0;
    /* Re-armed before the waiter is woken: whatever its done() or
       set_result() runs (a TLS layer's watch) sees the receive out. */
    if (core != NULL && rx->core == (PyObject *)core && core->ring != NULL && res < rx->rearm_max &&
        PyByteArray_GET_SIZE(buf) < rx->buffer_max)
        armed = rearm(rx, core, op);
    Py_DECREF(buf);
    if (armed < 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        wake(rx); /* (the bytes are in the buffer: its reader still gets them) */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return -1;
    }
    if (wake(rx) < 0)
        return -1;
    return armed ? schedule_flush(rx) : 0;
}

int
aior_recv_complete(AiorCore *core, AiorOp *op, AiorRecv *rx, int res)
{
    rx->armed = 0;
    if (res <= 0 || rx->closing || rx->paused || no_reader(rx) || rx->chunk == NULL ||
        res > AIOR_RECV_CHUNK)
        return to_policy(rx, res);
    return deliver(rx, core, op, res);
}

/* ------------------------------------------------------------ the type */

static PyObject *
recv_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    AiorRecv *rx = (AiorRecv *)type->tp_alloc(type, 0);
    if (rx == NULL)
        return NULL;
    rx->reader = Py_NewRef(Py_None);
    rx->core = Py_NewRef(Py_None);
    rx->flush = Py_NewRef(Py_None);
    return (PyObject *)rx;
}

static int
recv_traverse(AiorRecv *rx, visitproc visit, void *arg)
{
    Py_VISIT(rx->reader);
    Py_VISIT(rx->core);
    Py_VISIT(rx->flush);
    return 0;
}

static int
recv_clear(AiorRecv *rx)
{
    Py_CLEAR(rx->reader);
    Py_CLEAR(rx->core);
    Py_CLEAR(rx->flush);
    return 0;
}

static void
recv_dealloc(AiorRecv *rx)
{
    PyObject_GC_UnTrack(rx);
    recv_clear(rx);
    free(rx->chunk); /* (no export is left: each holds a reference) */
    rx->chunk = NULL;
    Py_TYPE(rx)->tp_free((PyObject *)rx);
}

static PyObject *
recv_call(AiorRecv *rx, PyObject *args, PyObject *kwds)
{
    int res;

    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "a receiver takes one result");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "i:Receiver", &res))
        return NULL;
    if (aior_recv_complete(NULL, NULL, rx, res) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
recv_deliver(AiorRecv *rx, PyObject *arg)
{
    long res = PyLong_AsLong(arg);

    if (res == -1 && PyErr_Occurred())
        return NULL;
    if (res <= 0 || res > AIOR_RECV_CHUNK || rx->chunk == NULL) {
        PyErr_SetString(PyExc_ValueError, "_deliver() takes 0 < res <= RECV_CHUNK of a chunk");
        return NULL;
    }
    if (no_reader(rx)) {
        PyErr_SetString(PyExc_TypeError, "a receiver without a reader");
        return NULL;
    }
    if (deliver(rx, NULL, NULL, (int)res) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
recv_getbuffer(AiorRecv *rx, Py_buffer *view, int flags)
{
    if (rx->chunk == NULL) {
        rx->chunk = malloc(AIOR_RECV_CHUNK);
        if (rx->chunk == NULL) {
            PyErr_NoMemory();
            view->obj = NULL;
            return -1;
        }
    }
    return PyBuffer_FillInfo(view, (PyObject *)rx, rx->chunk, AIOR_RECV_CHUNK, 0, flags);
}

static PyBufferProcs recv_as_buffer = {
    .bf_getbuffer = (getbufferproc)recv_getbuffer,
};

static PyObject *
recv_get_has_chunk(AiorRecv *rx, void *unused)
{
    return PyBool_FromLong(rx->chunk != NULL);
}

static PyMethodDef recv_methods[] = {
    {"_deliver", (PyCFunction)recv_deliver, METH_O,
     "_deliver(res): append the chunk's first res bytes to the reader's buffer, wake its waiter."},
    {NULL},
};

static PyMemberDef recv_members[] = {
    {"_reader", T_OBJECT, offsetof(AiorRecv, reader), 0, NULL},
    {"_core", T_OBJECT, offsetof(AiorRecv, core), 0, NULL},
    {"_flush", T_OBJECT, offsetof(AiorRecv, flush), 0, NULL},
    {"_rearm_max", T_PYSSIZET, offsetof(AiorRecv, rearm_max), 0, NULL},
    {"_buffer_max", T_PYSSIZET, offsetof(AiorRecv, buffer_max), 0, NULL},
    {"_armed", T_BOOL, offsetof(AiorRecv, armed), 0, NULL},
    {"_closing", T_BOOL, offsetof(AiorRecv, closing), 0, NULL},
    {"_paused", T_BOOL, offsetof(AiorRecv, paused), 0, NULL},
    {NULL},
};

static PyGetSetDef recv_getset[] = {
    {"has_chunk", (getter)recv_get_has_chunk, NULL, "Whether the chunk exists.", NULL},
    {NULL},
};

PyTypeObject AiorRecv_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.Receiver",
    .tp_doc = "A stream's receive target: the core appends each receive to the "
              "reader's buffer and re-arms it (see channel.h).",
    .tp_basicsize = sizeof(AiorRecv),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_new = recv_new,
    .tp_call = (ternaryfunc)recv_call,
    .tp_traverse = (traverseproc)recv_traverse,
    .tp_clear = (inquiry)recv_clear,
    .tp_dealloc = (destructor)recv_dealloc,
    .tp_as_buffer = &recv_as_buffer,
    .tp_methods = recv_methods,
    .tp_members = recv_members,
    .tp_getset = recv_getset,
};

int
aior_channel_add_types(PyObject *module)
{
    str_buffer = PyUnicode_InternFromString("_buffer");
    str_waiter = PyUnicode_InternFromString("_waiter");
    str_received = PyUnicode_InternFromString("_received");
    str_set_result = PyUnicode_InternFromString("set_result");
    if (str_buffer == NULL || str_waiter == NULL || str_received == NULL || str_set_result == NULL)
        return -1;
    if (PyType_Ready(&AiorRecv_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "Receiver", (PyObject *)&AiorRecv_Type) < 0 ||
        PyModule_AddIntConstant(module, "RECV_CHUNK", AIOR_RECV_CHUNK) < 0)
        return -1;
    return 0;
}
