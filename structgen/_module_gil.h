/* Shared by structgen's C extensions: a module object declared free of the GIL on a
 * free-threaded build (CPython 3.13t and later), so importing it leaves the GIL off. Each
 * module's init says why it is safe there; docs/design/matcher.md, free-threaded builds. */
#ifndef STRUCTGEN_MODULE_GIL_H
#define STRUCTGEN_MODULE_GIL_H

#include <Python.h>

/* `module` (a new reference, or NULL with an error), declared free of the GIL where the
 * interpreter has none; NULL with an error if that fails. */
static inline PyObject *sg_without_gil(PyObject *module)
{
#ifdef Py_GIL_DISABLED
    if (module != NULL && PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#endif
    return module;
}

#endif
