/* The coroutine protocol's pieces the core's C awaitables share (see awaitable.h). */
#define PY_SSIZE_T_CLEAN
#include "awaitable.h"

PyObject *
aior_step_result(PySendResult status, PyObject *result)
{
    if (status != PYGEN_RETURN)
        return status == PYGEN_NEXT ? result : NULL;
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
    Py_DECREF(result);
    if (stop != NULL) {
        PyErr_SetObject(PyExc_StopIteration, stop);
        Py_DECREF(stop);
    }
    return NULL;
}

PyObject *
aior_reused(void)
{
    PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
    return NULL;
}

PyObject *
aior_forward(PyObject *target, PyObject *method, PyObject *args, int is_throw, PyObject **inner)
{
    PyObject *bound = PyObject_GetAttr(target, method);
    PyObject *result = bound == NULL ? NULL : PyObject_Call(bound, args, NULL);
    Py_XDECREF(bound);
    if (result != NULL && is_throw)
        *inner = target;
    else
        Py_DECREF(target);
    return result;
}

void
aior_warn_unawaited(PyObject *self, PyObject *public_fn)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *name = PyObject_GetAttrString(public_fn, "__qualname__");
    if (name == NULL || PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "coroutine '%S' was never awaited", name) < 0)
        PyErr_WriteUnraisable(self);
    Py_XDECREF(name);
    PyErr_Restore(type, value, tb);
}

PySendResult
aior_inner_call(PyObject *inner, PyObject *method, PyObject *args, PyObject **result)
{
    PyObject *bound = PyObject_GetAttr(inner, method);
    *result = bound == NULL ? NULL : PyObject_Call(bound, args, NULL);
    Py_XDECREF(bound);
    if (*result != NULL)
        return PYGEN_NEXT;
    if (!PyErr_ExceptionMatches(PyExc_StopIteration))
        return PYGEN_ERROR;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    *result = value != NULL ? PyObject_GetAttrString(value, "value") : Py_NewRef(Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return *result == NULL ? PYGEN_ERROR : PYGEN_RETURN;
}

PyObject *
aior_awaitable_send(PyObject *self, PyObject *arg)
{
    PyObject *result = NULL;
    PySendResult status = Py_TYPE(self)->tp_as_async->am_send(self, arg, &result);
    return aior_step_result(status, result);
}

PyObject *
aior_awaitable_iternext(PyObject *self)
{
    return aior_awaitable_send(self, Py_None);
}

PyObject *
aior_awaitable_await(PyObject *self)
{
    return Py_NewRef(self);
}

static PyObject *
public_name(AiorAwaitable *self, void *closure)
{
    return PyObject_GetAttrString(self->public_fn, (const char *)closure);
}

PyGetSetDef aior_awaitable_getset[] = {
    {"__name__", (getter)public_name, NULL, NULL, "__name__"},
    {"__qualname__", (getter)public_name, NULL, NULL, "__qualname__"},
    {NULL},
};

void
aior_awaitable_finalize(PyObject *self, int waiting, PyObject *(*close)(PyObject *, PyObject *))
{
    if (!waiting) {
        if (((AiorAwaitable *)self)->public_fn != NULL)
            aior_warn_unawaited(self, ((AiorAwaitable *)self)->public_fn);
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = close(self, NULL);
    if (r == NULL)
        PyErr_WriteUnraisable(self);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
}
