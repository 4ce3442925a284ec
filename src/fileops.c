/* aioring._core's page-cache reads (see fileops.h). */
#define PY_SSIZE_T_CLEAN
#include "fileops.h"
#include "awaitable.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <sys/uio.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

/* Policy's state (fileops_setup); plain == NULL: not set up. */
static PyObject *plain, *owed, *unyielded, *cache_missed, *pace_due, *fd_cache, *cold_reads;
static long yield_every;
static Py_ssize_t size_max;

int
aior_owed(void)
{
    return owed == NULL || PyDict_GET_SIZE(owed) != 0;
}

static PyObject *
fileops_setup(PyObject *module, PyObject *args)
{
    PyObject *p, *o, *u, *miss, *due;
    long every;
    Py_ssize_t most;

    PyObject *cache, *cold;

    if (!PyArg_ParseTuple(args, "O!O!O!lnOOO!O!:fileops_setup", &PySet_Type, &p, &PyDict_Type, &o,
                          &PyList_Type, &u, &every, &most, &miss, &due, &PyDict_Type, &cache, &PyList_Type,
                          &cold))
        return NULL;
    if (PyList_GET_SIZE(u) < 1 || PyList_GET_SIZE(cold) < 1 || !PyCallable_Check(miss) ||
        !PyCallable_Check(due)) {
        PyErr_SetString(PyExc_ValueError, "fileops_setup() needs two counter lists and two callables");
        return NULL;
    }
    Py_XSETREF(fd_cache, Py_NewRef(cache));
    Py_XSETREF(cold_reads, Py_NewRef(cold));
    Py_XSETREF(plain, Py_NewRef(p));
    Py_XSETREF(owed, Py_NewRef(o));
    Py_XSETREF(unyielded, Py_NewRef(u));
    Py_XSETREF(cache_missed, Py_NewRef(miss));
    Py_XSETREF(pace_due, Py_NewRef(due));
    yield_every = every;
    size_max = most;
    Py_RETURN_NONE;
}

/* The calls served without a yield so far, or -1 when policy must take this
   call (the counter is not an int). */
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
    return c;
}

/* A plain fd's flags are looked at again once every this many fast-path
   calls (of any fd): the number of a file aioring knew as plain may have
   been reused by os.open() for an O_DIRECT file, whose "non-blocking" read
   is a synchronous device read on the loop's thread.  One fcntl(F_GETFL)
   in 64 calls. */
#define RECHECK_EVERY 64
static unsigned int recheck_count;

/* fd (fd_obj), known to be plain, is O_DIRECT now (see RECHECK_EVERY):
   forgotten by policy's state (its next call looks its flags up), 1; 0 when
   it is still plain or the look failed (the read reports a bad fd). */
static int
direct_now(int fd, PyObject *fd_obj)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || !(flags & O_DIRECT))
        return 0;
    if (PySet_Discard(plain, fd_obj) < 0 || PyDict_DelItem(fd_cache, fd_obj) < 0)
        PyErr_Clear(); /* (not in the table: nothing to forget) */
    return 1;
}

/* Whether the fast path may take this call: 1 with *fd and *offset set.
   When a yield is due: with yield_due NULL, 0 (policy's call); otherwise 1,
   with *yield_due set (served, the call is policy's to count and yield). */
