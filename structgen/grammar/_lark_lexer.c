/* The tokens of a Lark grammar text (`lark_reader._TOKENS`), scanned in C.
 *
 * `tokens(text)` returns (kinds, texts): two lists of str, one entry per token, the last the
 * closing ("nl", ""), exactly what `lark_reader`'s regex scan gives; or None where this scan
 * cannot tell, and the regex decides: a character outside ASCII (Python's \s and \d read
 * Unicode), a string or regex literal that does not close the simple way (the regex engine
 * would backtrack), or text no token reads (the reader falls back to Lark).
 *
 * One match of the regex is: spaces and tabs, then the first of these alternatives that
 * matches (in this order, not the longest): term, rule, "..", punctuation, string, skip
 * (a comment with the whitespace before it, a line continuation, the end), a newline run
 * before "|", a newline run, "->", an operator, a modifier, a regex, a directive, a number.
 * The scan reads every one of those in C; a run of matches that the regex reads as 541
 * objects and four method calls each cost ~250 µs of a SQL grammar's ~3 ms compile. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_module_gil.h"

enum {
    K_TERM, K_RULE, K_DOTDOT, K_STRING, K_NL_OR, K_NL, K_TO, K_OP, K_MOD, K_REGEXP,
    K_DIRECTIVE, K_NUMBER, K_COUNT
};
static const char *const KIND_NAMES[K_COUNT] = {
    "term", "rule", "dotdot", "string", "nl_or", "nl", "to", "op", "mod", "regexp",
    "directive", "number",
};
static PyObject *kind_objects[K_COUNT];
static PyObject *punct_objects[128];
static PyObject *empty_text;

static int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static int is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
/* Python's \s on ASCII text (the separators 0x1c-0x1f too) */
static int is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}
static int is_punct(unsigned char c) { return c && strchr("()[]{}:,|~.", c) != NULL; }

/* The end of the match of alternative `kind` at `p` (its token's text is [p, end)), -1 when it
 * does not match there, -2 when the regex could match otherwise than this scan tells. */
static Py_ssize_t match_at(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, int *kind)
{
    unsigned char c = s[p];
    Py_ssize_t q;
    /* term: _?[A-Z][_A-Z0-9]*   rule: _?[a-z][_a-z0-9]* */
    q = p + (c == '_');
    if (q < n && is_upper(s[q])) {
        for (q++; q < n && (is_upper(s[q]) || is_digit(s[q]) || s[q] == '_'); q++) {}
        *kind = K_TERM;
        return q;
    }
    if (q < n && is_lower(s[q])) {
        for (q++; q < n && (is_lower(s[q]) || is_digit(s[q]) || s[q] == '_'); q++) {}
        *kind = K_RULE;
        return q;
    }
    if (c == '.' && p + 1 < n && s[p + 1] == '.') {
        *kind = K_DOTDOT;
        return p + 2;
    }
    if (is_punct(c)) {
        *kind = -1 - (int)c; /* (the punctuation is its own kind) */
        return p + 1;
    }
    if (c == '"') { /* "(?:\\"|\\\\|[^"\n])*?"i? : the first way that closes, or ask the regex */
        for (q = p + 1; q < n; q++) {
            if (s[q] == '"') {
                q++;
                if (q < n && s[q] == 'i') q++;
                *kind = K_STRING;
                return q;
            }
            if (s[q] == '\n') return -2;
            if (s[q] == '\\' && q + 1 < n && (s[q + 1] == '"' || s[q + 1] == '\\')) q++;
        }
        return -2;
    }
    /* skip: \s*(?://|\#)[^\n]*  |  \\[ ]*\n  |  \Z  (not a token: kind -2 - 128) */
    for (q = p; q < n && is_space(s[q]); q++) {}
    if (q < n && (s[q] == '#' || (s[q] == '/' && q + 1 < n && s[q + 1] == '/'))) {
        for (; q < n && s[q] != '\n'; q++) {}
        *kind = -1000;
        return q;
    }
    if (c == '\\') {
        for (q = p + 1; q < n && s[q] == ' '; q++) {}
        if (q < n && s[q] == '\n') {
            *kind = -1000;
            return q + 1;
        }
    }
    /* nl_or: (?:\r?\n)+\s*\|   nl: (?:\r?\n)+\s* */
    if (c == '\n' || (c == '\r' && p + 1 < n && s[p + 1] == '\n')) {
        for (q = p; q < n && is_space(s[q]); q++) {}
        if (q < n && s[q] == '|') {
            *kind = K_NL_OR;
            return q + 1;
        }
        *kind = K_NL;
        return q;
    }
    if (c == '-' && p + 1 < n && s[p + 1] == '>') {
        *kind = K_TO;
        return p + 2;
    }
    /* op: [+*] | \?(?![a-z_]) */
    int next_word = p + 1 < n && (is_lower(s[p + 1]) || s[p + 1] == '_');
    if (c == '+' || c == '*' || (c == '?' && !next_word)) {
        *kind = K_OP;
        return p + 1;
    }
    /* mod: (?:!|!\??|\?!?)(?=[_a-z]) */
    if (c == '!' || c == '?') {
        Py_ssize_t options[2];
        int count = 0;
        if (c == '!') {
            options[count++] = p + 1;
            if (p + 1 < n && s[p + 1] == '?') options[count++] = p + 2;
        } else {
            if (p + 1 < n && s[p + 1] == '!') options[count++] = p + 2;
            options[count++] = p + 1;
        }
        for (int k = 0; k < count; k++) {
            q = options[k];
            if (q < n && (is_lower(s[q]) || s[q] == '_')) {
                *kind = K_MOD;
                return q;
            }
        }
    }
    /* regexp: /(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*  (the first way that closes) */
    if (c == '/' && !(p + 1 < n && s[p + 1] == '/')) {
        for (q = p + 1; q < n; q++) {
            if (s[q] == '/') {
                for (q++; q < n && s[q] && strchr("imslux", s[q]); q++) {}
                *kind = K_REGEXP;
                return q;
            }
            if (s[q] == '\\' && q + 1 < n && (s[q + 1] == '/' || s[q + 1] == '\\')) q++;
        }
        return -2;
    }
    if (c == '%' && p + 1 < n && is_lower(s[p + 1])) {
        for (q = p + 2; q < n && is_lower(s[q]); q++) {}
        *kind = K_DIRECTIVE;
        return q;
    }
    q = p + (c == '+' || c == '-');
    if (q < n && is_digit(s[q])) {
        for (q++; q < n && is_digit(s[q]); q++) {}
        *kind = K_NUMBER;
        return q;
    }
    return -1;
}

