/* aioring._core's page-cache reads (see fileops.h). */
#define PY_SSIZE_T_CLEAN
#include "fileops.h"

#include <errno.h>
#include <limits.h>
#include <sys/uio.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

/* Policy's state (fileops_setup); plain == NULL: not set up. */
static PyObject *plain, *owed, *unyielded, *cache_missed;
static long yield_every;
static Py_ssize_t size_max;

static PyObject *
fileops_setup(PyObject *module, PyObject *args)
{
    PyObject *p, *o, *u, *miss;
    long every;
    Py_ssize_t most;

    if (!PyArg_ParseTuple(args, "O!O!O!lnO:fileops_setup", &PySet_Type, &p, &PyDict_Type, &o,
                          &PyList_Type, &u, &every, &most, &miss))
        return NULL;
    if (PyList_GET_SIZE(u) < 1 || !PyCallable_Check(miss)) {
        PyErr_SetString(PyExc_ValueError, "fileops_setup() needs a counter list and a callable");
        return NULL;
    }
    Py_XSETREF(plain, Py_NewRef(p));
    Py_XSETREF(owed, Py_NewRef(o));
    Py_XSETREF(unyielded, Py_NewRef(u));
    Py_XSETREF(cache_missed, Py_NewRef(miss));
    yield_every = every;
    size_max = most;
    Py_RETURN_NONE;
}

/* The calls served without a yield so far, or -1 when policy must take this
   call (its yield is due, or the counter is not an int). */
static long
unyielded_count(void)
{
    PyObject *count = PyList_GET_ITEM(unyielded, 0);
    if (!PyLong_CheckExact(count))
        return -1;
    long c = PyLong_AsLong(count);
    if (c == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return c < yield_every - 1 ? c : -1;
}

/* Whether the fast path may take this call: 1 with *fd and *offset set. */
static int
cached_due(PyObject *fd_obj, PyObject *offset_obj, int *fd, long long *offset)
{
    int overflow;

    if (plain == NULL || !PyLong_CheckExact(fd_obj) || !PyLong_CheckExact(offset_obj) ||
        PyDict_GET_SIZE(owed) || unyielded_count() < 0)
        return 0;
    long f = PyLong_AsLongAndOverflow(fd_obj, &overflow);
    if (overflow || f < INT_MIN || f > INT_MAX)
        return 0;
    long long o = PyLong_AsLongLongAndOverflow(offset_obj, &overflow);
    if (overflow || o < 0)
        return 0;
    int known = PySet_Contains(plain, fd_obj);
    if (known <= 0) {
        if (known < 0)
            PyErr_Clear();
        return 0;
    }
    *fd = (int)f;
    *offset = o;
    return 1;
}

/* One call served: counted (the check before it found no yield due). */
static int
count_served(void)
{
    long c = PyLong_AsLong(PyList_GET_ITEM(unyielded, 0));
    if (c == -1 && PyErr_Occurred())
        return -1;
    PyObject *next = PyLong_FromLong(c + 1);
    if (next == NULL)
        return -1;
    PyObject *old = PyList_GET_ITEM(unyielded, 0);
    PyList_SET_ITEM(unyielded, 0, next);
    Py_DECREF(old);
    return 0;
}

/* preadv2(RWF_NOWAIT) of n bytes at buf, without the GIL: the count, or -1
   with errno set. */
static Py_ssize_t
read_nowait(int fd, char *buf, Py_ssize_t n, long long offset)
{
    struct iovec iov = {buf, (size_t)n};
    Py_ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    got = preadv2(fd, &iov, 1, (off_t)offset, RWF_NOWAIT);
    Py_END_ALLOW_THREADS
    return got;
}

/* After a try that failed with `err`: a miss is policy's to learn from
   (cache_missed(fd)); 1 if it was one, 0 if not, -1 with an exception. */
static int
missed(int err, PyObject *fd_obj)
{
    if (err != EAGAIN && err != EWOULDBLOCK)
        return 0;
    PyObject *r = PyObject_CallOneArg(cache_missed, fd_obj);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 1;
}

static PyObject *
wrong_count(const char *name, Py_ssize_t nargs)
{
    PyErr_Format(PyExc_TypeError, "%s() takes exactly 3 arguments (%zd given)", name, nargs);
    return NULL;
}

static PyObject *
readinto_cached(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int fd;
    long long offset;
    Py_buffer view;

    if (nargs != 3)
        return wrong_count("readinto_cached", nargs);
    PyObject *buffer = args[1];
    if (!cached_due(args[0], args[2], &fd, &offset) ||
        !(PyByteArray_CheckExact(buffer) || PyMemoryView_Check(buffer)))
        return PyLong_FromLong(-1);
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();  /* (read-only, not contiguous or released: policy raises FileIO's error) */
        return PyLong_FromLong(-1);
    }
    Py_ssize_t n = view.len;
    Py_ssize_t got = read_nowait(fd, view.buf, n, offset);
    int err = errno;
    PyBuffer_Release(&view);
    if (got == n || got == 0)
        return count_served() < 0 ? NULL : PyLong_FromSsize_t(got);
    if (got > 0)
        return PyLong_FromSsize_t(-2 - got);
    int miss = missed(err, args[0]);
    if (miss < 0)
        return NULL;
    return PyLong_FromLong(miss ? -2 : -1);  /* (another error: the ring's read reports it) */
}