static int
cached_due(PyObject *fd_obj, PyObject *offset_obj, int *fd, long long *offset, int *yield_due)
{
    int overflow;
    long count;

    if (plain == NULL || !PyLong_CheckExact(fd_obj) || !PyLong_CheckExact(offset_obj) ||
        PyDict_GET_SIZE(owed) || (count = unyielded_count()) < 0)
        return 0;
    int due = count >= yield_every - 1;
    if (due && yield_due == NULL)
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
    if (++recheck_count % RECHECK_EVERY == 0 && direct_now((int)f, fd_obj))
        return 0;
    *fd = (int)f;
    *offset = o;
    if (yield_due != NULL)
        *yield_due = due;
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

/* Reads of at most this many bytes keep the GIL through their system call
   (see read_nowait). */
#define GIL_KEPT_MAX (16 * 1024)

/* preadv2(RWF_NOWAIT) of n bytes at buf: the count, or -1 with errno set.
   (One system call a read.  The kernel's part of a 4 KiB page-cache read,
   timed in a C loop here: pread 0.68 us, preadv2 0.78 us with or without
   RWF_NOWAIT, preadv 0.80 us: the tenth of a microsecond over pread is the
   iovec's, which no call that can refuse to wait avoids.)
   Without the GIL, unless n is at most GIL_KEPT_MAX and buf is heap memory
   (heap: a bytes object or a bytearray): a copy of a few pages from the page
   cache takes less than the GIL's release and retaking (which are a fifth of
   a 4 KiB read's time on its own), and a read that would wait for the disk
   does not wait, so another thread waits no longer than that.  (Other
   memory, a memoryview of a file's mmap say, may wait for the disk in the
   copy's page fault: the GIL is released for it.) */
static Py_ssize_t
read_nowait(int fd, char *buf, Py_ssize_t n, long long offset, int heap)
{
    struct iovec iov = {buf, (size_t)n};
    Py_ssize_t got;
    if (heap && n <= GIL_KEPT_MAX)
        return preadv2(fd, &iov, 1, (off_t)offset, RWF_NOWAIT);
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

/* readinto_cached's answer for args (fd, buffer, offset); with yield_due
   not NULL, also when a yield is due (see cached_due: a call served then is
   not counted). */
static PyObject *
try_readinto(PyObject *const *args, int *yield_due)
{
    int fd;
    long long offset;
    Py_buffer view;

    PyObject *buffer = args[1];
    if (!cached_due(args[0], args[2], &fd, &offset, yield_due) ||
        !(PyByteArray_CheckExact(buffer) || PyMemoryView_Check(buffer)))
        return PyLong_FromLong(-1);
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();  /* (read-only, not contiguous or released: policy raises FileIO's error) */
        return PyLong_FromLong(-1);
    }
    Py_ssize_t n = view.len;
    Py_ssize_t got = read_nowait(fd, view.buf, n, offset, PyByteArray_CheckExact(buffer));
    int err = errno;
    PyBuffer_Release(&view);
    if (got == n || got == 0)
        return (yield_due == NULL || !*yield_due) && count_served() < 0 ? NULL : PyLong_FromSsize_t(got);
    if (got > 0)
        return PyLong_FromSsize_t(-2 - got);
    int miss = missed(err, args[0]);
    if (miss < 0)
        return NULL;
    return PyLong_FromLong(miss ? -2 : -1);  /* (another error: the ring's read reports it) */
}

/* read_cached's answer for args (fd, size, offset); yield_due as
   try_readinto's. */
/* A C long of a list's item 0 (an int), or 0 when it is not one. */
static long
item0(PyObject *list)
{
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) < 1 || !PyLong_CheckExact(PyList_GET_ITEM(list, 0)))
        return 0;
    long v = PyLong_AsLong(PyList_GET_ITEM(list, 0));
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return v;
}

/* A read not tried: Ellipsis (a new reference) when it is policy's read
   straight from the ring (see read_cached), its fd's backoff counted down;
   else None.  NULL with an exception set. */
