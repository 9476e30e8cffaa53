/* Thompson's construction in C: a flattened regex AST -> the byte NFA of nfa.py, trimmed.
 *
 * Python (nfa.py, `_build_native`) turns the AST into a program of distinct nodes — EMPTY, LEAF
 * (a consume state at a pool DAG root Python built), CONCAT, ALT, REPEAT (lo, hi or -1) with
 * their children — and calls `sg_nfa_build`. The states come out exactly as `_Builder.compile`
 * emits them (same recursion, same order: state 0 is the match state), then states that cannot
 * reach the match state are found (`live`) and dropped from every split, as `ByteNFA._trim`
 * does. What costs Python a call per state (counted repetitions copy their item once per count)
 * costs C a few stores. Part of the `_subset` extension, loaded with ctypes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define T_EMPTY 0
#define T_LEAF 1
#define T_CONCAT 2
#define T_ALT 3
#define T_REPEAT 4

#define NK_SPLIT 0
#define NK_CONSUME 1
#define NK_MATCH 2

typedef struct {
    /* the program */
    const int8_t *typ;
    const int64_t *a, *b;
    const int32_t *coff, *ch;
    /* the states */
    int64_t n, cap;
    int8_t *kind;
    int32_t *node, *next;
    int64_t *es; /* a split's targets: eps[es[s] .. es[s] + el[s]) */
    int32_t *el;
    int64_t ne, ecap;
    int32_t *eps;
    /* alternatives' entries while their children compile */
    int32_t *tmp;
    int64_t tn, tcap;
    int err;
    /* after trimming */
    uint8_t *live;
    int32_t *eoff, *eflat;
    int64_t neflat;
} sg_nfa;

