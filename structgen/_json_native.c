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

#include "_module_gil.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

/* containers nested deeper than this are left to the iterative Python walk */
#define MAX_DEPTH 512

/* A container is read inside its critical section: on a free-threaded build another thread may
 * change the caller's data meanwhile (a race of theirs, which must not crash here). Before 3.13
 * the GIL is held throughout: nothing to do. */
#ifndef Py_BEGIN_CRITICAL_SECTION
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

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
        int failed = 0;
        Py_BEGIN_CRITICAL_SECTION(node);
        while (PyDict_Next(node, &pos, &key, &value)) {
            if (!PyUnicode_Check(key)) {
                failed = 1;
                break;
            }
            Py_INCREF(key);
            Py_INCREF(value);
            PyObject *inner = plain(value, depth + 1, limit, copy);
            int rc = inner == NULL ? -1 : copy ? PyDict_SetItem(out, key, inner) : 0;
            Py_DECREF(key);
            Py_DECREF(value);
            Py_XDECREF(inner);
            if (rc < 0) {
                failed = 1;
                break;
            }
        }
        Py_END_CRITICAL_SECTION();
        if (failed) {
            Py_XDECREF(out);
            return NULL;
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
        int failed = 0;
        Py_BEGIN_CRITICAL_SECTION(node);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i >= PyList_GET_SIZE(node)) { /* (shrunk meanwhile: give up) */
                failed = 1;
                break;
            }
            PyObject *item = PyList_GET_ITEM(node, i);
            Py_INCREF(item);
            PyObject *inner = plain(item, depth + 1, limit, copy);
            Py_DECREF(item);
            if (inner == NULL) {
                failed = 1;
                break;
            }
            if (copy)
                PyList_SET_ITEM(out, i, inner);
            else
                Py_DECREF(inner);
        }
        Py_END_CRITICAL_SECTION();
        if (failed) {
            Py_XDECREF(out);
            return NULL;
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


/* ------------------------------------------------------------------ fingerprints
 *
 * The bytes a schema's fingerprint digests (`schema/__init__.py:data_fingerprint`): every value
 * written with a type tag and, where its length varies, its length first, so that different
 * data never write the same bytes. json.dumps' text, which this replaces, cost ~60 us of a
 * median compile; these bytes cost a few. Object members in their order (as the text had them:
 * the order of `properties` is the order generated). Plain data only, as `plain_json`: None
 * for anything else (the caller then digests json.dumps' text). */

typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} Buffer;

static int put(Buffer *b, const void *bytes, Py_ssize_t n) {
    if (b->size + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 4096;
        while (cap < b->size + n)
            cap *= 2;
        char *grown = PyMem_Realloc(b->data, cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
    return 0;
}

/* A length as 8 bytes, little-endian on every machine (a fingerprint is a cache key). */
static int put_length(Buffer *b, Py_ssize_t n) {
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(((uint64_t)n >> (8 * i)) & 0xFF);
    return put(b, le, 8);
}

static int put_sized(Buffer *b, char tag, const char *bytes, Py_ssize_t n) {
    if (put(b, &tag, 1) < 0 || put_length(b, n) < 0)
        return -1;
    return put(b, bytes, n);
}

static int put_text(Buffer *b, char tag, PyObject *text) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (utf8 != NULL)
        return put_sized(b, tag, utf8, n);
    PyErr_Clear(); /* (a lone surrogate: its bytes as json.dumps' text would have held it) */
    PyObject *raw = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
    if (raw == NULL)
        return -1;
    int rc = put_sized(b, tag, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw));
    Py_DECREF(raw);
    return rc;
}

/* `put_text` of `text`, a new reference (NULL: its error is set), released after. */
static int put_made(Buffer *b, char tag, PyObject *text) {
    if (text == NULL)
        return -1;
    int rc = put_text(b, tag, text);
    Py_DECREF(text);
    return rc;
}

/* 0 written, -1 error set, 1 not plain (nothing to do but give up). */
static int fingerprint_value(Buffer *b, PyObject *node, int depth) {
    if (node == Py_None)
        return put(b, "n", 1);
    if (node == Py_True)
        return put(b, "t", 1);
    if (node == Py_False)
        return put(b, "f", 1);
    if (PyUnicode_CheckExact(node))
        return put_text(b, 's', node);
    if (PyLong_CheckExact(node))
        return put_made(b, 'i', PyObject_Str(node));
    if (PyFloat_CheckExact(node))
        return isfinite(PyFloat_AS_DOUBLE(node)) ? put_made(b, 'd', PyObject_Repr(node)) : 1;
    if (depth > MAX_DEPTH)
        return 1;
    if (PyDict_CheckExact(node)) {
        Py_ssize_t n = PyDict_GET_SIZE(node);
        if (put(b, "{", 1) < 0 || put_length(b, n) < 0)
            return -1;
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        int rc = 0;
        Py_BEGIN_CRITICAL_SECTION(node);
        while (rc == 0 && PyDict_Next(node, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) {
                rc = 1;
                break;
            }
            Py_INCREF(value);
            rc = put_text(b, 'k', key);
            if (rc == 0)
                rc = fingerprint_value(b, value, depth + 1);
            Py_DECREF(value);
        }
        if (rc == 0 && PyDict_GET_SIZE(node) != n) /* (changed meanwhile: give up) */
            rc = 1;
        Py_END_CRITICAL_SECTION();
        return rc;
    }
    if (PyList_CheckExact(node)) {
        Py_ssize_t n = PyList_GET_SIZE(node);
        if (put(b, "[", 1) < 0 || put_length(b, n) < 0)
            return -1;
        int rc = 0;
        Py_BEGIN_CRITICAL_SECTION(node);
        for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
            if (i >= PyList_GET_SIZE(node)) {
                rc = 1;
                break;
            }
            PyObject *item = PyList_GET_ITEM(node, i);
            Py_INCREF(item);
            rc = fingerprint_value(b, item, depth + 1);
            Py_DECREF(item);
        }
        Py_END_CRITICAL_SECTION();
        return rc;
    }
    return 1;
}

/* fingerprint_bytes(data) -> bytes to digest, or None (not plain data). */
static PyObject *fingerprint_bytes(PyObject *self, PyObject *arg) {
    Buffer b = {NULL, 0, 0};
    int rc = fingerprint_value(&b, arg, 1);
    PyObject *out = NULL;
    if (rc == 0)
        out = PyBytes_FromStringAndSize(b.data ? b.data : "", b.size);
    else if (rc > 0) {
        out = Py_None;
        Py_INCREF(out);
    }
    PyMem_Free(b.data);
    return out;
}

static PyMethodDef methods[] = {
    {"plain_json", (PyCFunction)(void (*)(void))plain_json, METH_FASTCALL,
     "plain_json(data, limit, copy): the plain JSON data (copied with `copy`), or None"},
    {"fingerprint_bytes", (PyCFunction)fingerprint_bytes, METH_O,
     "fingerprint_bytes(data): the bytes a plain JSON value's fingerprint digests, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_json_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__json_native(void)
{
    /* Safe without the GIL: containers are read inside their critical sections */
    return sg_without_gil(PyModule_Create(&module));
}