static PyObject *
not_tried(PyObject *const *args)
{
    int overflow;

    if (plain == NULL || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
        !PyLong_CheckExact(args[2]) || PyDict_GET_SIZE(owed) || item0(cold_reads) <= 0)
        Py_RETURN_NONE;
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    long long offset = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (size == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (size <= 1 || size >= size_max || overflow || offset < 0)
        Py_RETURN_NONE;
    PyObject *state = PyDict_GetItemWithError(fd_cache, args[0]);  /* (borrowed) */
    if (state == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    long skips = item0(state);
    if (skips <= 0 || PyList_GET_SIZE(state) < 3 || PyObject_IsTrue(PyList_GET_ITEM(state, 2)) != 0)
        Py_RETURN_NONE;  /* (no backoff to count down, or an O_DIRECT fd) */
    PyObject *left = PyLong_FromLong(skips - 1);
    if (left == NULL)
        return NULL;
    PyObject *old = PyList_GET_ITEM(state, 0);
    PyList_SET_ITEM(state, 0, left);
    Py_DECREF(old);
    return Py_NewRef(Py_Ellipsis);
}

/* Whether a readinto the try did not take (fd, buffer, offset) is a read of
   an fd known as O_DIRECT at an offset, nothing owed: policy reads those
   from the ring without a try, and cold() may start it.  1, 0, or -1 with an
   exception set. */
static int
direct_cold(PyObject *const *args)
{
    int overflow;

    if (plain == NULL || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[2]) || PyDict_GET_SIZE(owed))
        return 0;
    long long offset = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (overflow || offset < 0)
        return 0;
    PyObject *state = PyDict_GetItemWithError(fd_cache, args[0]);  /* (borrowed) */
    if (state == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyList_CheckExact(state) || PyList_GET_SIZE(state) < 3)
        return 0;
    return PyObject_IsTrue(PyList_GET_ITEM(state, 2));
}

static PyObject *
try_read(PyObject *const *args, int *yield_due)
{
    int fd;
    long long offset;

    if (!PyLong_CheckExact(args[1]) || !cached_due(args[0], args[2], &fd, &offset, yield_due))
        return not_tried(args);
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
    Py_ssize_t got = read_nowait(fd, buf, size, offset, 1);
    int end = got == 0;  /* (at end of file, or size 0) */
    if (got > 0 && got < size) {  /* end of file, or only part of it was cached: ask again */
        Py_ssize_t more = read_nowait(fd, buf + got, size - got, offset + got, 1);
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
        if ((yield_due == NULL || !*yield_due) && count_served() < 0) {
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

static PyObject *
readinto_cached(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return nargs == 3 ? try_readinto(args, NULL) : wrong_count("readinto_cached", nargs);
}

static PyObject *
read_cached(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return nargs == 3 ? try_read(args, NULL) : wrong_count("read_cached", nargs);
}

/* ------------------------------------------------------------ CacheFirst */

/* Which try a CacheFirst makes (see fileops.h). */
enum { TRY_READINTO, TRY_READ };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;             /* TRY_READINTO or TRY_READ */
    PyObject *public_fn;  /* the coroutine function it stands for */
    PyObject *rest;       /* rest(fd, x, offset, tried): the coroutine after a try not served */
    PyObject *served;     /* served(result): the coroutine after a hit when a yield was due */
    PyObject *cold;       /* cold(fd, x, offset) starts the ring's read of an Ellipsis (TRY_READ) or of
                             an O_DIRECT fd's readinto (TRY_READINTO) */
    PyObject *raised;     /* raised(ring, op, fd, size, offset, out, exc): the coroutine after it raised */
    PyObject *dict;       /* its attributes (__doc__, __wrapped__, ...: functools.update_wrapper) */
} CacheFirst;

/* One call's awaitable: its first step is the try. */
enum { UNSTARTED, COLD_UNSTARTED, DELEGATING, COLD, FINISHED };

typedef struct {
    AIOR_AWAITABLE_HEAD   /* (public_fn: owner's, held) */
    CacheFirst *owner;
    PyObject *args[3];    /* fd, buffer or size, offset */
    PyObject *inner;      /* rest's coroutine while DELEGATING; the op's future's iterator while COLD */
    PyObject *started;    /* cold()'s (ring, op, out, future) while COLD */
    int state;
} CacheFirstCall;

static PyTypeObject CacheFirst_Type, CacheFirstCall_Type;
static PyObject *str_throw, *str_close, *str_abandon;

/* A new call of owner's on args (2 or 3 of them: offset -1 when not given). */
static PyObject *
new_call(CacheFirst *owner, PyObject *const *args, Py_ssize_t nargs, int state)
{
    CacheFirstCall *call = PyObject_GC_New(CacheFirstCall, &CacheFirstCall_Type);
    if (call == NULL)
        return NULL;
    call->owner = (CacheFirst *)Py_NewRef(owner);
    call->public_fn = Py_NewRef(owner->public_fn);
    call->args[0] = Py_NewRef(args[0]);
    call->args[1] = Py_NewRef(args[1]);
    call->args[2] = nargs == 3 ? Py_NewRef(args[2]) : PyLong_FromLong(-1);
    call->inner = NULL;
    call->started = NULL;
    call->state = state;
    PyObject_GC_Track(call);
    return (PyObject *)call;
}

static PyObject *
cache_first_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    CacheFirst *self = (CacheFirst *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);

    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || nargs < 2 || nargs > 3)
        return PyObject_Vectorcall(self->public_fn, args, nargsf, kwnames);  /* (its errors, its binding) */
    return new_call(self, args, nargs, UNSTARTED);
}

/* cold_call(fd, size, offset): a call whose first step is cold()'s start,
   without a try (one made already answered Ellipsis). */
static PyObject *
cache_first_cold_call(PyObject *callable, PyObject *const *args, Py_ssize_t nargs)
{
    CacheFirst *self = (CacheFirst *)callable;
    if (self->cold == NULL || self->kind != TRY_READ || nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "cold_call(fd, size, offset) is a TRY_READ CacheFirst's with cold");
        return NULL;
    }
    return new_call(self, args, 3, COLD_UNSTARTED);
}

