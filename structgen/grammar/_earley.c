/* The inner loops of `grammar/earley.py` in C: building an Earley set's items (`closure`) and
 * a scan's kernel (`scan_kernel`). A new parse state is built at most first visits of a mask,
 * tens of thousands of times over a schema's test documents; in Python each one cost ~14 us of
 * tuple unpacking, dict lookups and set updates.
 *
 * Same items, same order of discovery as the Python loops (`EarleySet.__init__`, `scan`), which
 * stay as the fallback (STRUCTGEN_NATIVE=0, or no C compiler). Items are the Python tuples
 * (rule id, dot, origin set); origins are `EarleySet` objects read through their `by_next` and
 * `predicted` attributes. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_module_gil.h"

/* The grammar's memo dicts are shared by every thread that parses with it: on a free-threaded
 * build another thread may store into one while this one reads it, so values are read as new
 * references (a borrowed one could be freed under it when the entry is replaced or cleared).
 * The EarleySets' own `by_next` and `predicted` are read borrowed: they never change once the
 * set is made. */
#if PY_VERSION_HEX < 0x030D0000
static int PyDict_GetItemRef(PyObject *dict, PyObject *key, PyObject **result)
{
    PyObject *found = PyDict_GetItemWithError(dict, key);
    *result = found;
    if (found != NULL) {
        Py_INCREF(found);
        return 1;
    }
    return PyErr_Occurred() ? -1 : 0;
}
#endif

static PyObject *str_by_next;
static PyObject *str_predicted;

/* A stack of owned references. */
typedef struct {
    PyObject **items;
    Py_ssize_t size;
    Py_ssize_t cap;
} Stack;

static int stack_push(Stack *s, PyObject *item) { /* steals `item` */
    if (item == NULL)
        return -1;
    if (s->size == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        PyObject **grown = PyMem_Realloc(s->items, (size_t)cap * sizeof(PyObject *));
        if (grown == NULL) {
            Py_DECREF(item);
            PyErr_NoMemory();
            return -1;
        }
        s->items = grown;
        s->cap = cap;
    }
    s->items[s->size++] = item;
    return 0;
}

static void stack_clear(Stack *s) {
    while (s->size)
        Py_DECREF(s->items[--s->size]);
    PyMem_Free(s->items);
}

/* (rid, dot + 1, origin) with `dot` a Python int. */
static PyObject *advanced(PyObject *rid, PyObject *dot, PyObject *origin) {
    Py_ssize_t d = PyLong_AsSsize_t(dot);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    PyObject *next = PyLong_FromSsize_t(d + 1);
    if (next == NULL)
        return NULL;
    PyObject *item = PyTuple_Pack(3, rid, next, origin);
    Py_DECREF(next);
    return item;
}

static int bad_item(void) {
    PyErr_SetString(PyExc_TypeError, "an Earley item must be a (rule id, dot, origin) tuple");
    return -1;
}

/* Where advanced items go: a sink takes a new reference (or NULL, an error already set). */
typedef int (*sink_fn)(void *ctx, PyObject *item);

static int to_stack(void *ctx, PyObject *item) { return stack_push((Stack *)ctx, item); }

static int to_set(void *ctx, PyObject *item) {
    if (item == NULL)
        return -1;
    int rc = PySet_Add((PyObject *)ctx, item);
    Py_DECREF(item);
    return rc;
}

/* Each carried item of `waiting` (a list of (rule id, dot, origin)), advanced over its next
 * symbol, into `sink`. */
static int advance_waiting(PyObject *waiting, sink_fn sink, void *ctx) {
    if (!PyList_Check(waiting))
        return bad_item();
    Py_INCREF(waiting);
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(waiting); i++) {
        PyObject *it = PyList_GET_ITEM(waiting, i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 3)
            rc = bad_item();
        else
            rc = sink(ctx, advanced(PyTuple_GET_ITEM(it, 0), PyTuple_GET_ITEM(it, 1),
                                    PyTuple_GET_ITEM(it, 2)));
    }
    Py_DECREF(waiting);
    return rc;
}

/* Each predicted (rule id, dot) pair of `pairs` (a tuple), advanced, with `origin` (the set
 * that predicted it) as its origin, into `sink`. */
static int advance_pairs(PyObject *pairs, PyObject *origin, sink_fn sink, void *ctx) {
    if (!PyTuple_Check(pairs))
        return bad_item();
    Py_INCREF(pairs);
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyTuple_GET_SIZE(pairs); i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
            rc = bad_item();
        else
            rc = sink(ctx, advanced(PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), origin));
    }
    Py_DECREF(pairs);
    return rc;
}

/* The items of `set` (an EarleySet: read through its `by_next` and `predicted` dicts) waiting
 * on `symbol`, advanced over it, into `sink`. */
static int advance_over(PyObject *set, PyObject *symbol, sink_fn sink, void *ctx) {
    PyObject *by_next = PyObject_GetAttr(set, str_by_next);
    if (by_next == NULL)
        return -1;
    int rc = 0;
    PyObject *waiting = PyDict_Check(by_next) ? PyDict_GetItemWithError(by_next, symbol) : NULL;
    if (waiting == NULL && PyErr_Occurred())
        rc = -1;
    else if (waiting != NULL)
        rc = advance_waiting(waiting, sink, ctx);
    Py_DECREF(by_next);
    if (rc)
        return rc;
    PyObject *predicted = PyObject_GetAttr(set, str_predicted);
    if (predicted == NULL)
        return -1;
    PyObject *pairs = PyDict_Check(predicted) ? PyDict_GetItemWithError(predicted, symbol) : NULL;
    if (pairs == NULL && PyErr_Occurred())
        rc = -1;
    else if (pairs != NULL)
        rc = advance_pairs(pairs, set, sink, ctx);
    Py_DECREF(predicted);
    return rc;
}

