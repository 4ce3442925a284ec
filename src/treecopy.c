/* aioring._core's steps of a small file's copy that need no waiting (see treecopy.h). */
#define PY_SSIZE_T_CLEAN
#include "treecopy.h"
#include "flush.h"
#include "newfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <structmember.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#define TREECOPY_RESOLVE_CACHED 0x20 /* (linux/openat2.h, 5.12) */

/* openat2's struct open_how (linux/openat2.h), which older headers lack. */
struct treecopy_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

static PyObject *
nanoseconds(const struct timespec *ts)
{
    return PyLong_FromLongLong((long long)ts->tv_sec * 1000000000LL + ts->tv_nsec);
}

/* A regular file of at most size_max bytes at path (relative to dir_fd),
   opened at once: its fd and stat, or -1 (nothing left open). */
static int
open_cached(int dir_fd, const char *path, long long size_max, struct stat *st)
{
    struct treecopy_open_how how;
    int fd;

    memset(&how, 0, sizeof how);
    how.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
    how.resolve = TREECOPY_RESOLVE_CACHED;
    fd = (int)syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_size > size_max) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The `size` bytes of fd, read from its start at once: a new bytes object
   when the page cache held them all and the file ends there, Py_None (a new
   reference) when not, NULL with an exception set.  The read is one byte
   longer than the file: one that returns the file's size found its end
   (a page missing stops it short of that page).  The GIL is released for
   it, as os.preadv releases it. */
static PyObject *
read_whole_cached(int fd, Py_ssize_t size)
{
    ssize_t got;
    char spare;

    /* Not zeroed: only what the kernel filled leaves here. */
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        return NULL;
    struct iovec iov[2] = {{PyBytes_AS_STRING(data), (size_t)size}, {&spare, 1}};
    Py_BEGIN_ALLOW_THREADS
    got = preadv2(fd, iov, 2, 0, RWF_NOWAIT);
    Py_END_ALLOW_THREADS
    if (got != (ssize_t)size)
        Py_SETREF(data, Py_NewRef(Py_None));
    return data;
}

static PyObject *
copy_source(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    struct stat st;
    int fd, overflow;

    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "copy_source() takes a bytes path and an int");
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(args[0]);
    if ((Py_ssize_t)strlen(path) != PyBytes_GET_SIZE(args[0]))
        Py_RETURN_NONE; /* (a NUL in it: the caller's open raises) */
    long long size_max = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (size_max == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || size_max > INT_MAX)
        size_max = INT_MAX;
    Py_BEGIN_ALLOW_THREADS
    fd = open_cached(AT_FDCWD, path, size_max, &st);
    Py_END_ALLOW_THREADS
    if (fd < 0)
        Py_RETURN_NONE;
    PyObject *data = read_whole_cached(fd, (Py_ssize_t)st.st_size);
    if (data == NULL)
        goto fail;
    /* Not all read: the fd and its stat are the caller's, who reads the file
       another way (this read may have moved its access time already). */
    if (data == Py_None && fcntl(fd, F_SETFL, O_RDONLY) < 0) {
        /* (the ring's reads of an O_NONBLOCK file answer EAGAIN instead of waiting) */
        Py_DECREF(data);
        close(fd);
        Py_RETURN_NONE;
    }
    PyObject *result = Py_BuildValue("(iNkLNN)", fd, data, (unsigned long)st.st_mode, (long long)st.st_size,
                                     nanoseconds(&st.st_atim), nanoseconds(&st.st_mtim));
    if (result == NULL)
        goto fail; /* (Py_BuildValue dropped what it was given) */
    return result;
fail:
    close(fd);
    return NULL;
}

/* A C int from an int argument: 0, or -1 with an exception set. */
static int
int_arg(PyObject *obj, const char *what, int *out)
{
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s is out of the range of a C int", what);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Whether copy2's copy of src_fd's extended attributes has anything to do
   (the names listed, or an error shutil does not skip: its own steps then
   raise it). */
static int
has_xattrs(int fd)
{
    ssize_t n = flistxattr(fd, NULL, 0);
    if (n >= 0)
        return n > 0;
    return errno != ENOTSUP && errno != ENODATA && errno != EINVAL;
}

/* Nanoseconds as a struct timespec, its tv_nsec in [0, 1e9). */
static void
timespec_of(long long ns, struct timespec *ts)
{
    ts->tv_sec = ns / 1000000000LL, ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0)
        ts->tv_sec -= 1, ts->tv_nsec += 1000000000LL;
}

