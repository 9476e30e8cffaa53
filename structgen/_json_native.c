/* `schema/__init__.py`'s check of a schema's JSON data in C: no deeper than the nesting limit,
 * only values JSON holds, and (on request) a private copy made in the same pass. Every schema
 * compile starts with it; the Python walk cost ~1.5% of a median compile.
 *
 * Only the plain case is handled here: exact dicts with string keys, exact lists, strings,
 * integers (bools), None and finite floats. Anything else (NaN, a non-string key, a tuple, a
 * dict subclass, a nesting past the limit) returns None, and the Python walk
 * (`_check_nesting`) runs instead: it raises the precise error, or deep-copies the odd value. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

/* containers nested deeper than this are left to the iterative Python walk */
#define MAX_DEPTH 512

/* The copy of `node` (a new reference; `node` itself when `copy` is 0), NULL with an error
 * set, or NULL with no error: not plain (the caller gives up). */
static PyObject *plain(PyObject *node, int depth, int limit, int copy) {
    if (node == Py_None || PyUnicode_Check(node) || PyLong_Check(node)) {
        Py_INCREF(node);
        return node;
    }
    if (PyFloat_CheckExact(node)) {
        if (!isfinite(PyFloat_AS_DOUBLE(node)))
            return NULL;
        Py_INCREF(node);
        return node;
    }
    if (depth > limit) /* (past the limit, or past MAX_DEPTH: the Python walk decides) */
        return NULL;
    if (PyDict_CheckExact(node)) {
        PyObject *out = copy ? PyDict_New() : NULL;
        if (copy && out == NULL)
            return NULL;
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(node, &pos, &key, &value)) {
            if (!PyUnicode_Check(key)) {
                Py_XDECREF(out);
                return NULL;
            }
            Py_INCREF(key);
            Py_INCREF(value);
            PyObject *inner = plain(value, depth + 1, limit, copy);
            int rc = inner == NULL ? -1 : copy ? PyDict_SetItem(out, key, inner) : 0;
            Py_DECREF(key);
            Py_DECREF(value);
            Py_XDECREF(inner);
            if (rc < 0) {
                Py_XDECREF(out);
                return NULL;
            }
        }
        if (!copy)
            Py_INCREF(node);
        return copy ? out : node;
    }
    if (PyList_CheckExact(node)) {
        Py_ssize_t n = PyList_GET_SIZE(node);
        PyObject *out = copy ? PyList_New(n) : NULL;
        if (copy && out == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i >= PyList_GET_SIZE(node)) { /* (shrunk meanwhile: give up) */
                Py_XDECREF(out);
                return NULL;
            }
            PyObject *item = PyList_GET_ITEM(node, i);
            Py_INCREF(item);
            PyObject *inner = plain(item, depth + 1, limit, copy);
            Py_DECREF(item);
            if (inner == NULL) {
                Py_XDECREF(out);
                return NULL;
            }
            if (copy)
                PyList_SET_ITEM(out, i, inner);
            else
                Py_DECREF(inner);
        }
        if (!copy)
            Py_INCREF(node);
        return copy ? out : node;
    }
    return NULL;
}

/* plain_json(data, limit, copy) -> the data (copied with `copy`) or None: see above. Depth
 * counts containers as `_check_nesting` does (the top container is at depth 1). */
static PyObject *plain_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "plain_json(data, limit, copy)");
        return NULL;
    }
    long wanted = PyLong_AsLong(args[1]);
    if (wanted == -1 && PyErr_Occurred())
        return NULL;
    /* (the C stack bounds the recursion: deeper limits are left to the Python walk) */
    int limit = wanted > MAX_DEPTH ? MAX_DEPTH : (int)wanted;
    int copy = PyObject_IsTrue(args[2]);
    if (copy < 0)
        return NULL;
    PyObject *out = plain(args[0], 1, limit, copy);
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

static PyMethodDef methods[] = {
    {"plain_json", (PyCFunction)(void (*)(void))plain_json, METH_FASTCALL,
     "plain_json(data, limit, copy): the plain JSON data (copied with `copy`), or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_json_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__json_native(void) { return PyModule_Create(&module); }