/* ------------------------------------------------------------------ prediction
 *
 * `EarleyGrammar.own_items_of`, `predicts_of` and `prediction` in C, over the same memo dicts
 * (the Python methods stay: the fallback, and callers outside the closure). A new parse state
 * whose items predict nonterminals not met before in this grammar asks them: a few µs of
 * Python each, for a handful of rules. Same results in the same order (the memos are shared,
 * and sets are filled in the order the Python loops fill them). */

typedef struct {
    PyObject *rules, *nullable, *by_lhs, *own, *firsts, *predicts, *predictions;
    Py_ssize_t num_terminals;
} grammar_tables;

/* The tables from `EarleyGrammar.native_tables` (9 entries; 0 when it has the 6 of an older
 * layout: then the Python methods answer). -1 on a bad tuple. */
static int read_tables(PyObject *tables, grammar_tables *g) {
    if (!PyTuple_Check(tables) || (PyTuple_GET_SIZE(tables) != 6 && PyTuple_GET_SIZE(tables) != 9)) {
        PyErr_SetString(PyExc_TypeError, "the grammar's tables must be a 6- or 9-tuple");
        return -1;
    }
    if (PyTuple_GET_SIZE(tables) == 6)
        return 0;
    g->rules = PyTuple_GET_ITEM(tables, 0);
    g->nullable = PyTuple_GET_ITEM(tables, 1);
    g->num_terminals = PyLong_AsSsize_t(PyTuple_GET_ITEM(tables, 2));
    g->predicts = PyTuple_GET_ITEM(tables, 4);
    g->predictions = PyTuple_GET_ITEM(tables, 5);
    g->by_lhs = PyTuple_GET_ITEM(tables, 6);
    g->own = PyTuple_GET_ITEM(tables, 7);
    g->firsts = PyTuple_GET_ITEM(tables, 8);
    if (PyErr_Occurred())
        return -1;
    if (!PyList_Check(g->rules) || !PyAnySet_Check(g->nullable) || !PyDict_Check(g->predicts) ||
        !PyDict_Check(g->predictions) || !PyDict_Check(g->by_lhs) || !PyDict_Check(g->own) ||
        !PyDict_Check(g->firsts)) {
        PyErr_SetString(PyExc_TypeError, "the grammar's tables have the wrong types");
        return -1;
    }
    return 1;
}

/* `own_items_of(nt)`: nt's predicted items as (next symbol, rule id, dot), memoised in `own`
 * (and the nonterminals among those symbols in `firsts`). A new reference, or NULL. */
static PyObject *own_items(grammar_tables *g, PyObject *nt) {
    PyObject *hit;
    if (PyDict_GetItemRef(g->own, nt, &hit) != 0)
        return hit; /* (found, or NULL with the error) */
    PyObject *items = PyList_New(0), *firsts = PySet_New(NULL), *own = NULL, *frozen = NULL;
    int rc = items == NULL || firsts == NULL ? -1 : 0;
    PyObject *rids = rc ? NULL : PyDict_GetItemWithError(g->by_lhs, nt); /* (None: no rules) */
    if (rids == NULL && PyErr_Occurred())
        rc = -1;
    else if (rids != NULL && !PyList_Check(rids)) {
        PyErr_SetString(PyExc_TypeError, "by_lhs holds lists of rule ids");
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && rids != NULL && i < PyList_GET_SIZE(rids); i++) {
        PyObject *rid = PyList_GET_ITEM(rids, i);
        Py_ssize_t r = PyLong_AsSsize_t(rid);
        if (r < 0 || r >= PyList_GET_SIZE(g->rules)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "a rule id out of range");
            rc = -1;
            break;
        }
        PyObject *rule = PyList_GET_ITEM(g->rules, r);
        if (!PyTuple_Check(rule) || PyTuple_GET_SIZE(rule) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(rule, 1))) {
            PyErr_SetString(PyExc_TypeError, "a rule must be (lhs, rhs tuple)");
            rc = -1;
            break;
        }
        PyObject *rhs = PyTuple_GET_ITEM(rule, 1);
        for (Py_ssize_t dot = 0; rc == 0 && dot < PyTuple_GET_SIZE(rhs); dot++) {
            PyObject *following = PyTuple_GET_ITEM(rhs, dot);
            PyObject *d = PyLong_FromSsize_t(dot);
            PyObject *item = d ? PyTuple_Pack(3, following, rid, d) : NULL;
            Py_XDECREF(d);
            rc = item == NULL ? -1 : PyList_Append(items, item);
            Py_XDECREF(item);
            Py_ssize_t f = rc ? 0 : PyLong_AsSsize_t(following);
            if (rc == 0 && PyErr_Occurred())
                rc = -1;
            if (rc == 0 && f >= g->num_terminals)
                rc = PySet_Add(firsts, following);
            int skip = rc ? 0 : PySet_Contains(g->nullable, following);
            if (skip < 0)
                rc = -1;
            else if (!skip)
                break;
        }
    }
    if (rc == 0 && (own = PyList_AsTuple(items)) != NULL && (frozen = PyFrozenSet_New(firsts)))
        /* (the firsts first: another thread that finds the items reads the firsts next) */
        rc = PyDict_SetItem(g->firsts, nt, frozen) || PyDict_SetItem(g->own, nt, own) ? -1 : 0;
    else
        rc = -1;
    Py_XDECREF(items);
    Py_XDECREF(firsts);
    Py_XDECREF(frozen);
    if (rc)
        Py_CLEAR(own);
    return own;
}