static PyObject *tokens(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "tokens(text): text must be a str");
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(arg)) Py_RETURN_NONE; /* (\s, \d and friends: the regex decides) */
    const unsigned char *s = (const unsigned char *)PyUnicode_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    PyObject *kinds = PyList_New(0), *texts = PyList_New(0);
    if (!kinds || !texts) goto fail;
    Py_ssize_t p = 0;
    while (p < n) {
        while (p < n && (s[p] == ' ' || s[p] == '\t')) p++;
        if (p == n) break; /* (\Z: the end, after spaces) */
        int kind = 0;
        Py_ssize_t end = match_at(s, n, p, &kind);
        if (end < 0) { /* nothing reads it, or the regex might read it otherwise */
            Py_DECREF(kinds);
            Py_DECREF(texts);
            Py_RETURN_NONE;
        }
        if (kind != -1000) {
            PyObject *kind_obj = kind >= 0 ? kind_objects[kind] : punct_objects[-1 - kind];
            PyObject *text = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, s + p, end - p);
            if (!text) goto fail;
            int bad = PyList_Append(kinds, kind_obj) < 0 || PyList_Append(texts, text) < 0;
            Py_DECREF(text);
            if (bad) goto fail;
        }
        p = end;
    }
    if (PyList_Append(kinds, kind_objects[K_NL]) < 0 || PyList_Append(texts, empty_text) < 0)
        goto fail;
    return Py_BuildValue("(NN)", kinds, texts);
fail:
    Py_XDECREF(kinds);
    Py_XDECREF(texts);
    return NULL;
}

static PyMethodDef methods[] = {
    {"tokens", tokens, METH_O,
     "tokens(text): (kinds, texts) of a Lark grammar text, or None (the regex decides)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lark_lexer", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lark_lexer(void)
{
    for (int k = 0; k < K_COUNT; k++)
        if (!(kind_objects[k] = PyUnicode_InternFromString(KIND_NAMES[k]))) return NULL;
    for (const char *c = "()[]{}:,|~."; *c; c++) {
        char one[2] = {*c, 0};
        if (!(punct_objects[(unsigned char)*c] = PyUnicode_InternFromString(one))) return NULL;
    }
    if (!(empty_text = PyUnicode_InternFromString(""))) return NULL;
    /* Safe without the GIL: the names are interned above, the rest is the call's own */
    return sg_without_gil(PyModule_Create(&module));
}
