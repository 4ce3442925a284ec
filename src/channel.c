/* aioring._core's Receiver, a stream's receive target, and Sender, the hot
 * path of its send queue (see channel.h for what each holds and each entry
 * point). */
#define PY_SSIZE_T_CLEAN
#include "channel.h"
#include "fileops.h"
#include "flush.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/io_uring.h>
#include <structmember.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

static PyObject *str_buffer, *str_waiter, *str_received, *str_set_result, *str_feed_eof, *str_pull_failed;
static PyObject *str_turn_then_wait, *str_loop, *str_arm, *str_op, *str_exception, *str_eof;

static int
is_none_obj(PyObject *obj)
{
    return obj == NULL || obj == Py_None;
}

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
    if (rx->buffer != NULL)
        return Py_NewRef(rx->buffer);
    PyObject *buf = PyObject_GetAttr(rx->reader, str_buffer);
    if (buf != NULL && !PyByteArray_CheckExact(buf)) {
        Py_DECREF(buf);
        PyErr_SetString(PyExc_TypeError, "a stream reader's buffer must be a bytearray");
        return NULL;
    }
    return buf;
}

/* Append n bytes from src to buf (feed_data, less a transport's needs). */
static int
append(const char *src, PyObject *buf, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, size + n) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(buf) + size, src, (size_t)n);
    return 0;
}

/* rx's core, or NULL when it has none (a ring without one). */
static AiorCore *
core_of(AiorRecv *rx)
{
    return rx->core != NULL && AiorCore_Check(rx->core) ? (AiorCore *)rx->core : NULL;
}

/* fut.set_result(None) if fut (not None) is not done; `owner`'s _waiter
   (unless NULL) unset first.  With core (not NULL), its callbacks go
   straight to the loop's ready deque where they may (aior_set_result). */