/* `predicts_of(nt)`: the nonterminals a set that expects `nt` predicts (nt included), memoised
 * in `predicts` (an nt without rules: an empty frozenset, not memoised). A new reference. */
static PyObject *predicts_of_c(grammar_tables *g, PyObject *nt) {
    PyObject *hit;
    if (PyDict_GetItemRef(g->predicts, nt, &hit) != 0)
        return hit;
    int has = PyDict_Contains(g->by_lhs, nt);
    if (has <= 0)
        return has < 0 ? NULL : PyFrozenSet_New(NULL);
    PyObject *closure = PySet_New(NULL), *result = NULL;
    Stack stack = {NULL, 0, 0};
    int rc = closure == NULL || PySet_Add(closure, nt) < 0 ? -1 : 0;
    if (rc == 0) {
        Py_INCREF(nt);
        rc = stack_push(&stack, nt);
    }
    while (rc == 0 && stack.size) {
        PyObject *top = stack.items[--stack.size]; /* owned */
        PyObject *own = own_items(g, top), *firsts = NULL;
        if (own != NULL && PyDict_GetItemRef(g->firsts, top, &firsts) == 0)
            PyErr_SetString(PyExc_KeyError, "predicts_of: no first nonterminals");
        Py_XDECREF(own);
        Py_DECREF(top);
        if (firsts == NULL) {
            rc = -1;
            break;
        }
        PyObject *iter = PyObject_GetIter(firsts), *nxt;
        Py_DECREF(firsts);
        if (iter == NULL) {
            rc = -1;
            break;
        }
        while (rc == 0 && (nxt = PyIter_Next(iter)) != NULL) {
            int known = PySet_Contains(closure, nxt);
            if (known < 0 || (!known && PySet_Add(closure, nxt) < 0))
                rc = -1;
            if (rc == 0 && !known) {
                Py_INCREF(nxt);
                rc = stack_push(&stack, nxt);
            }
            Py_DECREF(nxt);
        }
        Py_DECREF(iter);
        if (PyErr_Occurred())
            rc = -1;
    }
    if (rc == 0 && (result = PyFrozenSet_New(closure)) != NULL &&
        PyDict_SetItem(g->predicts, nt, result) < 0)
        Py_CLEAR(result);
    stack_clear(&stack);
    Py_XDECREF(closure);
    return result;
}

#define MAX_PREDICTIONS 65536 /* (as EarleyGrammar.prediction: the memo is cleared past it) */

/* `prediction(nonterminals)`: (the (rule id, dot) pairs by next symbol, the terminals among
 * those symbols) of a set predicting `nonterminals`, memoised in `predictions`. New ref. */
static PyObject *prediction_c(grammar_tables *g, PyObject *nonterminals) {
    PyObject *hit;
    if (PyDict_GetItemRef(g->predictions, nonterminals, &hit) != 0)
        return hit;
    PyObject *grouped = PyDict_New(), *by_symbol = NULL, *terminals = NULL, *result = NULL;
    PyObject *iter = grouped ? PyObject_GetIter(nonterminals) : NULL, *nt;
    int rc = iter == NULL ? -1 : 0;
    while (rc == 0 && (nt = PyIter_Next(iter)) != NULL) {
        PyObject *own = own_items(g, nt);
        Py_DECREF(nt);
        if (own == NULL || !PyTuple_Check(own)) {
            if (own != NULL)
                PyErr_SetString(PyExc_TypeError, "a nonterminal's own items are a tuple");
            Py_XDECREF(own);
            rc = -1;
            break;
        }
        for (Py_ssize_t i = 0; rc == 0 && i < PyTuple_GET_SIZE(own); i++) {
            PyObject *item = PyTuple_GET_ITEM(own, i); /* (sym, rid, dot) */
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
                PyErr_SetString(PyExc_TypeError, "an own item is (symbol, rule id, dot)");
                rc = -1;
                break;
            }
            PyObject *sym = PyTuple_GET_ITEM(item, 0);
            PyObject *pairs = PyDict_GetItemWithError(grouped, sym);
            if (pairs == NULL) {
                if (PyErr_Occurred() || (pairs = PyList_New(0)) == NULL) {
                    rc = -1;
                    break;
                }
                rc = PyDict_SetItem(grouped, sym, pairs);
                Py_DECREF(pairs); /* (the dict holds it) */
                if (rc)
                    break;
            }
            PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(item, 1), PyTuple_GET_ITEM(item, 2));
            rc = pair == NULL ? -1 : PyList_Append(pairs, pair);
            Py_XDECREF(pair);
        }
        Py_DECREF(own);
    }
    Py_XDECREF(iter);
    if (PyErr_Occurred())
        rc = -1;
    if (rc == 0 && ((by_symbol = PyDict_New()) == NULL || (terminals = PyFrozenSet_New(NULL)) == NULL))
        rc = -1;
    Py_ssize_t pos = 0;
    PyObject *sym, *pairs;
    while (rc == 0 && PyDict_Next(grouped, &pos, &sym, &pairs)) {
        PyObject *frozen = PyList_AsTuple(pairs);
        rc = frozen == NULL ? -1 : PyDict_SetItem(by_symbol, sym, frozen);
        Py_XDECREF(frozen);
    }
    pos = 0;
    while (rc == 0 && PyDict_Next(by_symbol, &pos, &sym, &pairs)) {
        Py_ssize_t s = PyLong_AsSsize_t(sym);
        if (PyErr_Occurred())
            rc = -1;
        else if (s < g->num_terminals)
            rc = PySet_Add(terminals, sym); /* (brand new: PySet_Add may fill it) */
    }
    if (rc == 0 && (result = PyTuple_Pack(2, by_symbol, terminals)) != NULL) {
        if (PyDict_GET_SIZE(g->predictions) >= MAX_PREDICTIONS)
            PyDict_Clear(g->predictions);
        if (PyDict_SetItem(g->predictions, nonterminals, result) < 0)
            Py_CLEAR(result);
    }
    Py_XDECREF(grouped);
    Py_XDECREF(by_symbol);
    Py_XDECREF(terminals);
    return result;
}