static int grow(void **buf, int64_t *cap, int64_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *p = realloc(*buf, (size_t)c * size);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

static int32_t new_state(sg_nfa *s, int8_t kind, int32_t node, int32_t next)
{
    if (s->n >= s->cap) {
        int64_t c = s->cap ? s->cap * 2 : 256;
        int8_t *k = realloc(s->kind, (size_t)c);
        if (k) s->kind = k;
        int32_t *nd = realloc(s->node, (size_t)c * 4);
        if (nd) s->node = nd;
        int32_t *nx = realloc(s->next, (size_t)c * 4);
        if (nx) s->next = nx;
        int64_t *es = realloc(s->es, (size_t)c * 8);
        if (es) s->es = es;
        int32_t *el = realloc(s->el, (size_t)c * 4);
        if (el) s->el = el;
        if (!k || !nd || !nx || !es || !el) {
            s->err = 1;
            return -1;
        }
        s->cap = c;
    }
    int64_t i = s->n++;
    s->kind[i] = kind;
    s->node[i] = node;
    s->next[i] = next;
    s->es[i] = 0;
    s->el[i] = 0;
    return (int32_t)i;
}

/* a split with room for `count` targets (filled by the caller) */
static int32_t new_split(sg_nfa *s, int32_t count)
{
    int32_t q = new_state(s, NK_SPLIT, -1, -1);
    if (q < 0)
        return -1;
    if (grow((void **)&s->eps, &s->ecap, s->ne + count, 4)) {
        s->err = 1;
        return -1;
    }
    s->es[q] = s->ne;
    s->el[q] = count;
    s->ne += count;
    return q;
}

static int32_t compile(sg_nfa *s, int32_t i, int32_t nxt)
{
    if (s->err)
        return -1;
    int32_t first = s->coff[i], count = s->coff[i + 1] - s->coff[i];
    switch (s->typ[i]) {
    case T_EMPTY:
        return nxt;
    case T_LEAF:
        return new_state(s, NK_CONSUME, (int32_t)s->a[i], nxt);
    case T_CONCAT:
        for (int32_t j = count - 1; j >= 0; j--) {
            nxt = compile(s, s->ch[first + j], nxt);
            if (nxt < 0)
                return -1;
        }
        return nxt;
    case T_ALT: {
        int64_t base = s->tn;
        if (grow((void **)&s->tmp, &s->tcap, base + count, 4)) {
            s->err = 1;
            return -1;
        }
        s->tn = base + count;
        for (int32_t j = 0; j < count; j++) {
            int32_t t = compile(s, s->ch[first + j], nxt);
            if (t < 0)
                return -1;
            s->tmp[base + j] = t; /* (re-read: a child may have grown the buffer) */
        }
        int32_t q = new_split(s, count);
        if (q < 0)
            return -1;
        memcpy(s->eps + s->es[q], s->tmp + base, (size_t)count * 4);
        s->tn = base;
        return q;
    }
    case T_REPEAT: {
        int32_t x = s->ch[first];
        int64_t lo = s->a[i], hi = s->b[i];
        if (hi < 0) {
            int32_t loop = new_split(s, 2);
            if (loop < 0)
                return -1;
            int32_t body = compile(s, x, loop);
            if (body < 0)
                return -1;
            if (body != loop) {
                s->eps[s->es[loop]] = body;
                s->eps[s->es[loop] + 1] = nxt;
            } else {
                s->eps[s->es[loop]] = nxt;
                s->el[loop] = 1;
            }
            int32_t entry = lo == 0 ? loop : body;
            for (int64_t r = 0; r < lo - 1; r++) {
                entry = compile(s, x, entry);
                if (entry < 0)
                    return -1;
            }
            return entry;
        }
        int32_t entry = nxt;
        for (int64_t r = 0; r < hi - lo; r++) {
            int32_t t = compile(s, x, entry);
            if (t < 0)
                return -1;
            int32_t q = new_split(s, 2);
            if (q < 0)
                return -1;
            s->eps[s->es[q]] = t;
            s->eps[s->es[q] + 1] = nxt;
            entry = q;
        }
        for (int64_t r = 0; r < lo; r++) {
            entry = compile(s, x, entry);
            if (entry < 0)
                return -1;
        }
        return entry;
    }
    }
    s->err = 2;
    return -1;
}

/* states that reach the match state (0), and every split's live targets as CSR */
static int trim(sg_nfa *s, const uint8_t *pool_nonempty)
{
    int64_t n = s->n;
    int32_t *indeg = calloc((size_t)n + 1, 4);
    s->live = calloc((size_t)n, 1);
    s->eoff = malloc(((size_t)n + 1) * 4);
    if (!indeg || !s->live || !s->eoff) {
        free(indeg);
        return -1;
    }
    for (int64_t q = 0; q < n; q++) {
        if (s->kind[q] == NK_SPLIT) {
            for (int32_t j = 0; j < s->el[q]; j++)
                indeg[s->eps[s->es[q] + j] + 1]++;
        } else if (s->kind[q] == NK_CONSUME && pool_nonempty[s->node[q]]) {
            indeg[s->next[q] + 1]++;
        }
    }
    for (int64_t q = 0; q < n; q++)
        indeg[q + 1] += indeg[q];
    int64_t edges = indeg[n];
    int32_t *rev = malloc(((size_t)edges + 1) * 4);
    int32_t *fill = malloc(((size_t)n + 1) * 4);
    int32_t *stack = malloc(((size_t)n + 1) * 4);
    if (!rev || !fill || !stack) {
        free(indeg), free(rev), free(fill), free(stack);
        return -1;
    }
    memcpy(fill, indeg, (size_t)n * 4);
    for (int64_t q = 0; q < n; q++) {
        if (s->kind[q] == NK_SPLIT) {
            for (int32_t j = 0; j < s->el[q]; j++)
                rev[fill[s->eps[s->es[q] + j]]++] = (int32_t)q;
        } else if (s->kind[q] == NK_CONSUME && pool_nonempty[s->node[q]]) {
            rev[fill[s->next[q]]++] = (int32_t)q;
        }
    }
    int64_t top = 0;
    s->live[0] = 1;
    stack[top++] = 0;
    while (top) {
        int32_t t = stack[--top];
        for (int32_t k = indeg[t]; k < indeg[t + 1]; k++) {
            int32_t q = rev[k];
            if (!s->live[q]) {
                s->live[q] = 1;
                stack[top++] = q;
            }
        }
    }
    free(indeg), free(rev), free(fill), free(stack);
    int64_t total = 0;
    for (int64_t q = 0; q < n; q++) {
        s->eoff[q] = (int32_t)total;
        if (s->kind[q] == NK_SPLIT)
            for (int32_t j = 0; j < s->el[q]; j++)
                total += s->live[s->eps[s->es[q] + j]];
    }
    s->eoff[n] = (int32_t)total;
    s->eflat = malloc(((size_t)total + 1) * 4);
    if (!s->eflat)
        return -1;
    int64_t k = 0;
    for (int64_t q = 0; q < n; q++)
        if (s->kind[q] == NK_SPLIT)
            for (int32_t j = 0; j < s->el[q]; j++) {
                int32_t t = s->eps[s->es[q] + j];
                if (s->live[t])
                    s->eflat[k++] = t;
            }
    s->neflat = total;
    return 0;
}

void sg_nfa_free(sg_nfa *s)
{
    if (!s)
        return;
    free(s->kind), free(s->node), free(s->next), free(s->es), free(s->el), free(s->eps);
    free(s->tmp), free(s->live), free(s->eoff), free(s->eflat);
    free(s);
}

/* Build the NFA of program node `root`; NULL when out of memory. `out[0..2]`: the number of
 * states, of live split targets, and the start state. */
sg_nfa *sg_nfa_build(const int8_t *typ, const int64_t *a, const int64_t *b, const int32_t *coff,
                     const int32_t *ch, int32_t root, const uint8_t *pool_nonempty, int64_t *out)
{
    sg_nfa *s = calloc(1, sizeof(sg_nfa));
    if (!s)
        return NULL;
    s->typ = typ, s->a = a, s->b = b, s->coff = coff, s->ch = ch;
    int32_t match = new_state(s, NK_MATCH, -1, -1);
    int32_t start = match < 0 ? -1 : compile(s, root, match);
    if (start < 0 || s->err || trim(s, pool_nonempty)) {
        sg_nfa_free(s);
        return NULL;
    }
    out[0] = s->n;
    out[1] = s->neflat;
    out[2] = start;
    return s;
}

/* Copy the results into Python's arrays (sized from `sg_nfa_build`'s `out`). */
void sg_nfa_copy(const sg_nfa *s, int8_t *kind, int32_t *node, int32_t *next, uint8_t *live,
                 int32_t *eoff, int32_t *eflat)
{
    memcpy(kind, s->kind, (size_t)s->n);
    memcpy(node, s->node, (size_t)s->n * 4);
    memcpy(next, s->next, (size_t)s->n * 4);
    memcpy(live, s->live, (size_t)s->n);
    memcpy(eoff, s->eoff, ((size_t)s->n + 1) * 4);
    memcpy(eflat, s->eflat, (size_t)s->neflat * 4);
}