/* The end of a copy whose data is written (see copy_finish), with the GIL
   released: 1 when src_fd has extended attributes to copy (meta 2 and
   check_xattrs; nothing done, both fds open), else 0 with both fds closed
   and *err the first errno met (0: none; *chmod_failed when fchmod's). */
static int
finish_fds(int src_fd, int dst_fd, const struct timespec times[2], int mode, int meta, int check_xattrs,
           int *err, int *chmod_failed)
{
    struct stat st;

    *err = 0, *chmod_failed = 0;
    if (meta == 2 && check_xattrs && has_xattrs(src_fd))
        return 1;
    if (meta == 2 && futimens(dst_fd, times) < 0) {
        *err = errno;
    } else if (meta >= 1) {
        if (fstat(dst_fd, &st) < 0)
            *err = errno;
        else if ((int)(st.st_mode & 07777) != mode && fchmod(dst_fd, (mode_t)mode) < 0)
            *err = errno, *chmod_failed = 1;
    }
    if (close(dst_fd) < 0 && !*err)
        *err = errno;
    if (close(src_fd) < 0 && !*err)
        *err = errno;
    return 0;
}

static PyObject *
copy_finish(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int src_fd, dst_fd, meta, mode, err, chmod_failed, r;
    long long atime, mtime;
    struct timespec times[2];

    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "copy_finish() takes exactly 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (int_arg(args[0], "src_fd", &src_fd) < 0 || int_arg(args[1], "dst_fd", &dst_fd) < 0 ||
        int_arg(args[4], "mode", &mode) < 0 || int_arg(args[5], "meta", &meta) < 0)
        return NULL;
    atime = PyLong_AsLongLong(args[2]);
    if (atime == -1 && PyErr_Occurred())
        return NULL;
    mtime = PyLong_AsLongLong(args[3]);
    if (mtime == -1 && PyErr_Occurred())
        return NULL;
    timespec_of(atime, &times[0]);
    timespec_of(mtime, &times[1]);
    Py_BEGIN_ALLOW_THREADS
    r = finish_fds(src_fd, dst_fd, times, mode, meta, 1, &err, &chmod_failed);
    Py_END_ALLOW_THREADS
    if (r == 1)
        Py_RETURN_FALSE; /* (the caller's steps, with both fds) */
    if (err) {
        errno = err;
        /* (os.chmod names the fd in its OSError; os.utime, os.fstat and os.close do not) */
        return chmod_failed ? PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, args[1])
                            : PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_TRUE;
}

/* ----------------------------------------------------------- CopyQueue */

typedef struct {
    PyObject_HEAD
    PyObject *core;     /* the Core whose ops copy the files */
    PyObject *prep;     /* the binding's prep function of an OPENAT */
    PyObject *hand_back;/* hand_back(job): a job for the caller's own steps */
    PyObject *rows;     /* a list of iterators, one over each row of jobs */
    PyObject *waiter;   /* the future close() gave (NULL: none) */
    Py_ssize_t turn;    /* the row whose job is next */
    Py_ssize_t in_flight, limit;
    long long size_max;
    long long copied, handed_back;
    int meta;
    char closed, cancelled;
    char dropped;       /* a copy's op ended unfinished (its ring closed) */
} AiorCopyQueue;

static PyTypeObject AiorCopyQueue_Type;

/* A job for the caller's own steps (audited: its audit event raised
   already; atime: the source's access time before a read of it was tried,
   or None): 0, or -1 with an exception set. */