/* The 9-entry tables of a call from Python into `g`; 0, or -1 with TypeError. */
static int full_tables(PyObject *tables, grammar_tables *g, const char *name) {
    int got = read_tables(tables, g);
    if (got == 0)
        PyErr_Format(PyExc_TypeError, "%s needs the 9-entry tables", name);
    return got > 0 ? 0 : -1;
}

/* predicts_of(tables, nt) and prediction(tables, nonterminals): the two above, for tests and
 * for Python callers (tables: `EarleyGrammar.native_tables`, the 9-entry layout). */
static PyObject *py_predicts_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    grammar_tables g;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "predicts_of takes tables and a nonterminal");
        return NULL;
    }
    return full_tables(args[0], &g, "predicts_of") < 0 ? NULL : predicts_of_c(&g, args[1]);
}

static PyObject *py_prediction(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    grammar_tables g;
    if (nargs != 2 || !PyFrozenSet_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "prediction takes tables and a frozenset");
        return NULL;
    }
    return full_tables(args[0], &g, "prediction") < 0 ? NULL : prediction_c(&g, args[1]);
}

/* Add the nonterminals `nt` predicts (from the grammar's memo, else `predicts_of_c` with the
 * 9-entry tables `g`, else the grammar's method) to `out`. */
static int predict(PyObject *out, PyObject *memo, PyObject *predicts_of, PyObject *nt,
                   grammar_tables *g) {
    PyObject *found;
    int known = PyDict_GetItemRef(memo, nt, &found);
    if (known < 0)
        return -1;
    if (!known) {
        found = g != NULL ? predicts_of_c(g, nt) : PyObject_CallOneArg(predicts_of, nt);
        if (found == NULL)
            return -1;
    }
    PyObject *iter = PyObject_GetIter(found);
    Py_DECREF(found);
    if (iter == NULL)
        return -1;
    PyObject *x;
    int rc = 0;
    while (rc == 0 && (x = PyIter_Next(iter)) != NULL) {
        rc = PySet_Add(out, x);
        Py_DECREF(x);
    }
    Py_DECREF(iter);
    return rc || PyErr_Occurred() ? -1 : 0;
}

/* closure(tables, predicts_of, prediction, kernel, by_next, predicted, complete)
 *   -> (complete, predicted items by next symbol, expected terminals)
 *
 * `EarleySet.__init__`: fills `by_next` (dict: next symbol -> items) from the kernel's items
 * and their completions, adds to the set `predicted` every nonterminal predicted on the way,
 * then looks up (or asks `prediction` for) the items those nonterminals predict, and the
 * terminals the set expects: the predicted ones and those its carried items wait on.
 * `tables`: the grammar's (rules: list of (lhs, rhs tuple), nullable, number of terminals,
 * start rule id, memo of `predicts_of`, memo of `prediction`[, by_lhs, memo of own items, memo
 * of first nonterminals]): with the last three, what the memos lack is made in C
 * (`predicts_of_c`, `prediction_c`), else by calling `predicts_of` and `prediction`. */
