/* aioring._core's NewFile: a completion target (see core.h) that makes one
 * op of two steps, the create of a new file and the write of its data.
 *
 * NewFile(path, data)  path is the encoded path (bytes, no NUL) the op's
 *  OPENAT creates, data a C-contiguous buffer.  It is the op's finish.  The
 *  op starts as an OPENAT the binding prepares; at its CQE the core calls
 *  aior_newfile_step, which starts the same op again as the WRITE of the
 *  data (the core's own prep, IOSQE_ASYNC: handed to the kernel's workers
 *  at once, as the create was; the data pinned by the op; again after a short
 *  write) and marks it `continued`: what its first step made (the new fd,
 *  the file) is undone only by this target, so policy never withdraws it.
 *  The op ends:
 *   - with the new fd as its result, once all of data is written (the fd is
 *     then the caller's);
 *   - with the create's error (opened False): nothing was made;
 *   - with the write's error (opened True): the fd closed, the file left as
 *     written so far, as os.write leaves it;
 *   - when its caller was cancelled (op.waiter set) before the data was all
 *     written: the fd closed and the file removed, the op's result
 *     -ECANCELED.  With the data all written, the fd is its result as above.
 *  Where it ends, an owner's hook (below) takes the end; without one, the
 *  target lets go of the op (op.finish None) and the core finishes the op
 *  with that result as any op: its future gets it.
 *  [opened]  Whether the create completed (an error is then the write's).
 *  [drop(res)]  The op ends unfinished (its ring closes): res is the
 *  result of the CQE that came meanwhile and reached no target (a create's
 *  fd), or -ECANCELED.  An fd it holds is closed, a file it made removed
 *  (its caller never had it), and the owner's drop hook called.
 *
 * An owner (C only; src/treecopy.c's CopyQueue) makes NewFiles with
 *  aior_newfile_make and sets, before the op starts:
 *   - owner, a strong reference, and context, the owner's per-file object;
 *   - dir_fd, when path is relative to a directory's fd (the OPENAT's
 *     too), which the context keeps open;
 *   - on_end(nf, core, op, res): the op's end instead of its future's (res
 *     as above; the fd of a whole file is the hook's to close).  The op's
 *     pin is released and op.finish let go before the call.  0, or -1 with
 *     an exception set;
 *   - on_drop(nf): drop()'s call, after the file was removed.
 *
 * aior_newfile_step(core, op, &res) -> 1 | 0 | -1  The core's call for the
 *  CQE of an op whose finish is a NewFile (after policy's retry, op DONE):
 *  1 when nothing is left for the core to do (op started again for its
 *  next step, or its end taken by the owner's hook), 0 when it ended and
 *  the core finishes it with *res (op.finish None), -1 with an exception
 *  set.
 *
 * aior_newfile_add(module) -> 0 | -1  Adds NewFile to module.
 */
#ifndef AIORING_NEWFILE_H
#define AIORING_NEWFILE_H

#include <Python.h>

#include "core.h"

typedef struct AiorNewFile AiorNewFile;

struct AiorNewFile {
    PyObject_HEAD
    PyObject *path;    /* the encoded path created (bytes), relative to dir_fd */
    int dir_fd;        /* AT_FDCWD, or (an owner's) the directory's fd */
    PyObject *data;    /* what is written */
    Py_ssize_t size;   /* its length in bytes */
    Py_ssize_t done;   /* bytes written so far */
    int fd;            /* the new fd while this target holds it, else -1 */
    int step;          /* NEWFILE_* (newfile.c) */
    char opened;       /* the create completed */
    PyObject *owner;   /* NULL, or the owner of the hooks below */
    PyObject *context; /* the owner's, per file (NULL: none) */
    int (*on_end)(AiorNewFile *nf, AiorCore *core, AiorOp *op, int res);
    void (*on_drop)(AiorNewFile *nf);
};

extern PyTypeObject AiorNewFile_Type;
#define AiorNewFile_Check(obj) (Py_TYPE(obj) == &AiorNewFile_Type)

AiorNewFile *aior_newfile_make(PyObject *path, PyObject *data);
int aior_newfile_step(AiorCore *core, AiorOp *op, int *res);
int aior_newfile_add(PyObject *module);

#endif
