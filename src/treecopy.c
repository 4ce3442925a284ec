/* aioring._core's steps of a small file's copy that need no waiting (see treecopy.h). */
#define PY_SSIZE_T_CLEAN
#include "treecopy.h"

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

/* A regular file of at most size_max bytes at path, opened at once: its fd
   and stat, or -1 (nothing left open). */
static int
open_cached(const char *path, long long size_max, struct stat *st)
{
    struct treecopy_open_how how;
    int fd;

    memset(&how, 0, sizeof how);
    how.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
    how.resolve = TREECOPY_RESOLVE_CACHED;
    fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_size > size_max) {
        close(fd);
        return -1;
    }
    return fd;
}

static PyObject *
copy_source(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    struct stat st;
    int fd, overflow;
    ssize_t got;
    char spare;

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
    fd = open_cached(path, size_max, &st);
    Py_END_ALLOW_THREADS
    if (fd < 0)
        Py_RETURN_NONE;
    /* Not zeroed: only what the kernel filled leaves here. */
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)st.st_size);
    if (data == NULL)
        goto fail;
    struct iovec iov[2] = {{PyBytes_AS_STRING(data), (size_t)st.st_size}, {&spare, 1}};
    Py_BEGIN_ALLOW_THREADS
    got = preadv2(fd, iov, 2, 0, RWF_NOWAIT);
    Py_END_ALLOW_THREADS
    /* A read one byte longer than the file that returns the file's size
       found its end: every page of it was cached (a missing one stops the
       read short of it).  Otherwise the fd and its stat are the caller's,
       who reads the file another way: this read may have moved its access
       time already. */
    if (got != (ssize_t)st.st_size) {
        Py_SETREF(data, Py_NewRef(Py_None));
        /* (the ring's reads of an O_NONBLOCK file answer EAGAIN instead of waiting) */
        if (fcntl(fd, F_SETFL, O_RDONLY) < 0) {
            close(fd);
            Py_RETURN_NONE;
        }
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

static PyObject *
copy_finish(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int src_fd, dst_fd, meta, mode, err = 0, r = 0, chmod_failed = 0;
    long long atime, mtime;
    struct timespec times[2];
    struct stat st;

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
    times[0].tv_sec = atime / 1000000000LL, times[0].tv_nsec = atime % 1000000000LL;
    times[1].tv_sec = mtime / 1000000000LL, times[1].tv_nsec = mtime % 1000000000LL;
    if (times[0].tv_nsec < 0)
        times[0].tv_sec -= 1, times[0].tv_nsec += 1000000000LL;
    if (times[1].tv_nsec < 0)
        times[1].tv_sec -= 1, times[1].tv_nsec += 1000000000LL;
    Py_BEGIN_ALLOW_THREADS
    if (meta == 2 && has_xattrs(src_fd)) {
        r = 1;
    } else if (meta == 2 && futimens(dst_fd, times) < 0) {
        err = errno;
    } else if (meta >= 1) {
        if (fstat(dst_fd, &st) < 0)
            err = errno;
        else if ((int)(st.st_mode & 07777) != mode && fchmod(dst_fd, (mode_t)mode) < 0)
            err = errno, chmod_failed = 1;
    }
    Py_END_ALLOW_THREADS
    if (r == 1)
        Py_RETURN_FALSE; /* (the caller's steps, with both fds) */
    Py_BEGIN_ALLOW_THREADS
    if (close(dst_fd) < 0 && !err)
        err = errno;
    if (close(src_fd) < 0 && !err)
        err = errno;
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        /* (os.chmod names the fd in its OSError; os.utime, os.fstat and os.close do not) */
        return chmod_failed ? PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, args[1])
                            : PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_TRUE;
}

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
    return PyModule_AddFunctions(module, treecopy_methods);
}