static PyObject *closure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    grammar_tables tables_c;
    int native_prediction = nargs == 7 ? read_tables(args[0], &tables_c) : -1;
    if (native_prediction < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "closure takes 7 arguments, the first a tuple");
        return NULL;
    }
    grammar_tables *g = native_prediction ? &tables_c : NULL;
    PyObject *tables = args[0];
    PyObject *rules = PyTuple_GET_ITEM(tables, 0), *nullable = PyTuple_GET_ITEM(tables, 1);
    PyObject *memo = PyTuple_GET_ITEM(tables, 4), *predictions = PyTuple_GET_ITEM(tables, 5);
    PyObject *predicts_of = args[1], *prediction = args[2];
    PyObject *kernel = args[3], *by_next = args[4], *predicted = args[5];
    Py_ssize_t num_terminals = PyLong_AsSsize_t(PyTuple_GET_ITEM(tables, 2));
    Py_ssize_t start_rule = PyLong_AsSsize_t(PyTuple_GET_ITEM(tables, 3));
    int complete = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || complete < 0)
        return NULL;
    if (!PyList_Check(rules) || !PyAnySet_Check(nullable) || !PyDict_Check(memo) ||
        !PyDict_Check(predictions) || !PyDict_Check(by_next) || !PySet_Check(predicted)) {
        PyErr_SetString(PyExc_TypeError, "closure: bad argument types");
        return NULL;
    }
    Stack work = {NULL, 0, 0};
    PyObject *seen = PySet_New(NULL);
    PyObject *merged = PySet_New(NULL); /* nonterminals whose predictions are in `predicted` */
    PyObject *carried = PyList_New(0);
    PyObject *result = NULL;
    if (seen == NULL || merged == NULL || carried == NULL)
        goto done;
    PyObject *seq = PySequence_Fast(kernel, "the kernel must be a sequence");
    if (seq == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(it);
        if (stack_push(&work, it) < 0) {
            Py_DECREF(seq);
            goto done;
        }
    }
    Py_DECREF(seq);
    while (work.size) {
        PyObject *item = work.items[--work.size]; /* owned */
        Py_ssize_t before = PySet_GET_SIZE(seen);
        if (PySet_Add(seen, item) < 0) {
            Py_DECREF(item);
            goto done;
        }
        if (PySet_GET_SIZE(seen) == before) { /* seen before */
            Py_DECREF(item);
            continue;
        }
        int rc = 0;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            Py_DECREF(item);
            bad_item();
            goto done;
        }
        PyObject *rid_obj = PyTuple_GET_ITEM(item, 0), *dot_obj = PyTuple_GET_ITEM(item, 1);
        PyObject *origin = PyTuple_GET_ITEM(item, 2);
        Py_ssize_t rid = PyLong_AsSsize_t(rid_obj), dot = PyLong_AsSsize_t(dot_obj);
        if (PyErr_Occurred() || rid < 0 || rid >= PyList_GET_SIZE(rules)) {
            Py_DECREF(item);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "closure: rule id out of range");
            goto done;
        }
        PyObject *rule = PyList_GET_ITEM(rules, rid);
        if (!PyTuple_Check(rule) || PyTuple_GET_SIZE(rule) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(rule, 1))) {
            Py_DECREF(item);
            PyErr_SetString(PyExc_TypeError, "closure: a rule must be (lhs, rhs tuple)");
            goto done;
        }
        PyObject *lhs = PyTuple_GET_ITEM(rule, 0), *rhs = PyTuple_GET_ITEM(rule, 1);
        if (dot < PyTuple_GET_SIZE(rhs)) {
            PyObject *sym = PyTuple_GET_ITEM(rhs, dot);
            Py_ssize_t s = PyLong_AsSsize_t(sym);
            PyObject *entry = PyErr_Occurred() ? NULL : PyDict_GetItemWithError(by_next, sym);
            if (entry != NULL) {
                rc = PyList_Append(entry, item);
            } else if (PyErr_Occurred()) {
                rc = -1;
            } else {
                PyObject *fresh = PyList_New(1);
                if (fresh == NULL) {
                    rc = -1;
                } else {
                    Py_INCREF(item);
                    PyList_SET_ITEM(fresh, 0, item);
                    rc = PyDict_SetItem(by_next, sym, fresh);
                    Py_DECREF(fresh);
                }
                if (rc == 0 && s < num_terminals) /* a terminal this set carries */
                    rc = PyList_Append(carried, sym);
            }
            if (rc == 0 && s >= num_terminals) {
                int known = PySet_Contains(merged, sym);
                if (known < 0)
                    rc = -1;
                else if (!known && (PySet_Add(merged, sym) < 0 ||
                                    predict(predicted, memo, predicts_of, sym, g) < 0))
                    rc = -1;
                int skip = rc ? 0 : PySet_Contains(nullable, sym);
                if (skip < 0)
                    rc = -1;
                else if (skip)
                    rc = stack_push(&work, advanced(rid_obj, dot_obj, origin));
            }
        } else if (rid == start_rule) {
            complete = 1;
        } else {
            rc = advance_over(origin, lhs, to_stack, &work); /* what completing lhs advances */
        }
        Py_DECREF(item);
        if (rc)
            goto done;
    }
    {
        PyObject *frozen = PyFrozenSet_New(predicted);
        if (frozen == NULL)
            goto done;
        PyObject *found;
        if (PyDict_GetItemRef(predictions, frozen, &found) == 0)
            found = g != NULL ? prediction_c(g, frozen) : PyObject_CallOneArg(prediction, frozen);
        Py_DECREF(frozen);
        if (found == NULL)
            goto done;
        if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 2 ||
            !PyAnySet_Check(PyTuple_GET_ITEM(found, 1))) {
            Py_DECREF(found);
            PyErr_SetString(PyExc_TypeError, "closure: a prediction is (items, terminals)");
            goto done;
        }
        PyObject *terminals = PyTuple_GET_ITEM(found, 1);
        PyObject *expected;
        if (PyList_GET_SIZE(carried) == 0) {
            expected = terminals;
            Py_INCREF(expected);
        } else {
            expected = PyFrozenSet_New(terminals); /* brand new: filled below */
            for (Py_ssize_t i = 0; expected != NULL && i < PyList_GET_SIZE(carried); i++) {
                if (PySet_Add(expected, PyList_GET_ITEM(carried, i)) < 0)
                    Py_CLEAR(expected);
            }
        }
        if (expected != NULL)
            result = Py_BuildValue("(OON)", complete ? Py_True : Py_False,
                                   PyTuple_GET_ITEM(found, 0), expected);
        Py_DECREF(found);
    }
done:
    stack_clear(&work);
    Py_XDECREF(seen);
    Py_XDECREF(merged);
    Py_XDECREF(carried);
    return result;
}

/* scan_kernel(usable, by_next, predicted, here) -> frozenset of items
 *
 * `EarleySet.scan`'s kernel: every item of `here` waiting on a terminal of `usable`, advanced
 * over it (carried items keep their origin; predicted (rule id, dot) pairs get `here`). */