static int
wake_future(AiorCore *core, PyObject *fut, PyObject *owner)
{
    if (fut == Py_None)
        return 0;
    int done = aior_future_done(fut);
    if (done != 0)
        return done < 0 ? -1 : 0;
    if (owner != NULL && PyObject_SetAttr(owner, str_waiter, Py_None) < 0)
        return -1;
    return aior_set_result(core, fut, Py_None);
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
    int ret = wake_future(core_of(rx), waiter, rx->reader);
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

/* rearm() in restart()'s common case (the flush that submits it scheduled
   already, and not a start of the eager run's task; see launch in
   core.h): 1 when op was started again, 0 when policy has to (nothing
   changed), -1 with an exception set. */
static int
rearm_common(AiorRecv *rx, AiorOp *op)
{
    AiorCore *core = core_of(rx);
    if (core == NULL || core->ring == NULL || !aior_flush_scheduled(core) ||
        rx->closing || rx->paused || rx->armed || no_reader(rx) || op->state != AIOR_DONE)
        return 0;
    int eager = aior_eager_run(core, rx->loop);
    if (eager != 0)
        return eager < 0 ? -1 : 0;
    return rearm(rx, core, op);
}

/* A waiting reader's receive into the chunk started again by the core:
   policy's op (_op), when rearm_common() can.  1, 0 (policy's arm() has
   to), or -1 with an exception set. */
static int
arm_in_core(AiorRecv *rx)
{
    PyObject *op = PyObject_GetAttr((PyObject *)rx, str_op);
    if (op == NULL)
        PyErr_Clear();  /* (none: arm()'s) */
    int armed = op != NULL && PyObject_TypeCheck(op, &AiorOp_Type) ? rearm_common(rx, (AiorOp *)op) : 0;
    Py_XDECREF(op);
    return armed;
}

/* After a completion: the flush that submits what the reader's task
   starts.  Called after the waiter was woken, so that the flush runs after
   the reader's task (call_soon's order): what the task writes, and the
   receive its next wait starts, leave in the same submit. */
static int
schedule_flush(AiorRecv *rx)
{
    if (rx->flush == NULL || rx->flush == Py_None)
        return 0;
    if (rx->core != NULL && AiorCore_Check(rx->core))
        return aior_schedule_flush((AiorCore *)rx->core, NULL); /* (no call into policy) */
    PyObject *r = PyObject_CallNoArgs(rx->flush);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The hot path's share: the bytes appended, the waiter woken, and for a
   completion (op, not NULL) the loop's flush scheduled after the reader's
   task.  Not started again (unless _eager): the reader's next wait starts
   the receive (arrival), after what its task sends meanwhile, in that
   flush, so that a request's receive, submitted after its reply left,
   often finds the next request there already and completes in the submit,
   with no poll armed and no task work.  -1 with an exception set. */
static int
deliver(AiorRecv *rx, AiorOp *op, int res)
{
    PyObject *buf = reader_buffer(rx);
    if (buf == NULL)
        return -1;
    int ret = append(rx->chunk, buf, res);
    Py_DECREF(buf);
    if (ret < 0)
        return -1;
    AiorCore *core = op != NULL ? core_of(rx) : NULL;
    /* (_eager: started before the waiter is woken, so that whatever its
       set_result() runs, a TLS layer's feed, sees the receive out.) */
    if (core != NULL && rx->eager && !rx->rest_due && core->ring != NULL && rearm(rx, core, op) < 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        wake(rx); /* (the bytes are in the buffer: its reader still gets them) */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return -1;
    }
    if (wake(rx) < 0)
        return -1;
    return core != NULL ? schedule_flush(rx) : 0;
}

int
aior_recv_complete(AiorCore *core, AiorOp *op, AiorRecv *rx, int res)
{
    unsigned int limit = 0;
    if (op != NULL) {
        limit = op->limit;
        op->limit = 0;
    }
    rx->armed = 0;
    if (res <= 0 || rx->closing || rx->paused || no_reader(rx) || rx->chunk == NULL ||
        res > AIOR_RECV_CHUNK)
        return to_policy(rx, res);
    if (limit && (unsigned int)res == limit)
        rx->rest_due = 1;  /* (a header, capped, came whole: its body is most likely in the socket) */
    return deliver(rx, op, res);
}

/* ---------------------------------------------------- the receiver type */

static PyObject *
recv_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    AiorRecv *rx = (AiorRecv *)type->tp_alloc(type, 0);
    if (rx == NULL)
        return NULL;
    rx->reader = Py_NewRef(Py_None);
    rx->core = Py_NewRef(Py_None);
    rx->flush = Py_NewRef(Py_None);
    rx->into_op = Py_NewRef(Py_None);
    rx->pull_backoff = 1;
    rx->fd = -1;
    rx->rwf_nowait = RWF_NOWAIT;
    return (PyObject *)rx;
}

static int
recv_traverse(AiorRecv *rx, visitproc visit, void *arg)
{
    Py_VISIT(rx->reader);
    Py_VISIT(rx->buffer);
    Py_VISIT(rx->loop);
    Py_VISIT(rx->core);
    Py_VISIT(rx->flush);
    Py_VISIT(rx->into_op);
    Py_VISIT(rx->into_buf);
    Py_VISIT(rx->into_waiter);
    Py_VISIT(rx->scratch);
    return 0;
}

static int
recv_clear(AiorRecv *rx)
{
    Py_CLEAR(rx->reader);
    Py_CLEAR(rx->buffer);
    Py_CLEAR(rx->loop);
    Py_CLEAR(rx->core);
    Py_CLEAR(rx->flush);
    Py_CLEAR(rx->into_op);
    Py_CLEAR(rx->into_buf);
    Py_CLEAR(rx->into_waiter);
    Py_CLEAR(rx->scratch);
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
    if (deliver(rx, NULL, (int)res) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------- into the caller's own buffer */

/* The kernel moves at most this much in one read or write (MAX_RW_COUNT). */
#define AIOR_MAX_RW 0x7FFFF000L

static AiorCore *
into_core(AiorRecv *rx)
{
    if (is_none_obj(rx->core) || is_none_obj(rx->into_op) || !AiorCore_Check(rx->core))
        return NULL;
    AiorCore *core = (AiorCore *)rx->core;
    return core->ring != NULL ? core : NULL;
}

/* Prepare the receive into the rest of the caller's buffer, pinned by op:
   its args made from the template's opcode, fd and offset.  As aior_start:
   1, 0 (the SQ stays full) or -1. */
static int
start_into(AiorRecv *rx, AiorCore *core, AiorOp *op)
{
    PyObject *tmpl = op->args;
    unsigned long long key;

    if (!PyTuple_CheckExact(tmpl) || PyTuple_GET_SIZE(tmpl) < 6) {
        PyErr_SetString(PyExc_TypeError, "_into_op.args is (opcode, fd, start, length, offset, rw_flags)");
        return -1;
    }
    Py_ssize_t length = rx->into_end - rx->into_got;
    if (length > AIOR_MAX_RW)
        length = AIOR_MAX_RW;
    PyObject *args = Py_BuildValue("(OOnnOi)", PyTuple_GET_ITEM(tmpl, 0), PyTuple_GET_ITEM(tmpl, 1),
                                   rx->into_got, length, PyTuple_GET_ITEM(tmpl, 4),
                                   rx->into_exact ? rx->waitall : 0);
    if (args == NULL)
        return -1;
    op->args = args;
    op->cancelled = 0;
    int ret = aior_start(core, op, 0, &key);
    Py_DECREF(tmpl);
    return ret;
}

/* The receive into the caller's buffer ended: let go of it, wake the waiter. */
static int
end_into(AiorRecv *rx, int res)
{
    rx->into_out = 0;
    rx->into_res = res;
    Py_CLEAR(rx->into_buf);
    PyObject *waiter = rx->into_waiter;
    rx->into_waiter = NULL;
    if (waiter == NULL)
        return 0;
    int ret = wake_future(core_of(rx), waiter, NULL);
    Py_DECREF(waiter);
    return ret;
}

/* A read that does not wait met the connection's error `err`: policy's
   _pull_failed() fails the channel and raises it, as the ring's receive
   would have (the kernel reports it once).  Always NULL. */
static PyObject *
pull_failed(AiorRecv *rx, int err)
{
    PyObject *num = PyLong_FromLong(err);
    if (num == NULL)
        return NULL;
    PyObject *r = aior_call_method1((PyObject *)rx, str_pull_failed, num);
    Py_DECREF(num);
    if (r != NULL) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "_pull_failed() returned");
    }
    return NULL;
}

/* One recv(2) of the socket fd that does not wait, into buf: the bytes
   taken (0: EOF), -1 when none were there, or -2 with the connection's
   error raised (pull_failed). */
static Py_ssize_t
recv_now(AiorRecv *rx, int fd, char *buf, Py_ssize_t length)
{
    if (length > AIOR_MAX_RW)
        length = AIOR_MAX_RW;
    ssize_t n = recv(fd, buf, (size_t)length, MSG_DONTWAIT);
    if (n >= 0)
        return n;
    int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
        return -1;
    pull_failed(rx, err);
    return -2;
}

/* The rest of a frame whose start came already is most likely in the socket
   too: one receive that does not wait takes what is there into the pinned
   buffer (op's view, from into_got on), counted in into_got, without a ring
   receive or a wake-up.  The bytes taken (0: EOF), -1 when none were
   (nothing there, or not a socket), or -2 with the connection's error
   raised. */
static Py_ssize_t
receive_at_once(AiorRecv *rx, AiorOp *op)
{
    PyObject *tmpl = op->args;
    if (!PyTuple_CheckExact(tmpl) || PyTuple_GET_SIZE(tmpl) < 2)
        return -1;
    long opcode = PyLong_AsLong(PyTuple_GET_ITEM(tmpl, 0));
    long fd = PyLong_AsLong(PyTuple_GET_ITEM(tmpl, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear(); /* (start_into raises it) */
        return -1;
    }
    if (opcode != IORING_OP_RECV)
        return -1;
    Py_ssize_t n = recv_now(rx, (int)fd, (char *)op->view.buf + rx->into_got, rx->into_end - rx->into_got);
    if (n > 0)
        rx->into_got += n;
    return n;
}

Py_ssize_t
aior_recv_body_now(AiorRecv *rx, char *buf, Py_ssize_t n)
{
    int due = rx->rest_due;
    rx->rest_due = 0;
    if (!due || !rx->is_socket || rx->closing || rx->paused || rx->armed || rx->into_out || no_reader(rx))
        return -1;
    Py_ssize_t got = recv_now(rx, rx->fd, buf, n);
    if (got > 0)
        rx->bodies = 1;
    return got;
}

static PyObject *
recv_receive_into(AiorRecv *rx, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_receive_into(buffer, start, exact, waiter)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    int exact = PyObject_IsTrue(args[2]);
    if (exact < 0)
        return NULL;
    AiorCore *core = into_core(rx);
    int rest_due = rx->rest_due;
    rx->rest_due = 0;
    if (core == NULL || rx->into_out || rx->armed || rx->closing || rx->paused)
        Py_RETURN_FALSE;
    AiorOp *op = (AiorOp *)rx->into_op;
    if (op->state == AIOR_SUBMITTED || op->pinned)
        Py_RETURN_FALSE;
    rx->bodies = 1;
    if (PyObject_GetBuffer(args[0], &op->view, PyBUF_WRITABLE) < 0)
        return NULL;
    op->pinned = 1;
    if (start < 0 || start >= op->view.len) {
        aior_unpin(op);
        PyErr_SetString(PyExc_ValueError, "_receive_into() starts outside the buffer");
        return NULL;
    }
    rx->into_got = start;
    rx->into_end = op->view.len;
    rx->into_exact = (char)exact;
    rx->into_res = 0;
    Py_ssize_t taken = (exact && start > 0) || rest_due ? receive_at_once(rx, op) : -1;
    if (taken == -2) {
        aior_unpin(op);
        return NULL;
    }
    if (taken == 0 || rx->into_got == rx->into_end || (taken > 0 && !exact)) {
        /* All of it (or EOF, or one receive's worth) there and then: no
           receive, the waiter woken now. */
        aior_unpin(op);
        rx->into_res = (int)taken;
        if (wake_future(core_of(rx), args[3], NULL) < 0)
            return NULL;
        Py_RETURN_TRUE;
    }
    int ret = start_into(rx, core, op);
    if (ret <= 0) {
        aior_unpin(op);
        if (ret < 0)
            return NULL;
        if (taken > 0) {
            /* (the SQ stays full: what came at once is its outcome, short) */
            rx->into_res = (int)taken;
            if (wake_future(core_of(rx), args[3], NULL) < 0)
                return NULL;
            Py_RETURN_TRUE;
        }
        Py_RETURN_FALSE;
    }
    rx->into_out = 1;
    Py_XSETREF(rx->into_buf, Py_NewRef(args[0]));
    Py_XSETREF(rx->into_waiter, Py_NewRef(args[3]));
    if (schedule_flush(rx) < 0)
        return NULL; /* (its SQE waits in the SQ for the next flush) */
    Py_RETURN_TRUE;
}

static PyObject *
recv_into_done(AiorRecv *rx, PyObject *arg)
{
    long res = PyLong_AsLong(arg);
    if (res == -1 && PyErr_Occurred())
        return NULL;
    if (!rx->into_out)
        Py_RETURN_NONE; /* (nothing out: a late call of a closed ring's drop) */
    AiorOp *op = (AiorOp *)rx->into_op;
    if (res > 0)
        rx->into_got += res;
    AiorCore *core = into_core(rx);
    if (res > 0 && rx->into_exact && rx->into_got < rx->into_end && core != NULL && !op->cancelled &&
        !rx->closing && !rx->paused && rx->into_buf != NULL && op->state != AIOR_SUBMITTED &&
        !op->pinned) {
        /* Short: the rest of the buffer, received at once. */
        if (PyObject_GetBuffer(rx->into_buf, &op->view, PyBUF_WRITABLE) < 0)
            goto failed;
        op->pinned = 1;
        if (op->view.len != rx->into_end) {
            aior_unpin(op);
            PyErr_SetString(PyExc_BufferError, "the buffer of a receive changed size");
            goto failed;
        }
        int ret = start_into(rx, core, op);
        if (ret < 0) {
            aior_unpin(op);
            goto failed;
        }
        if (ret > 0) {
            if (schedule_flush(rx) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        aior_unpin(op); /* (the SQ stays full: policy starts the rest) */
    }
    if (end_into(rx, (int)res) < 0)
        return NULL;
    Py_RETURN_NONE;

failed: {
        /* The receive ends with what it got; the exception goes on. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        end_into(rx, (int)res);
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return NULL;
    }
}

/* ------------------------------------------- reads that do not wait */

/* pull_due(): 1, or 0 with one less to skip. */
static int
pull_due(AiorRecv *rx)
{
    if (rx->pull_skip) {
        rx->pull_skip--;
        return 0;
    }
    return 1;
}

static PyObject *
recv_pull_due(AiorRecv *rx, PyObject *unused)
{
    return PyBool_FromLong(pull_due(rx));
}

static PyObject *
recv_pull(AiorRecv *rx, PyObject *unused)
{
    Py_buffer view;
    ssize_t n;
    int err;

    if (rx->closing || no_reader(rx))
        Py_RETURN_FALSE;
    if (rx->scratch == NULL || PyObject_GetBuffer(rx->scratch, &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        rx->pull_skip = AIOR_RING_ONLY; /* (nothing to read into: the ring only) */
        Py_RETURN_FALSE;
    }
    size_t len = view.len < AIOR_RECV_CHUNK ? (size_t)view.len : AIOR_RECV_CHUNK;
    size_t cap = (size_t)rx->cap;
    if (cap && len > cap)
        len = cap; /* (a header's: see arrival) */
    else
        cap = 0;
    if (rx->is_socket) {
        n = recv(rx->fd, view.buf, len, MSG_DONTWAIT);
    } else {
        struct iovec iov = {view.buf, len};
        n = preadv2(rx->fd, &iov, 1, -1, rx->rwf_nowait);
    }
    err = errno;
    if (n <= 0) {
        PyBuffer_Release(&view);
        if (n == 0) {
            rx->pull_backoff = 1;
            PyObject *r = PyObject_CallMethodNoArgs(rx->reader, str_feed_eof);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
            Py_RETURN_TRUE;
        }
        if (err == EAGAIN || err == EWOULDBLOCK) {
            rx->pull_skip = rx->pull_backoff;
            if (rx->pull_backoff < 64)
                rx->pull_backoff *= 2;
            Py_RETURN_FALSE;
        }
        if (err == EINTR)
            Py_RETURN_FALSE; /* (the ring's turn) */
        if (err == EOPNOTSUPP || err == EINVAL || err == ENOSYS || err == ENOTSOCK) {
            rx->pull_skip = AIOR_RING_ONLY; /* (a kernel without RWF_NOWAIT for pipes) */
            Py_RETURN_FALSE;
        }
        return pull_failed(rx, err);
    }
    rx->pull_backoff = 1;
    if (cap && (size_t)n == cap)
        rx->rest_due = 1;
    PyObject *buf = reader_buffer(rx);
    int ret = buf == NULL ? -1 : append(view.buf, buf, n);
    Py_XDECREF(buf);
    PyBuffer_Release(&view);
    if (ret < 0)
        return NULL;
    Py_RETURN_TRUE;
}

/* ------------------------------------------------ a read's wait */

/* The reader's waiter set to None, the exception set before kept. */
static void
unset_waiter(AiorRecv *rx)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyObject_SetAttr(rx->reader, str_waiter, Py_None) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

static PyObject *
do_arrival(AiorRecv *rx, PyObject *func_name)
{
    if (no_reader(rx)) {
        PyErr_SetString(PyExc_RuntimeError, "the receiver has no reader");
        return NULL;
    }
    PyObject *reader = rx->reader;
    PyObject *waiter = PyObject_GetAttr(reader, str_waiter);
    if (waiter == NULL)
        return NULL;
    int busy = waiter != Py_None;
    Py_DECREF(waiter);
    if (busy) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U() called while another coroutine is already waiting for incoming data", func_name);
        return NULL;
    }
    Py_INCREF(rx);  /* (what follows calls Python, which may let go of the reader's channel) */
    Py_INCREF(reader);
    PyObject *result = NULL;
    /* The receive goes out with this iteration's flush where the core can
       start it (no read that does not wait first: the submit tries as
       much, and the loop runs before the reader gets its bytes). */
    if (!rx->armed && arm_in_core(rx) < 0)
        goto done;
    if (!rx->armed && pull_due(rx)) {
        PyObject *due = aior_pace();
        if (due == NULL)
            goto done;
        int yields = PyObject_IsTrue(due);
        Py_DECREF(due);
        if (yields < 0)
            goto done;
        if (yields) {  /* (a stream that always has data still lets the loop run) */
            result = PyObject_CallMethodNoArgs(reader, str_turn_then_wait);
            goto done;
        }
        if (!rx->armed) {
            PyObject *got = recv_pull(rx, NULL);
            if (got == NULL)
                goto done;
            int fed = got == Py_True;
            Py_DECREF(got);
            if (fed) {
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
    }
    static AiorMethod create_future = AIOR_METHOD("create_future");
    PyObject *loop = rx->loop != NULL ? Py_NewRef(rx->loop) : PyObject_GetAttr(reader, str_loop);
    waiter = loop == NULL ? NULL : aior_call_known(&create_future, &loop, 1);
    Py_XDECREF(loop);
    if (waiter == NULL)
        goto done;
    if (PyObject_SetAttr(reader, str_waiter, waiter) < 0) {
        Py_DECREF(waiter);
        goto done;
    }
    if (!rx->armed) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)rx, str_arm);
        if (r == NULL) {
            unset_waiter(rx);
            Py_DECREF(waiter);
            goto done;
        }
        Py_DECREF(r);
    }
    result = waiter;
done:
    Py_DECREF(reader);
    Py_DECREF(rx);
    return result;
}

PyObject *
aior_recv_arrival(AiorRecv *rx, PyObject *func_name, Py_ssize_t want)
{
    /* After a body read into the caller's buffer, an exact read's wait
       (a header's) takes no more than it lacks: see channel.h. */
    rx->rest_due = 0;
    rx->cap = want > 0 && want <= UINT_MAX && rx->bodies && rx->is_socket && core_of(rx) != NULL &&
              core_of(rx)->ring != NULL ? want : 0;
    rx->bodies = 0;
    AiorOp *capped = NULL;
    if (rx->cap) {
        /* The receive into the chunk that arm() starts (policy's _op), capped. */
        PyObject *op = PyObject_GetAttr((PyObject *)rx, str_op);
        if (op == NULL)
            PyErr_Clear(); /* (none: pull() alone is capped) */
        else if (PyObject_TypeCheck(op, &AiorOp_Type) && ((AiorOp *)op)->state != AIOR_SUBMITTED &&
                 ((AiorOp *)op)->prep == Py_None)
            capped = (AiorOp *)op;
        else
            Py_DECREF(op);
        if (capped != NULL)
            capped->limit = (unsigned int)rx->cap;
    }
    PyObject *result = do_arrival(rx, func_name);
    rx->cap = 0;
    if (capped != NULL) {
        if (capped->state != AIOR_SUBMITTED)
            capped->limit = 0; /* (not started: a pull() fed the reader, or an error) */
        Py_DECREF(capped);
    }
    return result;
}

static PyObject *
recv_arrival(AiorRecv *rx, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t want = 0;
    if (nargs < 1 || nargs > 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "arrival() takes the name of the read (a str) and what it lacks");
        return NULL;
    }
    if (nargs == 2 && (want = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    return aior_recv_arrival(rx, args[0], want);
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

/* _rearm(op): policy's arm() of its receive into the chunk, whose CQE is
   in, as a completion re-arms it, in restart()'s common case: the flush
   that submits it scheduled already, no eager run going. */
static PyObject *
recv_rearm_op(AiorRecv *rx, PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &AiorOp_Type)) {
        PyErr_SetString(PyExc_TypeError, "_rearm() takes an Op");
        return NULL;
    }
    int armed = rearm_common(rx, (AiorOp *)arg);
    if (armed < 0)
        return NULL;
    return Py_NewRef(armed ? Py_True : Py_False);
}

static PyMethodDef recv_methods[] = {
    {"_deliver", (PyCFunction)recv_deliver, METH_O,
     "_deliver(res): append the chunk's first res bytes to the reader's buffer, wake its waiter."},
    {"_receive_into", (PyCFunction)(void (*)(void))recv_receive_into, METH_FASTCALL,
     "_receive_into(buffer, start, exact, waiter) -> bool: receive into the caller's buffer (see channel.h)."},
    {"pull_due", (PyCFunction)recv_pull_due, METH_NOARGS,
     "pull_due() -> bool: whether the next wait tries pull() first (see channel.h)."},
    {"pull", (PyCFunction)recv_pull, METH_NOARGS,
     "pull() -> bool: feed the reader what the fd holds, without waiting (see channel.h)."},
    {"arrival", (PyCFunction)(void (*)(void))recv_arrival, METH_FASTCALL,
     "arrival(func_name, want=0): what a read of the reader that wants more than is buffered awaits (see channel.h)."},
    {"_rearm", (PyCFunction)recv_rearm_op, METH_O,
     "_rearm(op) -> bool: start op, the receive into the chunk, again (see channel.h)."},
    {"_into_done", (PyCFunction)recv_into_done, METH_O,
     "_into_done(res): the sink of the receive into the caller's buffer (see channel.h)."},
    {NULL},
};

static PyMemberDef recv_members[] = {
    {"_core", T_OBJECT, offsetof(AiorRecv, core), 0, NULL},
    {"_flush", T_OBJECT, offsetof(AiorRecv, flush), 0, NULL},
    {"_armed", T_BOOL, offsetof(AiorRecv, armed), 0, NULL},
    {"_closing", T_BOOL, offsetof(AiorRecv, closing), 0, NULL},
    {"_paused", T_BOOL, offsetof(AiorRecv, paused), 0, NULL},
    {"_waitall", T_INT, offsetof(AiorRecv, waitall), 0, NULL},
    {"_into_out", T_BOOL, offsetof(AiorRecv, into_out), READONLY, NULL},
    {"_into_waiter", T_OBJECT, offsetof(AiorRecv, into_waiter), 0, NULL},
    {"_into_got", T_PYSSIZET, offsetof(AiorRecv, into_got), READONLY, NULL},
    {"_into_res", T_INT, offsetof(AiorRecv, into_res), READONLY, NULL},
    {"_scratch", T_OBJECT_EX, offsetof(AiorRecv, scratch), 0, NULL},
    {"_pull_skip", T_ULONGLONG, offsetof(AiorRecv, pull_skip), 0, NULL},
    {"_pull_backoff", T_ULONGLONG, offsetof(AiorRecv, pull_backoff), 0, NULL},
    {"_fd", T_INT, offsetof(AiorRecv, fd), 0, NULL},
    {"_rwf_nowait", T_INT, offsetof(AiorRecv, rwf_nowait), 0, NULL},
    {"_is_socket", T_BOOL, offsetof(AiorRecv, is_socket), 0, NULL},
    {"_bodies", T_BOOL, offsetof(AiorRecv, bodies), 0, NULL},
    {"_into_small", T_BOOL, offsetof(AiorRecv, into_small), 0, NULL},
    {"_eager", T_BOOL, offsetof(AiorRecv, eager), 0, NULL},
    {"_ended", T_BOOL, offsetof(AiorRecv, ended), 0, NULL},
    {NULL},
};

static PyObject *
recv_get_into_op(AiorRecv *rx, void *unused)
{
    return Py_NewRef(rx->into_op);
}

static int
recv_set_into_op(AiorRecv *rx, PyObject *value, void *unused)
{
    if (value == NULL || (value != Py_None && !PyObject_TypeCheck(value, &AiorOp_Type))) {
        PyErr_SetString(PyExc_TypeError, "_into_op is an Op or None");
        return -1;
    }
    if (rx->into_out) {
        PyErr_SetString(PyExc_RuntimeError, "a receive into the caller's buffer is out");
        return -1;
    }
    Py_SETREF(rx->into_op, Py_NewRef(value));
    return 0;
}

static PyObject *
recv_get_reader(AiorRecv *rx, void *unused)
{
    return Py_NewRef(rx->reader != NULL ? rx->reader : Py_None);
}

/* Any object (None: no reader), whose _buffer (a bytearray) and _loop are
   taken now: see channel.h. */
static int
recv_set_reader(AiorRecv *rx, PyObject *value, void *unused)
{
    PyObject *buffer = NULL, *loop = NULL;
    if (value == NULL)
        value = Py_None;
    if (value != Py_None) {
        /* (Either missing: looked up at each use instead.) */
        buffer = PyObject_GetAttr(value, str_buffer);
        if (buffer == NULL || !PyByteArray_CheckExact(buffer)) {
            PyErr_Clear();
            Py_CLEAR(buffer);
        }
        loop = PyObject_GetAttr(value, str_loop);
        if (loop == NULL)
            PyErr_Clear();
        /* (Either missing too: looked at by each read.) */
        PyObject *exc = PyObject_GetAttr(value, str_exception);
        PyObject *eof = exc == NULL ? NULL : PyObject_GetAttr(value, str_eof);
        rx->ended = exc != Py_None || eof != Py_False;
        if (eof == NULL)
            PyErr_Clear();
        Py_XDECREF(exc);
        Py_XDECREF(eof);
    } else {
        rx->ended = 0;
    }
    Py_XSETREF(rx->buffer, buffer);
    Py_XSETREF(rx->loop, loop);
    Py_XSETREF(rx->reader, Py_NewRef(value));
    return 0;
}

PyObject *
aior_recv_buffer_of(AiorRecv *rx, PyObject *reader)
{
    return rx->reader == reader ? rx->buffer : NULL;
}

static PyGetSetDef recv_getset[] = {
    {"_reader", (getter)recv_get_reader, (setter)recv_set_reader,
     "The StreamReader it feeds, or None.", NULL},
    {"has_chunk", (getter)recv_get_has_chunk, NULL, "Whether the chunk exists.", NULL},
    {"_into_op", (getter)recv_get_into_op, (setter)recv_set_into_op,
     "The Op of the receives into the caller's buffer, or None.", NULL},
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

/* ---------------------------------------------------------- the sender */

static PyObject *str_write, *str_send, *str_sent, *str_after_send;

static int
is_none(PyObject *obj)
{
    return obj == NULL || obj == Py_None;
}

/* obj.name() */
static PyObject *
call_method0(PyObject *obj, PyObject *name)
{
    PyObject *args[1] = {obj};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* obj.name(), its result dropped: 0, or -1 with an exception set. */
static int
call0(PyObject *obj, PyObject *name)
{
    PyObject *r = call_method0(obj, name);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* obj.name(arg), its result dropped. */
static int
call1(PyObject *obj, PyObject *name, PyObject *arg)
{
    PyObject *r = aior_call_method1(obj, name, arg);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The send queue's pending.append(data) and pending.clear() (a deque's
   methods, not looked up each time), their results dropped: 0, or -1 with
   an exception set. */
static AiorMethod pending_append_m = AIOR_METHOD("append"), pending_clear_m = AIOR_METHOD("clear");

static int
pending_call(AiorSender *tx, AiorMethod *method, PyObject *arg)
{
    PyObject *args[2] = {tx->pending, arg};
    PyObject *r = aior_call_known(method, args, arg != NULL ? 2 : 1);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
pending_append(AiorSender *tx, PyObject *data)
{
    return pending_call(tx, &pending_append_m, data);
}

static int
pending_clear(AiorSender *tx)
{
    return pending_call(tx, &pending_clear_m, NULL);
}

/* obj.name(value) with an int, its result dropped. */
static int
call_int(PyObject *obj, PyObject *name, long value)
{
    PyObject *num = PyLong_FromLong(value);
    if (num == NULL)
        return -1;
    int ret = call1(obj, name, num);
    Py_DECREF(num);
    return ret;
}

/* One send of `size` bytes at `buf` that does not wait: the bytes the
   kernel took, or -1 with errno set. */
static ssize_t
send_direct(AiorSender *tx, const char *buf, Py_ssize_t size)
{
    if (tx->is_socket)
        return send(tx->fd, buf, (size_t)size, MSG_DONTWAIT | MSG_NOSIGNAL);
    struct iovec iov = {(void *)buf, (size_t)size};
    return pwritev2(tx->fd, &iov, 1, -1, tx->rwf_nowait);
}

/* What write() queues of a small buffer that is not bytes (a new
   reference): a copy, as bytes, since the caller may change its buffer once
   write() returns.  One of AIOR_JOIN_MAX or more that nothing waits before
   is sent at once first (as asyncio's transports do), and only what the
   kernel did not take is copied (b"" when it took it all).  NULL without
   an exception when policy copies it (large, not contiguous, not a
   buffer). */
static PyObject *
frozen(AiorSender *tx, PyObject *data)
{
    Py_buffer view;

    if (!PyObject_CheckBuffer(data))
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* (policy raises the stdlib's error, or copies it as its bytes) */
        return NULL;
    }
    PyObject *copy = NULL;
    if (view.len < AIOR_POOL_MIN) {
        Py_ssize_t from = 0;
        if (view.len >= AIOR_JOIN_MAX && tx->direct && tx->pending_size == 0 && is_none(tx->sending)) {
            ssize_t n = send_direct(tx, view.buf, view.len);
            if (n > 0) { /* (else the flush's send meets the error, or waits for room) */
                from = n;
                tx->sent_total += n;
            }
        }
        copy = PyBytes_FromStringAndSize((char *)view.buf + from, view.len - from);
    }
    PyBuffer_Release(&view);
    if (copy == NULL)
        PyErr_Clear(); /* (a MemoryError: policy's copy raises it again) */
    return copy;
}

static PyObject *
sender_write(AiorSender *tx, PyObject *data)
{
    PyObject *copy = NULL;

    if (tx->eof_wanted || !is_none(tx->write_exc) || tx->closing || is_none(tx->pending))
        return aior_call_method1((PyObject *)tx, str_write, data);
    if (!PyBytes_CheckExact(data)) {
        if ((copy = frozen(tx, data)) == NULL)
            return aior_call_method1((PyObject *)tx, str_write, data);
        data = copy;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n == 0) {
        Py_XDECREF(copy);
        Py_RETURN_NONE;
    }
    int appended = pending_append(tx, data);
    Py_XDECREF(copy);
    if (appended < 0)
        return NULL;
    tx->pending_size += n;
    if (is_none(tx->sending) && !tx->soon) {
        /* The writes of this loop iteration leave together, at its flush
           (or at drain(), whichever comes first): one send for them all. */
        tx->soon = 1;
        if (is_none(tx->defer) || is_none(tx->send_soon)) {
            PyErr_SetString(PyExc_RuntimeError, "a send queue without its ring");
            return NULL;
        }
        int deferred = !is_none(tx->core) && AiorCore_Check(tx->core)
                           ? aior_defer((AiorCore *)tx->core, tx->send_soon) : 0;
        if (deferred != 0)
            return deferred < 0 ? NULL : Py_NewRef(Py_None);
        PyObject *r = PyObject_CallOneArg(tx->defer, tx->send_soon);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

/* The pending buffers joined into `out` (at most AIOR_JOIN_MAX bytes, the
   queue's pending_size): 1 if they add up to it, 0 if not (policy's turn),
   -1 with an exception set. */
static int
join_pending(AiorSender *tx, char *out)
{
    PyObject *it = PyObject_GetIter(tx->pending);
    if (it == NULL)
        return -1;
    Py_ssize_t at = 0;
    int ret = 1;
    PyObject *item;
    while (ret == 1 && (item = PyIter_Next(it)) != NULL) {
        Py_buffer view;
        if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0) {
            ret = -1;
        } else {
            if (view.len > tx->pending_size - at)
                ret = 0;
            else
                memcpy(out + at, view.buf, (size_t)view.len);
            at += view.len;
            PyBuffer_Release(&view);
        }
        Py_DECREF(item);
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return -1;
    return ret == 1 && at == tx->pending_size ? 1 : ret;
}

/* The queue holds one buffer again: `joined`'s bytes (when the send did not
   take them all, the rest goes as one buffer). */
static int
pending_joined(AiorSender *tx, const char *joined, Py_ssize_t size)
{
    PyObject *data = PyBytes_FromStringAndSize(joined, size);
    if (data == NULL)
        return -1;
    int ret = pending_clear(tx) < 0 || pending_append(tx, data) < 0 ? -1 : 0;
    Py_DECREF(data);
    return ret;
}

/* What policy does after a direct send of `size` bytes that returned n
   (errno err when negative). */
static PyObject *
after_direct(AiorSender *tx, ssize_t n, int err)
{
    PyObject *self = (PyObject *)tx;

    if (n > 0 || (n < 0 && (err == EAGAIN || err == EWOULDBLOCK))) {
        /* Part of it, or nothing: the kernel is full, the ring waits for room. */
        if (n > 0 && call_int(self, str_sent, (long)n) < 0)
            return NULL;
        return aior_call_method1(self, str_send, Py_False);
    }
    if (n < 0 && err != EINTR && err != EOPNOTSUPP && err != EINVAL && err != ENOSYS &&
        err != ENOTSOCK) {
        /* The connection's error (a reset peer): it ends there. */
        if (call_int(self, str_sent, -(long)err) < 0 || call0(self, str_after_send) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return call_method0(self, str_send); /* (policy tells these apart) */
}

/* Send the pending buffers (count of them, at most AIOR_SEND_IOV) with one
   vectored send that does not wait: 1 with *n and *err set, 0 if they do
   not add up to pending_size (policy's turn), -1 with an exception set. */
static int
send_vector(AiorSender *tx, Py_ssize_t count, ssize_t *n, int *err)
{
    Py_buffer views[AIOR_SEND_IOV];
    struct iovec iov[AIOR_SEND_IOV];
    Py_ssize_t held = 0, total = 0;
    int ret = 1;

    PyObject *it = PyObject_GetIter(tx->pending);
    if (it == NULL)
        return -1;
    PyObject *item;
    while (held < count && (item = PyIter_Next(it)) != NULL) {
        int got = PyObject_GetBuffer(item, &views[held], PyBUF_SIMPLE);
        Py_DECREF(item);
        if (got < 0)
            break;
        iov[held].iov_base = views[held].buf;
        iov[held].iov_len = (size_t)views[held].len;
        total += views[held].len;
        held++;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        ret = -1;
    } else if (held != count || total != tx->pending_size) {
        ret = 0;
    } else if (tx->is_socket) {
        struct msghdr msg = {0};
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)held;
        *n = sendmsg(tx->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        *err = *n < 0 ? errno : 0;
    } else {
        *n = pwritev2(tx->fd, iov, (int)held, -1, tx->rwf_nowait);
        *err = *n < 0 ? errno : 0;
    }
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    return ret;
}

/* All of the pending data went: the queue emptied, as policy's _sent and
   _after_send would (these are called only when they have more to do). */
static PyObject *
sent_all(AiorSender *tx, ssize_t n, int pooled)
{
    PyObject *self = (PyObject *)tx;

    if (pooled) {
        if (call_int(self, str_sent, (long)n) < 0 || call0(self, str_after_send) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    if (pending_clear(tx) < 0)
        return NULL;
    tx->pending_size = 0;
    tx->sent_total += n;
    int waiting = is_none(tx->drain_waiters) ? 0 : PyObject_IsTrue(tx->drain_waiters);
    if (waiting < 0)
        return NULL;
    if ((waiting || tx->eof_wanted) && call0(self, str_after_send) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
sender_send_now(AiorSender *tx, PyObject *unused)
{
    PyObject *self = (PyObject *)tx;
    char joined[AIOR_JOIN_MAX];
    ssize_t n = 0;
    int err = 0;

    tx->soon = 0;
    if (!is_none(tx->sending) || is_none(tx->pending))
        Py_RETURN_NONE; /* (a send in flight: its CQE sends the rest) */
    Py_ssize_t count = PyObject_Length(tx->pending);
    if (count <= 0)
        return count < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t size = tx->pending_size;
    int pooled = is_none(tx->pooled) ? 0 : PyObject_IsTrue(tx->pooled);
    if (pooled < 0)
        return NULL;
    if (size <= 0 || !tx->direct || !is_none(tx->write_exc) || tx->closing)
        return call_method0(self, str_send);
    if (size > AIOR_JOIN_MAX || pooled) {
        /* Larger: the buffers as they are, in one vectored send. */
        if (count > AIOR_SEND_IOV)
            return call_method0(self, str_send);
        int ok = send_vector(tx, count, &n, &err);
        if (ok <= 0)
            return ok < 0 ? NULL : call_method0(self, str_send);
        return n == size ? sent_all(tx, n, pooled) : after_direct(tx, n, err);
    }
    /* The common case, in short: the iteration's small writes, joined,
       that the kernel takes whole, there and then. */
    int ok = join_pending(tx, joined);
    if (ok <= 0)
        return ok < 0 ? NULL : call_method0(self, str_send);
    n = send_direct(tx, joined, size);
    err = n < 0 ? errno : 0;
    if (n == size)
        return sent_all(tx, n, 0);
    if (count > 1 && pending_joined(tx, joined, size) < 0)
        return NULL;
    return after_direct(tx, n, err);
}

static PyObject *
sender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    AiorSender *tx = (AiorSender *)type->tp_alloc(type, 0);
    if (tx == NULL)
        return NULL;
    tx->pending = Py_NewRef(Py_None);
    tx->sending = Py_NewRef(Py_None);
    tx->write_exc = Py_NewRef(Py_None);
    tx->pooled = Py_NewRef(Py_None);
    tx->drain_waiters = Py_NewRef(Py_None);
    tx->defer = Py_NewRef(Py_None);
    tx->send_soon = Py_NewRef(Py_None);
    tx->core = Py_NewRef(Py_None);
    tx->fd = -1;
    tx->rwf_nowait = RWF_NOWAIT;
    tx->direct = 1;
    return (PyObject *)tx;
}

static int
sender_traverse(AiorSender *tx, visitproc visit, void *arg)
{
    Py_VISIT(tx->pending);
    Py_VISIT(tx->sending);
    Py_VISIT(tx->write_exc);
    Py_VISIT(tx->pooled);
    Py_VISIT(tx->drain_waiters);
    Py_VISIT(tx->defer);
    Py_VISIT(tx->send_soon);
    Py_VISIT(tx->core);
    return 0;
}

static int
sender_clear(AiorSender *tx)
{
    Py_CLEAR(tx->pending);
    Py_CLEAR(tx->sending);
    Py_CLEAR(tx->write_exc);
    Py_CLEAR(tx->pooled);
    Py_CLEAR(tx->drain_waiters);
    Py_CLEAR(tx->defer);
    Py_CLEAR(tx->send_soon);
    Py_CLEAR(tx->core);
    return 0;
}

static void
sender_dealloc(AiorSender *tx)
{
    PyObject_GC_UnTrack(tx);
    sender_clear(tx);
    Py_TYPE(tx)->tp_free((PyObject *)tx);
}

static PyMethodDef sender_methods[] = {
    {"write", (PyCFunction)sender_write, METH_O,
     "write(data): queue data to send, as asyncio's transport.write (see channel.h)."},
    {"_send_now", (PyCFunction)sender_send_now, METH_NOARGS,
     "_send_now(): the flush's send of the pending data (see channel.h)."},
    {NULL},
};

#define TX_OBJ(name, field) {name, T_OBJECT, offsetof(AiorSender, field), 0, NULL}
static PyMemberDef sender_members[] = {
    TX_OBJ("_pending", pending), TX_OBJ("_sending", sending), TX_OBJ("_write_exc", write_exc),
    TX_OBJ("_pooled", pooled), TX_OBJ("_drain_waiters", drain_waiters), TX_OBJ("_defer", defer),
    TX_OBJ("_send_soon", send_soon), TX_OBJ("_core", core),
    {"_pending_size", T_PYSSIZET, offsetof(AiorSender, pending_size), 0, NULL},
    {"_sent_total", T_LONGLONG, offsetof(AiorSender, sent_total), 0, NULL},
    {"_fd", T_INT, offsetof(AiorSender, fd), 0, NULL},
    {"_rwf_nowait", T_INT, offsetof(AiorSender, rwf_nowait), 0, NULL},
    {"_eof_wanted", T_BOOL, offsetof(AiorSender, eof_wanted), 0, NULL},
    {"_closing", T_BOOL, offsetof(AiorSender, closing), 0, NULL},
    {"_soon", T_BOOL, offsetof(AiorSender, soon), 0, NULL},
    {"_direct", T_BOOL, offsetof(AiorSender, direct), 0, NULL},
    {"_is_socket", T_BOOL, offsetof(AiorSender, is_socket), 0, NULL},
    {NULL},
};

PyTypeObject AiorSender_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.Sender",
    .tp_doc = "The hot path of a stream's send queue: write() and the flush's "
              "direct send (see channel.h).",
    .tp_basicsize = sizeof(AiorSender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_new = sender_new,
    .tp_traverse = (traverseproc)sender_traverse,
    .tp_clear = (inquiry)sender_clear,
    .tp_dealloc = (destructor)sender_dealloc,
    .tp_methods = sender_methods,
    .tp_members = sender_members,
};

int
aior_channel_add_types(PyObject *module)
{
    str_buffer = PyUnicode_InternFromString("_buffer");
    str_waiter = PyUnicode_InternFromString("_waiter");
    str_received = PyUnicode_InternFromString("_received");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_feed_eof = PyUnicode_InternFromString("feed_eof");
    str_pull_failed = PyUnicode_InternFromString("_pull_failed");
    str_write = PyUnicode_InternFromString("_write");
    str_send = PyUnicode_InternFromString("send");
    str_sent = PyUnicode_InternFromString("_sent");
    str_after_send = PyUnicode_InternFromString("_after_send");
    str_turn_then_wait = PyUnicode_InternFromString("_turn_then_wait");
    str_loop = PyUnicode_InternFromString("_loop");
    str_exception = PyUnicode_InternFromString("_exception");
    str_eof = PyUnicode_InternFromString("_eof");
    str_arm = PyUnicode_InternFromString("arm");
    str_op = PyUnicode_InternFromString("_op");
    if (str_turn_then_wait == NULL || str_loop == NULL || str_exception == NULL || str_eof == NULL ||
        str_arm == NULL || str_op == NULL)
        return -1;
    if (str_buffer == NULL || str_waiter == NULL || str_received == NULL || str_set_result == NULL ||
        str_feed_eof == NULL || str_pull_failed == NULL ||
        str_write == NULL || str_send == NULL ||
        str_sent == NULL || str_after_send == NULL)
        return -1;
    if (PyType_Ready(&AiorRecv_Type) < 0 || PyType_Ready(&AiorSender_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "Receiver", (PyObject *)&AiorRecv_Type) < 0 ||
        PyModule_AddObjectRef(module, "Sender", (PyObject *)&AiorSender_Type) < 0 ||
        PyModule_AddIntConstant(module, "RECV_CHUNK", AIOR_RECV_CHUNK) < 0 ||
        PyModule_AddIntConstant(module, "JOIN_MAX", AIOR_JOIN_MAX) < 0 ||
        PyModule_AddIntConstant(module, "POOL_MIN", AIOR_POOL_MIN) < 0)
        return -1;
    return 0;
}