static PyMethodDef cache_first_methods[] = {
    {"cold_call", (PyCFunction)(void (*)(void))cache_first_cold_call, METH_FASTCALL,
     "cold_call(fd, size, offset): the awaitable of a read whose try answered Ellipsis."},
    {NULL},
};

static PyObject *
cache_first_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    int kind;
    PyObject *public_fn, *rest, *served, *cold = NULL, *raised = NULL;

    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "CacheFirst() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "iOOO|OO:CacheFirst", &kind, &public_fn, &rest, &served, &cold, &raised))
        return NULL;
    if ((kind != TRY_READINTO && kind != TRY_READ) || !PyCallable_Check(public_fn) || !PyCallable_Check(rest) ||
        !PyCallable_Check(served) || (cold == NULL) != (raised == NULL) ||
        (cold != NULL && (!PyCallable_Check(cold) || !PyCallable_Check(raised)))) {
        PyErr_SetString(PyExc_ValueError, "CacheFirst(kind, public, rest, served[, cold, raised]) needs a known "
                                          "kind and callables (cold and raised: both or neither)");
        return NULL;
    }
    CacheFirst *self = (CacheFirst *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = cache_first_vectorcall;
    self->kind = kind;
    self->public_fn = Py_NewRef(public_fn);
    self->rest = Py_NewRef(rest);
    self->served = Py_NewRef(served);
    self->cold = Py_XNewRef(cold);
    self->raised = Py_XNewRef(raised);
    return (PyObject *)self;
}

static int
cache_first_traverse(CacheFirst *self, visitproc visit, void *arg)
{
    Py_VISIT(self->public_fn);
    Py_VISIT(self->rest);
    Py_VISIT(self->served);
    Py_VISIT(self->cold);
    Py_VISIT(self->raised);
    Py_VISIT(self->dict);
    return 0;
}

static int
cache_first_clear(CacheFirst *self)
{
    Py_CLEAR(self->public_fn);
    Py_CLEAR(self->rest);
    Py_CLEAR(self->served);
    Py_CLEAR(self->cold);
    Py_CLEAR(self->raised);
    Py_CLEAR(self->dict);
    return 0;
}

static void
cache_first_dealloc(CacheFirst *self)
{
    PyObject_GC_UnTrack(self);
    cache_first_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
cache_first_repr(CacheFirst *self)
{
    return PyObject_Repr(self->public_fn);
}

static PyGetSetDef cache_first_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict},
    {NULL},
};

static PyTypeObject CacheFirst_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.CacheFirst",
    .tp_basicsize = sizeof(CacheFirst),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "CacheFirst(kind, public, rest, served): a coroutine function whose call's first step is the "
              "page cache's try (see fileops.h).",
    .tp_new = cache_first_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(CacheFirst, vectorcall),
    .tp_dictoffset = offsetof(CacheFirst, dict),
    .tp_traverse = (traverseproc)cache_first_traverse,
    .tp_clear = (inquiry)cache_first_clear,
    .tp_dealloc = (destructor)cache_first_dealloc,
    .tp_getset = cache_first_getset,
    .tp_methods = cache_first_methods,
    .tp_repr = (reprfunc)cache_first_repr,
};

/* cold_reads[0] += delta (the reads of uncached pages in flight). */
static void
cold_count_add(long delta)
{
    PyObject *n = PyLong_FromLong(item0(cold_reads) + delta);
    if (n == NULL || PyList_SetItem(cold_reads, 0, n) < 0)
        PyErr_WriteUnraisable(cold_reads);  /* (only memory runs out here) */
}

/* ring.abandon(op) of a cold read's started (ring, op, out, future): the
   op keeps its pin until its completion, which nobody reads. */
static void
cold_abandon(PyObject *started)
{
    PyObject *r = PyObject_CallMethodOneArg(PyTuple_GET_ITEM(started, 0), str_abandon, PyTuple_GET_ITEM(started, 1));
    if (r == NULL)
        PyErr_WriteUnraisable(started);
    Py_XDECREF(r);
}

/* The try answered Ellipsis (or, for readinto, left an O_DIRECT fd's read
   to the ring): cold() starts the ring's read.  Its result (bytes, or
   readinto's count) when it completed at once; else the call waits on the
   op's future (COLD). */