static PyObject *scan_kernel(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "scan_kernel takes 4 arguments");
        return NULL;
    }
    PyObject *usable = args[0], *by_next = args[1], *predicted = args[2], *here = args[3];
    if (!PyDict_Check(by_next) || !PyDict_Check(predicted)) {
        PyErr_SetString(PyExc_TypeError, "scan_kernel: by_next and predicted must be dicts");
        return NULL;
    }
    PyObject *out = PyFrozenSet_New(NULL); /* (brand new: PySet_Add may fill it) */
    PyObject *iter = out == NULL ? NULL : PyObject_GetIter(usable);
    if (iter == NULL) {
        Py_XDECREF(out);
        return NULL;
    }
    PyObject *t;
    int rc = 0;
    while (rc == 0 && (t = PyIter_Next(iter)) != NULL) {
        PyObject *waiting = PyDict_GetItemWithError(by_next, t);
        if (waiting == NULL && PyErr_Occurred())
            rc = -1;
        else if (waiting != NULL)
            rc = advance_waiting(waiting, to_set, out);
        PyObject *pairs = rc ? NULL : PyDict_GetItemWithError(predicted, t);
        if (pairs == NULL && PyErr_Occurred())
            rc = -1;
        else if (pairs != NULL)
            rc = advance_pairs(pairs, here, to_set, out);
        Py_DECREF(t);
    }
    Py_DECREF(iter);
    if (rc || PyErr_Occurred()) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* ------------------------------------------------------------------ grammar fixpoints */

static PyObject *str_lhs;
static PyObject *str_rhs;

/* A rule's (lhs, rhs): a 2-tuple, or an object with `lhs` and `rhs` (`ir.Rule`). New refs. */
static int rule_parts(PyObject *rule, PyObject **lhs, PyObject **rhs) {
    if (PyTuple_Check(rule) && PyTuple_GET_SIZE(rule) == 2) {
        *lhs = PyTuple_GET_ITEM(rule, 0);
        *rhs = PyTuple_GET_ITEM(rule, 1);
        Py_INCREF(*lhs);
        Py_INCREF(*rhs);
    } else {
        *lhs = PyObject_GetAttr(rule, str_lhs);
        if (*lhs == NULL)
            return -1;
        *rhs = PyObject_GetAttr(rule, str_rhs);
        if (*rhs == NULL) {
            Py_CLEAR(*lhs);
            return -1;
        }
    }
    if (!PyTuple_Check(*rhs)) {
        Py_CLEAR(*lhs);
        Py_CLEAR(*rhs);
        PyErr_SetString(PyExc_TypeError, "a rule's right-hand side must be a tuple");
        return -1;
    }
    return 0;
}

/* A growable array of Py_ssize_t. */
typedef struct {
    Py_ssize_t *v;
    Py_ssize_t n;
    Py_ssize_t cap;
} Ints;

static int ints_push(Ints *a, Py_ssize_t x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 256;
        Py_ssize_t *grown = PyMem_Realloc(a->v, (size_t)cap * sizeof(Py_ssize_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = grown;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* The number of `sym` in `ids` (a new one is added, and recorded in `syms`, borrowed: the
 * dict holds the key); -1 on error. */
static Py_ssize_t symbol_id(PyObject *ids, Ints *syms, PyObject *sym) {
    PyObject *found = PyDict_GetItemWithError(ids, sym);
    if (found != NULL)
        return PyLong_AsSsize_t(found);
    if (PyErr_Occurred())
        return -1;
    PyObject *id = PyLong_FromSsize_t(syms->n);
    if (id == NULL)
        return -1;
    int rc = PyDict_SetItem(ids, sym, id);
    Py_DECREF(id);
    if (rc < 0 || ints_push(syms, (Py_ssize_t)sym) < 0)
        return -1;
    return syms->n - 1;
}

/* known_closure(rules, known) -> list of rule indices
 *
 * Adds to the set `known` every left-hand side with a rule whose symbols are all known, until
 * nothing changes (the productive symbols from the usable terminals, the nullable ones from
 * the empty set), in time linear in the grammar: each rule counts its symbols not yet known,
 * and a symbol that becomes known counts down the rules that use it. Returns the indices of the
 * rules left with a symbol that is not known (the dead ones). Symbols are numbered once (a
 * dict), the rest runs on arrays. `earley.known_closure`'s Python worklist is the fallback. */
static PyObject *known_closure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PySet_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "known_closure(rules: list, known: set)");
        return NULL;
    }
    PyObject *rules = args[0], *known = args[1];
    Py_ssize_t n = PyList_GET_SIZE(rules);
    PyObject *ids = PyDict_New();
    Ints syms = {NULL, 0, 0}, lhs = {NULL, 0, 0}, off = {NULL, 0, 0}, flat = {NULL, 0, 0};
    Ints ready = {NULL, 0, 0};
    Py_ssize_t *missing = NULL, *start = NULL, *users = NULL;
    char *is_known = NULL;
    PyObject *out = NULL;
    if (ids == NULL || ints_push(&off, 0) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *left, *rhs;
        if (rule_parts(PyList_GET_ITEM(rules, i), &left, &rhs) < 0)
            goto done;
        Py_ssize_t id = symbol_id(ids, &syms, left);
        int rc = id < 0 ? -1 : ints_push(&lhs, id);
        Py_DECREF(left);
        for (Py_ssize_t k = 0; rc == 0 && k < PyTuple_GET_SIZE(rhs); k++) {
            id = symbol_id(ids, &syms, PyTuple_GET_ITEM(rhs, k));
            rc = id < 0 ? -1 : ints_push(&flat, id);
        }
        Py_DECREF(rhs);
        if (rc < 0 || ints_push(&off, flat.n) < 0)
            goto done;
    }
    Py_ssize_t m = syms.n;
    is_known = PyMem_Calloc((size_t)(m ? m : 1), 1);
    missing = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_ssize_t));
    start = PyMem_Calloc((size_t)m + 1, sizeof(Py_ssize_t));
    users = PyMem_Malloc((size_t)(flat.n ? flat.n : 1) * sizeof(Py_ssize_t));
    if (is_known == NULL || missing == NULL || start == NULL || users == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t id = 0; id < m; id++) {
        int in = PySet_Contains(known, (PyObject *)syms.v[id]);
        if (in < 0)
            goto done;
        is_known[id] = (char)in;
    }
    /* each rule's unknown symbols (a symbol named twice counts, and is counted down, twice),
     * and the rules that wait on each symbol (CSR: `start`, `users`) */
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t k = off.v[i]; k < off.v[i + 1]; k++)
            if (!is_known[flat.v[k]]) {
                missing[i]++;
                start[flat.v[k] + 1]++;
            }
    for (Py_ssize_t id = 0; id < m; id++)
        start[id + 1] += start[id];
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t k = off.v[i]; k < off.v[i + 1]; k++)
            if (!is_known[flat.v[k]])
                users[start[flat.v[k]]++] = i;
        if (!missing[i] && ints_push(&ready, lhs.v[i]) < 0)
            goto done;
    }
    for (Py_ssize_t id = m; id > 0; id--) /* (filling moved each start to the next one's) */
        start[id] = start[id - 1];
    start[0] = 0;
    while (ready.n) {
        Py_ssize_t id = ready.v[--ready.n];
        if (is_known[id])
            continue;
        is_known[id] = 1;
        if (PySet_Add(known, (PyObject *)syms.v[id]) < 0)
            goto done;
        for (Py_ssize_t u = start[id]; u < start[id + 1]; u++)
            if (--missing[users[u]] == 0 && ints_push(&ready, lhs.v[users[u]]) < 0)
                goto done;
    }
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        if (!missing[i])
            continue;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(out, index) < 0)
            Py_CLEAR(out);
        Py_XDECREF(index);
    }