static int
hand_back(AiorCopyQueue *q, PyObject *job, int audited, PyObject *atime)
{
    q->handed_back++;
    PyObject *r = PyObject_CallFunctionObjArgs(q->hand_back, job, audited ? Py_True : Py_False, atime, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The waiter resolved once the queue is closed and nothing is in flight or
   queued (or, cancelled, nothing in flight); cancelled instead when a copy
   was dropped unfinished, as an op's future is when its ring closes.  0,
   or -1 with an exception. */
static int
check_drained(AiorCopyQueue *q)
{
    if (!q->closed || q->waiter == NULL || q->in_flight > 0 ||
        (!q->cancelled && PyList_GET_SIZE(q->rows) > 0))
        return 0;
    PyObject *waiter = q->waiter;
    q->waiter = NULL;
    int done = aior_future_done(waiter), ret = 0;
    if (done == 0 && q->dropped) {
        PyObject *r = PyObject_CallMethod(waiter, "cancel", NULL);
        ret = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    } else if (done == 0) {
        ret = aior_set_result((AiorCore *)q->core, waiter, Py_None);
    } else if (done < 0) {
        ret = -1;
    }
    Py_DECREF(waiter);
    return ret;
}

/* Start op (an OPENAT, its finish a NewFile): into the SQ when the core
   would take it now (as Ring._launch, without its eager submit), else into
   policy's waiting ops; the iteration's flush submits it.  0, or -1. */
static int
launch(AiorCore *core, AiorOp *op)
{
    unsigned long long key;

    if (core->ring != NULL && core->waiting != NULL && core->waiting != Py_None) {
        Py_ssize_t held = PyObject_Length(core->waiting);
        if (held < 0)
            return -1;
        if (held == 0 && PyDict_GET_SIZE(core->ops) - core->unbounded < core->limit) {
            int ret = aior_start(core, op, 0, &key);
            if (ret < 0)
                return -1;
            if (ret == 1)
                return aior_schedule_flush(core, NULL);
        }
    }
    op->state = AIOR_WAITING;
    PyObject *r = PyObject_CallMethod(core->waiting, "append", "O", (PyObject *)op);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return aior_schedule_flush(core, NULL);
}

static int file_end(AiorNewFile *nf, AiorCore *core, AiorOp *op, int res);
static void file_drop(AiorNewFile *nf);
static int context_fd(AiorNewFile *nf);

/* The source and destination directories of a row of jobs, opened once
   (O_PATH): its files are opened and created relative to them, a path
   lookup of one name instead of the whole path.  Each copy in flight holds
   it (its context), so the fds stay open until the last one ended. */
typedef struct {
    PyObject_HEAD
    int src, dst;
} RowDirs;

static void
rowdirs_dealloc(RowDirs *self)
{
    close(self->src);
    close(self->dst);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject RowDirs_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core._RowDirs",
    .tp_basicsize = sizeof(RowDirs),
    .tp_dealloc = (destructor)rowdirs_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* RowDirs of the directories src and dst (str, bytes or path-like), or
   None (a new reference) when either cannot be opened: the row's jobs then
   go by their whole paths.  NULL with an exception set. */
static PyObject *
row_dirs(PyObject *src, PyObject *dst)
{
    PyObject *src_b = NULL, *dst_b = NULL;
    int sfd = -1, dfd = -1;

    if (!PyUnicode_FSConverter(src, &src_b) || !PyUnicode_FSConverter(dst, &dst_b)) {
        PyErr_Clear();
        Py_XDECREF(src_b);
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    sfd = open(PyBytes_AS_STRING(src_b), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (sfd >= 0)
        dfd = open(PyBytes_AS_STRING(dst_b), O_PATH | O_DIRECTORY | O_CLOEXEC);
    Py_END_ALLOW_THREADS
    Py_DECREF(src_b);
    Py_DECREF(dst_b);
    if (sfd < 0 || dfd < 0) {
        if (sfd >= 0)
            close(sfd);
        Py_RETURN_NONE;
    }
    RowDirs *dirs = PyObject_New(RowDirs, &RowDirs_Type);
    if (dirs == NULL) {
        close(sfd);
        close(dfd);
        return NULL;
    }
    dirs->src = sfd, dirs->dst = dfd;
    return (PyObject *)dirs;
}

/* The last component of an encoded path (bytes): a new bytes object. */
static PyObject *
base_name(PyObject *path)
{
    const char *s = PyBytes_AS_STRING(path), *slash = strrchr(s, '/');
    return slash == NULL ? Py_NewRef(path) : PyBytes_FromString(slash + 1);
}

/* One job: (slot, source as given, destination name, source name), the
   names str or bytes, in a row of `dirs` (a RowDirs, or None).  Its source
   opened and read at once, and its copy's op started (1); or handed back
   (0); -1 with an exception set. */
static int
start_copy(AiorCopyQueue *q, PyObject *job, PyObject *dirs)
{
    PyObject *src_b = NULL, *dst_b = NULL, *data = NULL, *context = NULL;
    AiorNewFile *nf = NULL;
    AiorOp *op = NULL;
    struct stat st;
    int fd = -1, ret = -1, src_dir = AT_FDCWD, dst_dir = AT_FDCWD;

    if (!PyTuple_Check(job) || PyTuple_GET_SIZE(job) < 4) {
        PyErr_SetString(PyExc_TypeError, "a CopyQueue job is (slot, source, destination, source name)");
        return -1;
    }
    /* (shutil.copyfile's audit event; an error of it is raised by the caller's steps) */
    if (PySys_Audit("shutil.copyfile", "OO", PyTuple_GET_ITEM(job, 1), PyTuple_GET_ITEM(job, 2)) < 0) {
        PyErr_Clear();
        return hand_back(q, job, 0, Py_None);
    }
    if (!PyUnicode_FSConverter(PyTuple_GET_ITEM(job, 3), &src_b) ||
        !PyUnicode_FSConverter(PyTuple_GET_ITEM(job, 2), &dst_b)) {
        PyErr_Clear();
        goto back;
    }
    if (dirs != Py_None) {
        /* (names relative to the row's directories) */
        src_dir = ((RowDirs *)dirs)->src, dst_dir = ((RowDirs *)dirs)->dst;
        Py_SETREF(src_b, base_name(src_b));
        if (src_b == NULL)
            goto out;
        Py_SETREF(dst_b, base_name(dst_b));
        if (dst_b == NULL)
            goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    fd = open_cached(src_dir, PyBytes_AS_STRING(src_b), q->size_max, &st);
    if (fd >= 0 && q->meta == 2 && has_xattrs(fd)) {
        close(fd);
        fd = -1;
    }
    Py_END_ALLOW_THREADS
    if (fd < 0)
        goto back;
    data = read_whole_cached(fd, (Py_ssize_t)st.st_size);
    if (data == NULL)
        goto out;
    if (data == Py_None) {
        /* (the try may have moved the access time: the caller copies this one) */
        PyObject *atime = nanoseconds(&st.st_atim);
        ret = atime == NULL ? -1 : hand_back(q, job, 1, atime);
        Py_XDECREF(atime);
        goto out;
    }
    nf = aior_newfile_make(dst_b, data);
    if (nf == NULL)
        goto out;
    nf->dir_fd = dst_dir;
    long long atime = (long long)st.st_atim.tv_sec * 1000000000LL + st.st_atim.tv_nsec;
    long long mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    context = Py_BuildValue("(OiLLiO)", job, fd, atime, mtime, (int)(st.st_mode & 07777), dirs);
    if (context == NULL)
        goto out;
    op = (AiorOp *)AiorOp_Type.tp_alloc(&AiorOp_Type, 0);
    if (op == NULL)
        goto out;
    op->future = Py_NewRef(Py_None);
    op->prep = Py_NewRef(q->prep);
    op->args = Py_BuildValue("(iOii)", dst_dir, dst_b, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                             q->meta ? (int)(st.st_mode & 0777) : 0666);
    op->keep = Py_NewRef(Py_None);
    op->finish = Py_NewRef((PyObject *)nf);
    op->waiter = Py_NewRef(Py_None);
    op->sink = Py_NewRef(Py_None);
    if (op->args == NULL)
        goto out;
    /* From here the file's op owns fd (through its NewFile's context). */
    nf->owner = Py_NewRef((PyObject *)q);
    nf->context = context;
    context = NULL;
    nf->on_end = file_end;
    nf->on_drop = file_drop;
    fd = -1;
    q->in_flight++;
    if (launch((AiorCore *)q->core, op) < 0) {
        /* (the op never started: its source closed, the copy no longer counted) */
        close(context_fd(nf));
        Py_CLEAR(nf->context);
        nf->on_end = NULL, nf->on_drop = NULL;
        q->in_flight--;
        goto out;
    }
    ret = 1;
    goto out;
back:
    ret = hand_back(q, job, 1, Py_None);
out:
    if (fd >= 0)
        close(fd);
    Py_XDECREF(op);
    Py_XDECREF((PyObject *)nf);
    Py_XDECREF(context);
    Py_XDECREF(data);
    Py_XDECREF(src_b);
    Py_XDECREF(dst_b);
    return ret;
}

/* Start jobs, in turn from each row, while fewer than `limit` are in
   flight.  0, or -1 with an exception set. */
static int
fill(AiorCopyQueue *q)
{
    while (!q->cancelled && q->in_flight < q->limit && PyList_GET_SIZE(q->rows) > 0) {
        if (q->turn >= PyList_GET_SIZE(q->rows))
            q->turn = 0;
        PyObject *row = PyList_GET_ITEM(q->rows, q->turn); /* (iterator, dirs) */
        PyObject *job = PyIter_Next(PyTuple_GET_ITEM(row, 0));
        if (job == NULL) {
            if (PyErr_Occurred() || PySequence_DelItem(q->rows, q->turn) < 0)
                return -1;
            continue;
        }
        q->turn++;
        PyObject *dirs = Py_NewRef(PyTuple_GET_ITEM(row, 1)); /* (the row may go meanwhile) */
        int ret = start_copy(q, job, dirs);
        Py_DECREF(dirs);
        Py_DECREF(job);
        if (ret < 0)
            return -1;
    }
    return check_drained(q);
}

/* A file's context: (job, src_fd, atime_ns, mtime_ns, mode). */
static int
context_fd(AiorNewFile *nf)
{
    return (int)PyLong_AsLong(PyTuple_GET_ITEM(nf->context, 1));
}

/* NewFile's on_end: the copy's data is written (res, the new fd) or it
   failed (res < 0, nothing of it open but the source).  Its metadata set
   and both fds closed, or the job handed back: the caller's steps copy it
   again, and raise what they meet.  Then the next jobs. */
static int
file_end(AiorNewFile *nf, AiorCore *core, AiorOp *op, int res)
{
    AiorCopyQueue *q = (AiorCopyQueue *)nf->owner;
    PyObject *context = nf->context;
    struct timespec times[2];
    int src_fd = context_fd(nf), err = 0, chmod_failed = 0, mode;

    nf->context = NULL; /* (its source fd closed below: drop() has nothing left) */
    mode = (int)PyLong_AsLong(PyTuple_GET_ITEM(context, 4));
    timespec_of(PyLong_AsLongLong(PyTuple_GET_ITEM(context, 2)), &times[0]);
    timespec_of(PyLong_AsLongLong(PyTuple_GET_ITEM(context, 3)), &times[1]);
    q->in_flight--;
    Py_BEGIN_ALLOW_THREADS
    if (res >= 0)
        finish_fds(src_fd, res, times, mode, q->meta, 0, &err, &chmod_failed);
    else
        close(src_fd);
    Py_END_ALLOW_THREADS
    int ret = 0;
    if (res >= 0 && !err)
        q->copied++;
    else
        ret = hand_back(q, PyTuple_GET_ITEM(context, 0), 1, Py_None);
    Py_DECREF(context);
    if (ret == 0)
        ret = fill(q);
    return ret;
}

/* NewFile's on_drop: the file's op ends without its CQE (the ring closes):
   its source closed, and no more jobs start. */
static void
file_drop(AiorNewFile *nf)
{
    AiorCopyQueue *q = (AiorCopyQueue *)nf->owner;
    PyObject *context = nf->context;

    if (context == NULL)
        return;
    close(context_fd(nf));
    nf->context = NULL;
    Py_DECREF(context);
    q->in_flight--;
    q->cancelled = 1;
    q->dropped = 1;
    if (check_drained(q) < 0)
        PyErr_WriteUnraisable((PyObject *)q);
}

static PyObject *
queue_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *core, *prep, *hand_back_fn;
    int meta;
    long long size_max;
    Py_ssize_t limit;

    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "CopyQueue() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OiLnO:CopyQueue", &AiorCore_Type, &core, &prep, &meta, &size_max, &limit,
                          &hand_back_fn))
        return NULL;
    if (meta < 0 || meta > 2 || limit < 1) {
        PyErr_SetString(PyExc_ValueError, "CopyQueue(): meta is 0, 1 or 2 and limit at least 1");
        return NULL;
    }
    AiorCopyQueue *self = (AiorCopyQueue *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->rows = PyList_New(0);
    if (self->rows == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->core = Py_NewRef(core);
    self->prep = Py_NewRef(prep);
    self->hand_back = Py_NewRef(hand_back_fn);
    self->meta = meta;
    self->size_max = size_max > INT_MAX ? INT_MAX : size_max;
    self->limit = limit;
    return (PyObject *)self;
}

static int
queue_traverse(AiorCopyQueue *self, visitproc visit, void *arg)
{
    Py_VISIT(self->core);
    Py_VISIT(self->prep);
    Py_VISIT(self->hand_back);
    Py_VISIT(self->rows);
    Py_VISIT(self->waiter);
    return 0;
}

static int
queue_clear(AiorCopyQueue *self)
{
    Py_CLEAR(self->core);
    Py_CLEAR(self->prep);
    Py_CLEAR(self->hand_back);
    Py_CLEAR(self->rows);
    Py_CLEAR(self->waiter);
    return 0;
}

static void
queue_dealloc(AiorCopyQueue *self)
{
    PyObject_GC_UnTrack(self);
    queue_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
check_open(AiorCopyQueue *self)
{
    if (self->rows == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this CopyQueue was cleared");
        return -1;
    }
    return 0;
}

static PyObject *
queue_add(AiorCopyQueue *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add() takes jobs, a source directory and a destination one");
        return NULL;
    }
    if (check_open(self) < 0)
        return NULL;
    if (self->closed || self->cancelled) {
        PyErr_SetString(PyExc_RuntimeError, "this CopyQueue takes no more jobs");
        return NULL;
    }
    PyObject *it = PyObject_GetIter(args[0]);
    if (it == NULL)
        return NULL;
    PyObject *dirs = row_dirs(args[1], args[2]);
    PyObject *row = dirs == NULL ? NULL : PyTuple_Pack(2, it, dirs);
    Py_XDECREF(dirs);
    Py_DECREF(it);
    if (row == NULL)
        return NULL;
    int ret = PyList_Append(self->rows, row);
    Py_DECREF(row);
    if (ret < 0 || fill(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
queue_close(AiorCopyQueue *self, PyObject *waiter)
{
    if (check_open(self) < 0)
        return NULL;
    self->closed = 1;
    aior_set_field(&self->waiter, waiter);
    if (check_drained(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
queue_cancel(AiorCopyQueue *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    self->cancelled = 1;
    if (PyList_SetSlice(self->rows, 0, PyList_GET_SIZE(self->rows), NULL) < 0 || check_drained(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef queue_methods[] = {
    {"add", (PyCFunction)(void (*)(void))queue_add, METH_FASTCALL,
     "add(jobs, src_dir, dst_dir): a row of jobs, of the files of src_dir into dst_dir, started in turn "
     "with the others."},
    {"close", (PyCFunction)queue_close, METH_O,
     "close(waiter): no more rows; waiter.set_result(None) once none is in flight or queued."},
    {"cancel", (PyCFunction)queue_cancel, METH_NOARGS,
     "cancel(): the queued jobs dropped; those in flight complete."},
    {NULL},
};

static PyMemberDef queue_members[] = {
    {"in_flight", T_PYSSIZET, offsetof(AiorCopyQueue, in_flight), READONLY, "copies started, not ended"},
    {"copied", T_LONGLONG, offsetof(AiorCopyQueue, copied), READONLY, "copies made"},
    {"handed_back", T_LONGLONG, offsetof(AiorCopyQueue, handed_back), READONLY, "jobs handed back"},
    {NULL},
};

static PyTypeObject AiorCopyQueue_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aioring._core.CopyQueue",
    .tp_basicsize = sizeof(AiorCopyQueue),
    .tp_dealloc = (destructor)queue_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "CopyQueue(core, prep_openat, meta, size_max, limit, hand_back): the small files of a "
              "tree copied by the core (see treecopy.h).",
    .tp_traverse = (traverseproc)queue_traverse,
    .tp_clear = (inquiry)queue_clear,
    .tp_methods = queue_methods,
    .tp_members = queue_members,
    .tp_new = queue_new,
};

static PyMethodDef treecopy_methods[] = {
    {"copy_source", (PyCFunction)(void (*)(void))copy_source, METH_FASTCALL,
     "copy_source(path, size_max) -> (fd, data, st_mode, st_atime_ns, st_mtime_ns) | None: a small "
     "cached file opened and read at once (see treecopy.h)."},
    {"copy_finish", (PyCFunction)(void (*)(void))copy_finish, METH_FASTCALL,
     "copy_finish(src_fd, dst_fd, atime_ns, mtime_ns, mode, meta) -> bool: a copy's times and mode "
     "set and its fds closed (see treecopy.h)."},
    {NULL},
};

int
aior_treecopy_add(PyObject *module)
{
    if (PyType_Ready(&RowDirs_Type) < 0 || PyType_Ready(&AiorCopyQueue_Type) < 0 ||
        PyModule_AddObjectRef(module, "CopyQueue", (PyObject *)&AiorCopyQueue_Type) < 0)
        return -1;
    return PyModule_AddFunctions(module, treecopy_methods);
}
