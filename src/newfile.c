/* aioring._core's NewFile: the create and the write of a new file as one op
 * (see newfile.h). */
#define PY_SSIZE_T_CLEAN
#include "newfile.h"
#include "flush.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <liburing.h>

enum { NEWFILE_CREATE, NEWFILE_WRITE, NEWFILE_ENDED };

/* The kernel moves at most this much in one write (MAX_RW_COUNT). */
#define NEWFILE_MAX_RW 0x7FFFF000L

AiorNewFile *
aior_newfile_make(PyObject *path, PyObject *data)
{
    Py_buffer view;

    if (!PyBytes_CheckExact(path)) {
        PyErr_SetString(PyExc_TypeError, "NewFile() takes an encoded path (bytes)");
        return NULL;
    }
    if ((Py_ssize_t)strlen(PyBytes_AS_STRING(path)) != PyBytes_GET_SIZE(path)) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return NULL;
    }
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t size = view.len;
    PyBuffer_Release(&view);
    AiorNewFile *self = PyObject_GC_New(AiorNewFile, &AiorNewFile_Type);
    if (self == NULL)
        return NULL;
    self->path = Py_NewRef(path);
    self->dir_fd = AT_FDCWD;
    self->data = Py_NewRef(data);
    self->size = size;
    self->done = 0;
    self->fd = -1;
    self->step = NEWFILE_CREATE;
    self->opened = 0;
    self->owner = NULL;
    self->context = NULL;
    self->on_end = NULL;
    self->on_drop = NULL;
    PyObject_GC_Track(self);
    return self;
}

static PyObject *
newfile_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *path, *data;

    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "NewFile() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "NewFile", 2, 2, &path, &data))
        return NULL;
    return (PyObject *)aior_newfile_make(path, data);
}

/* The target ends, undoing what its op made: the fd closed, and the file
   removed when `remove` (a copy cancelled before it was whole). */
static void
newfile_undo(AiorNewFile *self, int remove)
{
    int fd = self->fd;
    self->fd = -1;
    self->step = NEWFILE_ENDED;
    Py_BEGIN_ALLOW_THREADS
    if (fd >= 0)
        close(fd);
    if (remove)
        unlinkat(self->dir_fd, PyBytes_AS_STRING(self->path), 0);
    Py_END_ALLOW_THREADS
}

static int
newfile_traverse(AiorNewFile *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    Py_VISIT(self->owner);
    Py_VISIT(self->context);
    return 0;
}

static int
newfile_clear(AiorNewFile *self)
{
    Py_CLEAR(self->owner);
    Py_CLEAR(self->context);
    return 0;
}

static void
newfile_dealloc(AiorNewFile *self)
{
    PyObject_GC_UnTrack(self);
    if (self->fd >= 0) /* (never: the op's end or drop() lets go of it) */
        newfile_undo(self, self->done < self->size);
    newfile_clear(self);
    Py_XDECREF(self->path);
    Py_XDECREF(self->data);
    PyObject_GC_Del(self);
}

static PyObject *
newfile_drop(AiorNewFile *self, PyObject *arg)
{
    long res = PyLong_AsLong(arg);
    if (res == -1 && PyErr_Occurred())
        return NULL;
    if (self->step == NEWFILE_ENDED)
        Py_RETURN_NONE;
    if (self->step == NEWFILE_CREATE && res >= 0)
        self->fd = (int)res, self->opened = 1; /* (its create's CQE, which nobody saw) */
    newfile_undo(self, self->opened);
    if (self->on_drop != NULL)
        self->on_drop(self);
    Py_RETURN_NONE;
}

static PyObject *
newfile_get_opened(AiorNewFile *self, void *unused)
{
    return PyBool_FromLong(self->opened);
}

/* op ends with `res`: op.finish let go of, then the owner's hook (1: op
   handled) or the core's own finish of it with res (0); -1 with an
   exception set. */
static int
newfile_end(AiorNewFile *self, AiorCore *core, AiorOp *op, int res)
{
    self->step = NEWFILE_ENDED;
    aior_set_field(&op->finish, Py_None);
    if (self->on_end == NULL)
        return 0;
    aior_unpin(op);
    op->res = res;
    return self->on_end(self, core, op, res) < 0 ? -1 : 1;
}

/* Start op again as the write of the rest of the data: 1, or -1 with an
   exception set.  The write goes to the kernel's workers at once
   (IOSQE_ASYNC), as the create did: ext4 takes no buffered write without
   blocking, so the kernel would hand it over anyway after a try on the
   loop's thread, and a file system that does take one (XFS, btrfs) would
   make the whole write there.  A tree copy is bound by that thread. */