static PySendResult
cold_start(CacheFirstCall *self, PyObject **result)
{
    PyObject *started = PyObject_Vectorcall(self->owner->cold, self->args, 3, NULL);
    if (started == NULL)
        return PYGEN_ERROR;
    if (!PyTuple_CheckExact(started)) {
        *result = started;
        return PYGEN_RETURN;
    }
    PyObject *fut = PyTuple_GET_SIZE(started) == 4 ? PyTuple_GET_ITEM(started, 3) : NULL;
    unaryfunc await = fut != NULL && Py_TYPE(fut)->tp_as_async != NULL ? Py_TYPE(fut)->tp_as_async->am_await : NULL;
    if (await == NULL || (self->owner->kind == TRY_READ && !PyBytes_CheckExact(PyTuple_GET_ITEM(started, 2)))) {
        PyErr_SetString(PyExc_TypeError, "cold() answers its result or (ring, op, out, future), out bytes for read");
        if (fut != NULL)
            cold_abandon(started);
        Py_DECREF(started);
        return PYGEN_ERROR;
    }
    self->inner = await(fut);
    if (self->inner == NULL) {
        cold_abandon(started);
        Py_DECREF(started);
        return PYGEN_ERROR;
    }
    self->started = started;
    self->state = COLD;
    cold_count_add(1);
    return PYGEN_NEXT;
}

/* The end of the wait on a cold read's future (status PYGEN_RETURN: *result
   the count read; PYGEN_ERROR: an exception set, from the future or thrown
   in): the bytes read (readinto: the count), or raised()'s coroutine, which handles the exception
   as a coroutine's await of the future would (Ring.settle for a
   cancellation; the O_DIRECT fallback; else raises it) and counts the read
   out when it ends. */
static PySendResult
cold_end(CacheFirstCall *self, PySendResult status, PyObject **result)
{
    PyObject *started = self->started;
    self->started = NULL;
    Py_CLEAR(self->inner);
    self->state = FINISHED;
    if (status == PYGEN_RETURN) {
        cold_count_add(-1);
        PyObject *out = PyTuple_GET_ITEM(started, 2);
        int into = self->owner->kind == TRY_READINTO;
        Py_ssize_t n = PyLong_AsSsize_t(*result);
        if (into && n >= 0) {
            Py_DECREF(started);
            return PYGEN_RETURN;
        }
        Py_CLEAR(*result);
        if (n < 0 || into || n > PyBytes_GET_SIZE(out)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError, "a cold read's future answered a count out of range");
            Py_DECREF(started);
            return PYGEN_ERROR;
        }
        *result = n == PyBytes_GET_SIZE(out) ? Py_NewRef(out) : PyBytes_FromStringAndSize(PyBytes_AS_STRING(out), n);
        Py_DECREF(started);
        return *result == NULL ? PYGEN_ERROR : PYGEN_RETURN;
    }
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL && exc != NULL)
        PyException_SetTraceback(exc, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (exc == NULL) {
        cold_count_add(-1);
        Py_DECREF(started);
        return PYGEN_ERROR;
    }
    PyObject *args[7] = {PyTuple_GET_ITEM(started, 0), PyTuple_GET_ITEM(started, 1), self->args[0], self->args[1],
                         self->args[2], PyTuple_GET_ITEM(started, 2), exc};
    self->inner = PyObject_Vectorcall(self->owner->raised, args, 7, NULL);
    Py_DECREF(exc);
    if (self->inner == NULL) {
        cold_count_add(-1);
        cold_abandon(started);
        Py_DECREF(started);
        return PYGEN_ERROR;
    }
    Py_DECREF(started);
    self->state = DELEGATING;
    status = PyIter_Send(self->inner, Py_None, result);
    if (status != PYGEN_NEXT) {
        self->state = FINISHED;
        Py_CLEAR(self->inner);
    }
    return status;
}

/* A cold read's step: the future's, then cold_end's. */
static PySendResult
cold_step(CacheFirstCall *self, PyObject *arg, PyObject **result)
{
    PySendResult status = PyIter_Send(self->inner, arg, result);
    return status == PYGEN_NEXT ? status : cold_end(self, status, result);
}

/* close() of a call waiting on a cold read, or its finalization: as
   GeneratorExit at a coroutine's await of the future (Ring.abandon). */