done:
    Py_XDECREF(ids);
    PyMem_Free(syms.v);
    PyMem_Free(lhs.v);
    PyMem_Free(off.v);
    PyMem_Free(flat.v);
    PyMem_Free(ready.v);
    PyMem_Free(missing);
    PyMem_Free(start);
    PyMem_Free(users);
    PyMem_Free(is_known);
    return out;
}

/* number_rules(rules, ids) -> list of (lhs id, rhs ids) | None
 *
 * The rules (`ir.Rule`) with every symbol replaced by its number in the dict `ids`; None when a
 * symbol is not there (the caller's Python loop then says which). `EarleyGrammar.__init__`. */
static PyObject *number_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "number_rules(rules, ids: dict)");
        return NULL;
    }
    PyObject *rules = PySequence_Fast(args[0], "rules must be a sequence");
    if (rules == NULL)
        return NULL;
    PyObject *ids = args[1];
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rules);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(rules);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *lhs, *rhs;
        if (rule_parts(PySequence_Fast_GET_ITEM(rules, i), &lhs, &rhs) < 0)
            goto fail;
        PyObject *lhs_id = PyDict_GetItemWithError(ids, lhs);
        Py_DECREF(lhs);
        Py_ssize_t m = PyTuple_GET_SIZE(rhs);
        PyObject *numbered = lhs_id == NULL ? NULL : PyTuple_New(m);
        if (numbered == NULL) {
            Py_DECREF(rhs);
            goto missing_or_fail;
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            PyObject *id = PyDict_GetItemWithError(ids, PyTuple_GET_ITEM(rhs, k));
            if (id == NULL) {
                Py_DECREF(numbered);
                Py_DECREF(rhs);
                goto missing_or_fail;
            }
            Py_INCREF(id);
            PyTuple_SET_ITEM(numbered, k, id);
        }
        Py_DECREF(rhs);
        PyObject *pair = PyTuple_Pack(2, lhs_id, numbered);
        Py_DECREF(numbered);
        if (pair == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, pair);
    }
    Py_DECREF(rules);
    return out;
missing_or_fail:
    if (!PyErr_Occurred()) {
        Py_DECREF(out);
        Py_DECREF(rules);
        Py_RETURN_NONE;
    }
fail:
    Py_DECREF(out);
    Py_DECREF(rules);
    return NULL;
}


/* rules_by_lhs(rules) -> {lhs: [rule ids]}: `EarleyGrammar._finish`'s index of the numbered
 * rules ((lhs, rhs) tuples) by left-hand side, ids ascending (a schema's grammar: ~500 rules,
 * every compile). */