static int
newfile_write_rest(AiorNewFile *self, AiorCore *core, AiorOp *op)
{
    unsigned long long key;
    Py_ssize_t length = self->size - self->done;

    if (length > NEWFILE_MAX_RW)
        length = NEWFILE_MAX_RW;
    PyObject *args = Py_BuildValue("(iinnnii)", IORING_OP_WRITE, self->fd, self->done, length, self->done, 0,
                                   IOSQE_ASYNC);
    if (args == NULL)
        return -1;
    aior_set_field(&op->args, args);
    Py_DECREF(args);
    aior_set_field(&op->prep, Py_None);
    if (!op->pinned) {
        if (PyObject_GetBuffer(self->data, &op->view, PyBUF_SIMPLE) < 0)
            return -1;
        op->pinned = 1;
    }
    op->continued = 1;
    op->cancelled = 0;
    if (core->ring == NULL) {
        /* (no ring: the threads backend makes the write) */
        PyObject *loop = PyWeakref_Check(core->loop_ref) ? PyObject_CallNoArgs(core->loop_ref) : NULL;
        if (loop == NULL || loop == Py_None) {
            Py_XDECREF(loop);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "this io_uring's loop is gone");
            return -1;
        }
        PyObject *r = PyObject_CallMethod(core->policy, "restart", "OO", loop, (PyObject *)op);
        Py_DECREF(loop);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 1;
    }
    int ret = aior_start(core, op, 0, &key);
    if (ret < 0)
        return -1;
    if (ret == 0) {
        /* The SQ stays full: policy's flush starts it (as Ring.restart). */
        op->state = AIOR_WAITING;
        PyObject *r = PyObject_CallMethod(core->waiting, "appendleft", "O", (PyObject *)op);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return aior_schedule_flush(core, NULL) < 0 ? -1 : 1;
}

/* aior_newfile_step, its reference to self held. */
static int
step(AiorNewFile *self, AiorCore *core, AiorOp *op, int *res)
{
    int r = *res, cancelled = op->waiter != Py_None;

    if (self->step == NEWFILE_CREATE) {
        if (r < 0)
            return newfile_end(self, core, op, r); /* (nothing made) */
        self->fd = r;
        self->opened = 1;
        self->step = NEWFILE_WRITE;
    } else if (self->step == NEWFILE_WRITE) {
        if (r == 0 && self->done < self->size)
            r = -EIO; /* (a regular file's write moves a byte at least, or fails) */
        if (r < 0) {
            newfile_undo(self, cancelled);
            *res = r;
            return newfile_end(self, core, op, r);
        }
        self->done += r;
    } else {
        return 0; /* (ended already) */
    }
    if (self->done == self->size) {
        *res = self->fd; /* the caller's now */
        self->fd = -1;
        return newfile_end(self, core, op, *res);
    }
    if (cancelled) {
        newfile_undo(self, 1);
        *res = -ECANCELED;
        return newfile_end(self, core, op, *res);
    }
    if (newfile_write_rest(self, core, op) < 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        newfile_undo(self, 1);
        *res = -ECANCELED;
        newfile_end(self, core, op, *res);
        PyErr_Clear(); /* (the first error is the one raised) */
        PyErr_Restore(type, value, tb);
        return -1;
    }
    return 1;
}

int
aior_newfile_step(AiorCore *core, AiorOp *op, int *res)
{
    AiorNewFile *self = (AiorNewFile *)Py_NewRef(op->finish);
    int ret = step(self, core, op, res);
    Py_DECREF(self);
    return ret;
}

static PyMethodDef newfile_methods[] = {
    {"drop", (PyCFunction)newfile_drop, METH_O,
     "drop(res): the op ends unfinished (res: the CQE's result that came instead, or -ECANCELED): "
     "its fd closed, its file removed."},
    {NULL},
};

static PyGetSetDef newfile_getset[] = {
    {"opened", (getter)newfile_get_opened, NULL, "whether the create completed", NULL},
    {NULL},
};

PyTypeObject AiorNewFile_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.NewFile",
    .tp_basicsize = sizeof(AiorNewFile),
    .tp_dealloc = (destructor)newfile_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "NewFile(path, data): an op's target that creates a file and writes data into it "
              "(see newfile.h).",
    .tp_traverse = (traverseproc)newfile_traverse,
    .tp_clear = (inquiry)newfile_clear,
    .tp_methods = newfile_methods,
    .tp_getset = newfile_getset,
    .tp_new = newfile_new,
};

int
aior_newfile_add(PyObject *module)
{
    if (PyType_Ready(&AiorNewFile_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "NewFile", (PyObject *)&AiorNewFile_Type);
}