static void
cold_close(CacheFirstCall *self)
{
    PyObject *started = self->started;
    self->started = NULL;
    Py_CLEAR(self->inner);
    self->state = FINISHED;
    cold_count_add(-1);
    cold_abandon(started);
    Py_DECREF(started);
}

/* The first step: the try; served, the result (or served's coroutine when
   a yield is due), else rest's coroutine. */
static PySendResult
call_start(CacheFirstCall *self, PyObject **result)
{
    int kind = self->owner->kind, yield_due = 0;
    PyObject *tried = kind == TRY_READINTO ? try_readinto(self->args, &yield_due)
                                           : try_read(self->args, &yield_due);
    if (tried == NULL)
        return PYGEN_ERROR;
    if (tried == Py_Ellipsis && self->owner->cold != NULL) {
        Py_DECREF(tried);
        return cold_start(self, result);
    }
    if (kind == TRY_READINTO && self->owner->cold != NULL && PyLong_CheckExact(tried) &&
        PyLong_AsLong(tried) == -1) {
        int direct = direct_cold(self->args);
        if (direct != 0) {
            Py_DECREF(tried);
            return direct < 0 ? PYGEN_ERROR : cold_start(self, result);
        }
    }
    if (kind == TRY_READINTO ? PyLong_AsLong(tried) >= 0 : PyBytes_CheckExact(tried)) {
        if (!yield_due) {
            *result = tried;
            return PYGEN_RETURN;
        }
        self->inner = PyObject_CallOneArg(self->owner->served, tried);
    }
    else {
        PyObject *rest_args[4] = {self->args[0], self->args[1], self->args[2], tried};
        self->inner = PyObject_Vectorcall(self->owner->rest, rest_args, 4, NULL);
    }
    Py_DECREF(tried);
    if (self->inner == NULL)
        return PYGEN_ERROR;
    self->state = DELEGATING;
    return PYGEN_NEXT;
}

static PySendResult call_step(CacheFirstCall *self, PyObject *arg, PyObject **result);

/* am_send: a step, whose error leaves no result behind (a task takes a
   result beside an error for a return). */
static PySendResult
call_am_send(CacheFirstCall *self, PyObject *arg, PyObject **result)
{
    *result = NULL;
    PySendResult status = call_step(self, arg, result);
    if (status == PYGEN_ERROR)
        *result = NULL;
    return status;
}

static PySendResult
call_step(CacheFirstCall *self, PyObject *arg, PyObject **result)
{
    if (self->state == UNSTARTED || self->state == COLD_UNSTARTED) {
        int cold = self->state == COLD_UNSTARTED;
        self->state = FINISHED;
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
            return PYGEN_ERROR;
        }
        PySendResult started = cold ? cold_start(self, result) : call_start(self, result);
        if (started != PYGEN_NEXT)
            return started;
    }
    if (self->state == COLD)
        return cold_step(self, arg, result);
    if (self->state == FINISHED) {
        aior_reused();
        return PYGEN_ERROR;
    }
    PySendResult status = PyIter_Send(self->inner, arg, result);
    if (status != PYGEN_NEXT) {
        self->state = FINISHED;
        Py_CLEAR(self->inner);
    }
    return status;
}

/* throw() (method "throw") and close(): while DELEGATING, rest's
   coroutine's; otherwise those of an unstarted coroutine of the public
   function, which ends as a native one does (the exception raised, nothing
   run).  A throw that the coroutine answers by yielding goes on with it. */
static PyObject *
call_forward(CacheFirstCall *self, PyObject *method, PyObject *args)
{
    PyObject *target = self->inner;
    self->inner = NULL;
    self->state = FINISHED;
    if (target == NULL) {
        if (self->args[0] == NULL)
            return aior_reused();
        target = PyObject_Vectorcall(self->owner->public_fn, self->args, 3, NULL);
        if (target == NULL)
            return NULL;
    }
    PyObject *result = aior_forward(target, method, args, method == str_throw, &self->inner);
    if (self->inner != NULL)
        self->state = DELEGATING;
    return result;
}

static PyObject *
call_throw(CacheFirstCall *self, PyObject *args)
{
    if (self->state == COLD) {
        /* (the future's iterator raises what is thrown, as the await of it would) */
        PyObject *bound = PyObject_GetAttr(self->inner, str_throw);
        PyObject *r = bound == NULL ? NULL : PyObject_Call(bound, args, NULL);
        Py_XDECREF(bound);
        if (r != NULL)
            return r;  /* (never: a future's iterator yields nothing to a throw) */
        PyObject *result = NULL;
        PySendResult status = cold_end(self, PYGEN_ERROR, &result);
        return aior_step_result(status, result);
    }
    return call_forward(self, str_throw, args);
}

