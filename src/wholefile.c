/* aioring._core's read of a whole file from the page cache (see wholefile.h). */
#define PY_SSIZE_T_CLEAN
#include "wholefile.h"

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

#define SPARE 4096

/* Whether fd's bytes at offset are exactly the n at buf (page-cached). */
static int
fill_whole(int fd, char *buf, Py_ssize_t n, long long offset)
{
    char spare[SPARE];
    struct iovec iov[2] = {{buf, (size_t)n}, {spare, sizeof spare}};
    ssize_t got;

    Py_BEGIN_ALLOW_THREADS
    got = preadv2(fd, iov, 2, (off_t)offset, RWF_NOWAIT);
    Py_END_ALLOW_THREADS
    if (got != n)
        return 0;
    /* The spare stayed empty: the end of the file, or the kernel stopped at
       a page it could not read without waiting.  A byte past it tells. */
    iov[0].iov_base = spare;
    iov[0].iov_len = 1;
    Py_BEGIN_ALLOW_THREADS
    got = preadv2(fd, iov, 1, (off_t)(offset + n), RWF_NOWAIT);
    Py_END_ALLOW_THREADS
    return got == 0;
}

static PyObject *
read_whole_now(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int overflow;

    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "read_whole_now() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "read_whole_now() takes three ints");
        return NULL;
    }
    long fd = PyLong_AsLongAndOverflow(args[0], &overflow);
    if (overflow || fd < 0 || fd > INT_MAX)
        Py_RETURN_NONE;
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    long long offset = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (overflow || offset < 0 || n < 2 || n > INT_MAX - SPARE || offset > LLONG_MAX - n)
        Py_RETURN_NONE;
    /* Not zeroed: only what the kernel filled leaves here. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    if (!fill_whole((int)fd, PyBytes_AS_STRING(out), n, offset)) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

static PyObject *
fstat_brief(PyObject *module, PyObject *fd_obj)
{
    struct stat st;
    int r;

    long fd = PyLong_AsLong(fd_obj);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < INT_MIN || fd > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "fd is out of the range of a C int");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    r = fstat((int)fd, &st);
    Py_END_ALLOW_THREADS
    if (r < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return Py_BuildValue("(kLKKl)", (unsigned long)st.st_mode, (long long)st.st_size,
                         (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long)st.st_blksize);
}

static PyMethodDef wholefile_methods[] = {
    {"fstat_brief", fstat_brief, METH_O,
     "fstat_brief(fd) -> (st_mode, st_size, st_dev, st_ino, st_blksize): os.fstat's fields that an "
     "open needs (see wholefile.h)."},
    {"read_whole_now", (PyCFunction)(void (*)(void))read_whole_now, METH_FASTCALL,
     "read_whole_now(fd, n, offset) -> bytes | None: a whole file's rest from the page cache at once "
     "(see wholefile.h)."},
    {NULL},
};

int
aior_wholefile_add(PyObject *module)
{
    return PyModule_AddFunctions(module, wholefile_methods);
}