static PyObject *rules_by_lhs(PyObject *self, PyObject *rules) {
    if (!PyList_CheckExact(rules)) {
        PyErr_SetString(PyExc_TypeError, "rules_by_lhs(rules: list)");
        return NULL;
    }
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (Py_ssize_t rid = 0; rid < PyList_GET_SIZE(rules); rid++) {
        PyObject *rule = PyList_GET_ITEM(rules, rid);
        if (!PyTuple_CheckExact(rule) || PyTuple_GET_SIZE(rule) != 2) {
            PyErr_SetString(PyExc_TypeError, "rules_by_lhs: a rule is (lhs, rhs)");
            goto fail;
        }
        PyObject *lhs = PyTuple_GET_ITEM(rule, 0);
        PyObject *ids = PyDict_GetItemWithError(out, lhs); /* borrowed */
        if (ids == NULL) {
            if (PyErr_Occurred())
                goto fail;
            ids = PyList_New(0);
            if (ids == NULL || PyDict_SetItem(out, lhs, ids) < 0) {
                Py_XDECREF(ids);
                goto fail;
            }
            Py_DECREF(ids); /* (the dict holds it) */
        }
        PyObject *id = PyLong_FromSsize_t(rid);
        if (id == NULL || PyList_Append(ids, id) < 0) {
            Py_XDECREF(id);
            goto fail;
        }
        Py_DECREF(id);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* rules_of_arrays(flat, sizes, terminals, symbols) -> [(lhs, (rhs...)), ...]: the rules a
 * compile-cache file holds as two int32 arrays (`EarleyGrammar.rule_arrays`), checked as
 * `_rules_of_arrays` checks them (ValueError, the same messages) and made into the tuples
 * `from_tables` keeps (a schema's grammar: hundreds of rules, every load's first step). */
static PyObject *rules_of_arrays(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "rules_of_arrays(flat, sizes, terminals, symbols)");
        return NULL;
    }
    long terminals = PyLong_AsLong(args[2]);
    long symbols = PyLong_AsLong(args[3]);
    if ((terminals == -1 || symbols == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer flat, sizes;
    if (PyObject_GetBuffer(args[0], &flat, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &sizes, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&flat);
        return NULL;
    }
    PyObject *out = NULL;
    const char *why = NULL;
    Py_ssize_t n_flat = flat.len / 4, n_rules = sizes.len / 4;
    if (flat.len % 4 || sizes.len % 4 || n_rules == 0) {
        why = "the first rule is the start rule";
        goto done;
    }
    const char *fp = (const char *)flat.buf, *sp = (const char *)sizes.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) { /* sizes first: nothing read past the end */
        int32_t size;
        memcpy(&size, sp + 4 * r, 4);
        if (size < 1 || total + size > n_flat) {
            why = "a rule is a non-empty list of symbols";
            goto done;
        }
        total += size;
    }
    if (total != n_flat) {
        why = "a rule is a non-empty list of symbols";
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_flat; i++) {
        int32_t symbol;
        memcpy(&symbol, fp + 4 * i, 4);
        if (symbol < 0 || symbol >= symbols) {
            why = "a rule's symbols are out of range";
            goto done;
        }
    }
    out = PyList_New(n_rules);
    if (out == NULL)
        goto done;
    Py_ssize_t at = 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        int32_t size, lhs_id;
        memcpy(&size, sp + 4 * r, 4);
        memcpy(&lhs_id, fp + 4 * at, 4);
        if (lhs_id < terminals) {
            why = "a rule's left-hand side is a terminal";
            Py_CLEAR(out);
            goto done;
        }
        PyObject *rhs = PyTuple_New(size - 1);
        PyObject *lhs = PyLong_FromLong(lhs_id);
        PyObject *rule = (rhs == NULL || lhs == NULL) ? NULL : PyTuple_New(2);
        if (rule == NULL) {
            Py_XDECREF(rhs);
            Py_XDECREF(lhs);
            Py_CLEAR(out);
            goto done;
        }
        PyTuple_SET_ITEM(rule, 0, lhs);
        PyTuple_SET_ITEM(rule, 1, rhs);
        PyList_SET_ITEM(out, r, rule);
        for (int32_t j = 1; j < size; j++) {
            int32_t symbol;
            memcpy(&symbol, fp + 4 * (at + j), 4);
            PyObject *item = PyLong_FromLong(symbol);
            if (item == NULL) {
                Py_CLEAR(out);
                goto done;
            }
            PyTuple_SET_ITEM(rhs, j - 1, item);
        }
        at += size;
    }
done:
    PyBuffer_Release(&flat);
    PyBuffer_Release(&sizes);
    if (why != NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, why);
    return out;
}

static PyMethodDef methods[] = {
    {"closure", (PyCFunction)(void (*)(void))closure, METH_FASTCALL,
     "closure(tables, predicts_of, prediction, kernel, by_next, predicted, complete): an"
     " Earley set's items (EarleySet.__init__)"},
    {"predicts_of", (PyCFunction)(void (*)(void))py_predicts_of, METH_FASTCALL,
     "predicts_of(tables, nt): EarleyGrammar.predicts_of over its memos"},
    {"prediction", (PyCFunction)(void (*)(void))py_prediction, METH_FASTCALL,
     "prediction(tables, nonterminals): EarleyGrammar.prediction over its memos"},
    {"scan_kernel", (PyCFunction)(void (*)(void))scan_kernel, METH_FASTCALL,
     "scan_kernel(usable, by_next, predicted, here): a scan's kernel (EarleySet.scan)"},
    {"known_closure", (PyCFunction)(void (*)(void))known_closure, METH_FASTCALL,
     "known_closure(rules, known): close the set `known` under the rules; the dead rules'"
     " indices"},
    {"number_rules", (PyCFunction)(void (*)(void))number_rules, METH_FASTCALL,
     "number_rules(rules, ids): the rules' symbols numbered, or None for an unknown one"},
    {"rules_by_lhs", (PyCFunction)rules_by_lhs, METH_O,
     "rules_by_lhs(rules): {lhs: [rule ids]} of (lhs, rhs) rules (EarleyGrammar._finish)"},
    {"rules_of_arrays", (PyCFunction)(void (*)(void))rules_of_arrays, METH_FASTCALL,
     "rules_of_arrays(flat, sizes, terminals, symbols): the (lhs, rhs) rules of"
     " EarleyGrammar.rule_arrays, checked (ValueError)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_earley", NULL, -1, methods};

PyMODINIT_FUNC PyInit__earley(void) {
    str_by_next = PyUnicode_InternFromString("by_next");
    str_predicted = PyUnicode_InternFromString("predicted");
    str_lhs = PyUnicode_InternFromString("lhs");
    str_rhs = PyUnicode_InternFromString("rhs");
    if (str_by_next == NULL || str_predicted == NULL || str_lhs == NULL || str_rhs == NULL)
        return NULL;
    /* Safe without the GIL: shared memos are read as new references (see the top) */
    return sg_without_gil(PyModule_Create(&module));
}