static PyObject *
call_close(CacheFirstCall *self, PyObject *unused)
{
    if (self->state == COLD) {
        cold_close(self);
        Py_RETURN_NONE;
    }
    if (self->state != DELEGATING) {
        self->state = FINISHED;
        Py_RETURN_NONE;
    }
    PyObject *none = PyTuple_New(0);
    if (none == NULL)
        return NULL;
    PyObject *result = call_forward(self, str_close, none);
    Py_DECREF(none);
    return result;
}

static int
call_traverse(CacheFirstCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->public_fn);
    Py_VISIT(self->args[0]);
    Py_VISIT(self->args[1]);
    Py_VISIT(self->args[2]);
    Py_VISIT(self->inner);
    Py_VISIT(self->started);
    return 0;
}

static int
call_clear(CacheFirstCall *self)
{
    Py_CLEAR(self->args[0]);
    Py_CLEAR(self->args[1]);
    Py_CLEAR(self->args[2]);
    Py_CLEAR(self->inner);
    Py_CLEAR(self->started);
    return 0;
}

/* As a native coroutine never awaited: a RuntimeWarning; one dropped while
   it waits on a cold read: closed. */
static void
call_finalize(CacheFirstCall *self)
{
    int waiting = self->state == COLD && self->started != NULL;
    if (!waiting && ((self->state != UNSTARTED && self->state != COLD_UNSTARTED) || self->owner == NULL))
        return;
    if (!waiting)
        self->state = FINISHED;
    aior_awaitable_finalize((PyObject *)self, waiting, (PyObject * (*)(PyObject *, PyObject *)) call_close);
}

static void
call_dealloc(CacheFirstCall *self)
{
    if ((self->state == UNSTARTED || self->state == COLD_UNSTARTED || self->state == COLD) &&
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

static PyTypeObject CacheFirstCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.CacheFirstCall",
    .tp_basicsize = sizeof(CacheFirstCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A CacheFirst call's coroutine: the page cache's try, then rest's coroutine.",
    .tp_as_async = &call_as_async,
    .tp_iternext = (iternextfunc)aior_awaitable_iternext,
    .tp_traverse = (traverseproc)call_traverse,
    .tp_clear = (inquiry)call_clear,
    .tp_finalize = (destructor)call_finalize,
    .tp_dealloc = (destructor)call_dealloc,
    .tp_methods = call_methods,
    .tp_getset = aior_awaitable_getset,
};

/* pace(): one call counted; False, or pace_due()'s answer (policy's yield)
   when the count reaches yield_every (or is not an int). */
PyObject *
aior_pace(void)
{
    if (plain == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pace() before fileops_setup()");
        return NULL;
    }
    long count = unyielded_count();
    if (count < 0 || count >= yield_every - 1)
        return PyObject_CallNoArgs(pace_due);
    if (count_served() < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *
fileops_pace(PyObject *module, PyObject *unused)
{
    return aior_pace();
}

static PyMethodDef fileops_methods[] = {
    {"pace", fileops_pace, METH_NOARGS,
     "pace() -> bool: one call counted; True when the caller yields to the loop now (see fileops.h)."},
    {"fileops_setup", fileops_setup, METH_VARARGS,
     "fileops_setup(plain, owed, unyielded, yield_every, size_max, cache_missed, pace_due): "
     "policy's state "
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
    str_throw = PyUnicode_InternFromString("throw");
    str_close = PyUnicode_InternFromString("close");
    str_abandon = PyUnicode_InternFromString("abandon");
    if (str_throw == NULL || str_close == NULL || str_abandon == NULL)
        return -1;
    if (PyType_Ready(&CacheFirst_Type) < 0 || PyType_Ready(&CacheFirstCall_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "CacheFirst", (PyObject *)&CacheFirst_Type) < 0 ||
        PyModule_AddIntConstant(module, "TRY_READINTO", TRY_READINTO) < 0 ||
        PyModule_AddIntConstant(module, "TRY_READ", TRY_READ) < 0)
        return -1;
    return PyModule_AddFunctions(module, fileops_methods);
}