static PyObject *
read_cached(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int fd;
    long long offset;

    if (nargs != 3)
        return wrong_count("read_cached", nargs);
    if (!PyLong_CheckExact(args[1]) || !cached_due(args[0], args[2], &fd, &offset))
        Py_RETURN_NONE;
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size < 0 || size >= size_max) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    /* Not zeroed: only what the kernel filled leaves here. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *buf = PyBytes_AS_STRING(out);
    Py_ssize_t got = read_nowait(fd, buf, size, offset);
    int end = got == 0;  /* (at end of file, or size 0) */
    if (got > 0 && got < size) {  /* end of file, or only part of it was cached: ask again */
        Py_ssize_t more = read_nowait(fd, buf + got, size - got, offset + got);
        if (more < 0 && missed(errno, args[0]) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        end = more == 0;
        if (more > 0)
            got += more;
    }
    else if (got < 0) {
        int miss = missed(errno, args[0]);
        Py_DECREF(out);
        /* (nothing read, after a miss or another error: the ring's read, which reports an error) */
        return miss < 0 ? NULL : PyByteArray_FromStringAndSize(NULL, 0);
    }
    if (got == size || end) {
        if (count_served() < 0) {
            Py_DECREF(out);
            return NULL;
        }
        if (got == size)
            return out;
        PyObject *data = PyBytes_FromStringAndSize(buf, got);
        Py_DECREF(out);
        return data;
    }
    PyObject *head = PyByteArray_FromStringAndSize(buf, got);
    Py_DECREF(out);
    return head;
}

static PyMethodDef fileops_methods[] = {
    {"fileops_setup", fileops_setup, METH_VARARGS,
     "fileops_setup(plain, owed, unyielded, yield_every, size_max, cache_missed): policy's state "
     "(see fileops.h)."},
    {"readinto_cached", (PyCFunction)(void (*)(void))readinto_cached, METH_FASTCALL,
     "readinto_cached(fd, buffer, offset) -> int: a page-cache read into buffer at once "
     "(see fileops.h)."},
    {"read_cached", (PyCFunction)(void (*)(void))read_cached, METH_FASTCALL,
     "read_cached(fd, size, offset) -> bytes | bytearray | None: a page-cache read at once "
     "(see fileops.h)."},
    {NULL},
};

int
aior_fileops_add(PyObject *module)
{
    return PyModule_AddFunctions(module, fileops_methods);
}
