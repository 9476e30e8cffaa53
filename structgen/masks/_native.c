/* The token-trie walk of structgen's mask computation, in C.
 *
 * The vocabulary is a trie stored as nodes in preorder (a node's subtree is the run of nodes up
 * to end[k]); each node holds the byte leading into it, its depth and the tokens that end there.
 * Walking the nodes in order against a DFA transition table keeps the states of the current path
 * on a stack; a node whose byte has no transition is skipped with its whole subtree at once, so
 * the walk visits only the live nodes and their immediate dead children.
 *
 * A walk covers node ranges whose parent sits at depth `base` (the whole vocabulary: nodes
 * [0, n) with base 0), starting from DFA state `stack[base]`. With event collection on, it also
 * reports *boundary events*: subtrees [ev_lo, ev_hi) whose tokens die at byte `cut` > base in an
 * accepting state, i.e. where a grammar's lexeme can end and the rest of those tokens continues
 * in the next lexeme — Python then walks those subtrees again with the next lexer. The DFA is
 * built lazily by Python: on a row that is not built yet (-2) the walk calls back into Python,
 * which builds the row and refreshes the table pointers, and goes on.
 *
 * Python calls the walks through the entry points at the end of this file (see _kernel.py);
 * the tree's construction helper (`sg_subtree_ends`) is loaded with ctypes.
 */
#include <Python.h>

#include "../_module_gil.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int64_t n_events;    /* boundary events written */
} walk_state;

/* A row builder in C (a regex DFA's subset construction, structgen/automata/_subset.c): builds
 * the row and hands back the current arrays (0), or asks for the Python builder (nonzero). */
typedef int (*native_builder)(void *ctx, int32_t state, const int32_t **table,
                              const uint8_t **accepting);

typedef struct {        /* the DFA's current arrays; the row builder refreshes them */
    const int32_t *table;
    const uint8_t *accepting;
    native_builder native_build;  /* NULL: rows come from Python only */
    void *native_ctx;
} dfa_view;

typedef int (*row_builder)(int32_t state);  /* builds a row (0) or fails (-1) */

/* Builds the row of `s`: in C when the DFA has a native builder and it succeeds (returns 1),
 * else through Python (0, or -1 on failure). */
static inline int build_row(dfa_view *dfa, row_builder build, int32_t s)
{
    if (dfa->native_build
        && dfa->native_build(dfa->native_ctx, s, &dfa->table, &dfa->accepting) == 0)
        return 1;
    return build(s) != 0 ? -1 : 0;
}

typedef struct {        /* boundary event output */
    int64_t *lo;
    int64_t *hi;
    int32_t *cut;
    int32_t *state;
    int64_t cap;        /* 0: do not collect events */
} events_out;

/* A trie node, packed into 8 bytes: the walk reads one record per node instead of five arrays
 * (a fifth faster over a large vocabulary). `a`: one past the node's subtree (low 24 bits) and
 * the byte that leads into the node (high 8); `b`: the token that ends at the node (low 24 bits;
 * NODE_NO_TOKEN: none, NODE_TOKENS: several, ids[tok_lo[k] .. tok_hi[k])) and the node's depth
 * (high 8; 1 for the root's children). Python checks the limits (_kernel.py: pack_nodes). */
typedef struct {
    uint32_t a;
    uint32_t b;
} packed_node;

#define NODE_LOW 0xFFFFFFu
#define NODE_NO_TOKEN 0xFFFFFFu
#define NODE_TOKENS 0xFFFFFEu

typedef struct {        /* the vocabulary's trie as nodes in preorder (fixed per vocabulary) */
    const packed_node *node;
    const int32_t *tok_lo;   /* nodes where several tokens end: ids[tok_lo[k] .. tok_hi[k]) */
    const int32_t *tok_hi;
    const int32_t *ids;
} node_view;

/* Walks every node range [r_lo[r], r_hi[r]) (a run of subtrees whose parent is at depth
 * r_base[r]) from `start`, setting the mask bits of tokens that stay alive. A node whose byte
 * has no transition is skipped together with its whole subtree; when its parent state accepts
 * (and lies below the range's base), the subtree is a boundary event: those tokens may end the
 * lexeme there and continue in the next one. Adjacent events with the same cut and state merge.
 * Returns 0, or -1 when building a row failed (Python holds the exception). */
int64_t sg_walk_nodes(
    const node_view *v,
    const int64_t *r_lo, const int64_t *r_hi, const int32_t *r_base, int64_t n_ranges,
    int32_t start, dfa_view *dfa, row_builder build,
    int32_t *stack, walk_state *ws, uint32_t *mask_words, events_out *ev)
{
    const packed_node *node = v->node;
    const int32_t *tok_lo = v->tok_lo;
    const int32_t *tok_hi = v->tok_hi;
    const int32_t *ids = v->ids;
    int collect = ev->cap > 0;
    for (int64_t r = 0; r < n_ranges; r++) {
        int64_t k = r_lo[r], hi = r_hi[r];
        int32_t base = r_base[r];
        int64_t last = -1;
        stack[base] = start;
        while (k < hi) {
            uint32_t a = node[k].a, b = node[k].b;
            int32_t d = (int32_t)(b >> 24);
            int32_t s = stack[d - 1];
            int32_t t = dfa->table[(int64_t)s * 256 + (a >> 24)];
            if (t == -2) {
                if (build_row(dfa, build, s) < 0) return -1;
                t = dfa->table[(int64_t)s * 256 + (a >> 24)];
            }
            if (t < 0) {
                int64_t e = a & NODE_LOW;
                if (collect && d - 1 > base && dfa->accepting[s]) {
                    if (last >= 0 && ev->hi[last] == k && ev->cut[last] == d - 1
                            && ev->state[last] == s) {
                        ev->hi[last] = e;
                    } else if (ws->n_events < ev->cap) {
                        last = ws->n_events++;
                        ev->lo[last] = k; ev->hi[last] = e; ev->cut[last] = d - 1;
                        ev->state[last] = s;
                    }
                }
                k = e;
                continue;
            }
            stack[d] = t;
            uint32_t id = b & NODE_LOW;
            if (id < NODE_TOKENS) {
                mask_words[id >> 5] |= (uint32_t)1u << (id & 31);
            } else if (id == NODE_TOKENS) {
                for (int32_t j = tok_lo[k]; j < tok_hi[k]; j++) {
                    int32_t one = ids[j];
                    mask_words[one >> 5] |= (uint32_t)1u << (one & 31);
                }
            }
            k++;
        }
    }
    return 0;
}

/* The visited-set slot of a pair of 32-bit values packed as (a << 32 | b): the product's high
 * half folded onto the low one, so both values spread the slots (the low bits of the product
 * alone depend on b only, and a slice check's b takes a handful of values). */
static inline int64_t pair_slot(int64_t key, uint64_t mask)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (int64_t)((h ^ (h >> 32)) & mask);
}

/* The breadth-first queue of a pair search (sg_bounded_equal, slice_contained): pairs (a, b)
 * with their depth, each queued once (a visited set by open addressing in `slots`, all -1 at
 * rest; `n_slots` a power of two above max_pairs). */
typedef struct {
    int64_t *slots;
    uint64_t mask;
    int32_t *pa, *pb, *pd;
    int64_t *ps;
    int64_t head, tail, max_pairs;
} pair_queue;

static inline pair_queue queue_new(int64_t n_slots, int64_t max_pairs, int64_t *slots,
                                   int32_t *pa, int32_t *pb, int32_t *pd, int64_t *ps)
{
    pair_queue q = {slots, (uint64_t)n_slots - 1, pa, pb, pd, ps, 0, 0, max_pairs};
    return q;
}

/* Queues (a, b) at depth d unless it was queued before: 1 queued, 0 seen, -1 the queue is full. */
static inline int queue_push(pair_queue *q, int32_t a, int32_t b, int32_t d)
{
    int64_t key = ((int64_t)a << 32) | (uint32_t)b;
    int64_t slot = pair_slot(key, q->mask);
    while (q->slots[slot] != -1 && q->slots[slot] != key) slot = (slot + 1) & (int64_t)q->mask;
    if (q->slots[slot] == key) return 0;
    if (q->tail >= q->max_pairs) return -1;
    q->slots[slot] = key;
    q->pa[q->tail] = a; q->pb[q->tail] = b; q->pd[q->tail] = d; q->ps[q->tail] = slot;
    q->tail++;
    return 1;
}

/* Leaves the visited set all -1 again. */
static inline void queue_clear(pair_queue *q)
{
    for (int64_t i = 0; i < q->tail; i++) q->slots[q->ps[i]] = -1;
}

#define SG_MAX_GROUPS 16  /* token groups of a forest (structgen/masks/_slices.py: MAX_GROUPS) */

/* The whole vocabulary from `start` (whose row must be built). The tokens are split into groups
 * (token *slices*, see structgen/masks/_slices.py), each group a trie of its own, one after
 * another in the node arrays (root_child[g * 256 + b]: group g's node of byte b at depth 1, or
 * -1; one group: the plain trie). Walks the groups whose bit is not set in `skip` (the caller
 * ORs in the skipped groups' tokens: it proved them all alive), and of those only the subtrees
 * of the root's children whose byte is live in `start`: the root's children lie far apart in
 * preorder, so skipping the dead ones without touching them saves a cache miss each (a dead
 * first byte never makes a boundary event). */
int64_t sg_walk_forest(
    const node_view *v, const int32_t *root_child, int32_t n_groups, uint64_t skip,
    int32_t start, dfa_view *dfa, row_builder build, int32_t *stack, walk_state *ws,
    uint32_t *mask_words, events_out *ev)
{
    int64_t lo[256 * SG_MAX_GROUPS], hi[256 * SG_MAX_GROUPS];
    int32_t base[256 * SG_MAX_GROUPS];
    int64_t n = 0;
    const int32_t *row = dfa->table + (int64_t)start * 256;
    if (n_groups > SG_MAX_GROUPS) return -2;
    for (int32_t g = 0; g < n_groups; g++) {
        if ((skip >> g) & 1u) continue;
        const int32_t *children = root_child + (int64_t)g * 256;
        for (int b = 0; b < 256; b++) {
            int32_t k = children[b];
            if (k < 0 || row[b] == -1) continue;
            lo[n] = k; hi[n] = v->node[k].a & NODE_LOW; base[n] = 0;
            n++;
        }
    }
    return sg_walk_nodes(v, lo, hi, base, n, start, dfa, build, stack, ws, mask_words, ev);
}

typedef struct {        /* the slice automata, all in one table (see sg_contained_groups) */
    const int64_t *start;   /* state u's live bytes: byte[start[u] .. start[u+1]) */
    const uint8_t *byte;
    const int32_t *next;    /* the slice state after each of those bytes */
} slice_view;

/* What the slice checks of one state may still spend on building DFA rows: a count, and a
 * deadline (rows differ by orders of magnitude: a union row a few µs, a product row built in
 * Python 100 µs, a huge NFA subset 10 ms). */
typedef struct {
    int64_t rows_left;
    int64_t deadline_ns;  /* 0: none */
} build_budget;

static inline int64_t now_ns(void)
{
#if defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
#else
    return 0;  /* no clock: the row count alone bounds the checks */
#endif
}

/* Takes one row from the budget (1), or says it is spent (0). */
static inline int budget_take(build_budget *b)
{
    if (b->rows_left <= 0) return 0;
    if (b->deadline_ns && now_ns() > b->deadline_ns) return 0;
    b->rows_left--;
    return 1;
}

/* Whether every byte string of at most max_len bytes that is a prefix of a slice string (a path
 * from slice state u0) keeps the DFA alive from q: then every token of the slice is allowed in q.
 * Breadth first over pairs (DFA state, slice state), each visited once at its smallest depth
 * (a later visit could only go less deep). Returns 1 contained, 0 not, 2 gave up (after
 * max_pairs pairs, or when a row to build is over the budget — a counter's states, each with its
 * UTF-8 continuations, can cost more rows than the walk it would save; a later check, with more
 * rows built, may get further), -1 when building a row failed. Checks deeper than probe_above
 * bytes try one path first (below). Same buffers as sg_bounded_equal. */
static int64_t slice_contained(
    dfa_view *dfa, row_builder build, const slice_view *sl, int32_t u0, int32_t q0,
    int32_t max_len, int32_t probe_above, int64_t max_pairs, build_budget *budget,
    int64_t n_slots, int64_t *slots, int32_t *pa, int32_t *pb, int32_t *pd, int64_t *ps)
{
    /* A probe first: one path of the slice's first bytes (ASCII where the class has it), as
     * deep as the check goes. A counted string (`maxLength: 40`) fails the long slices only at
     * its bound, where the search would get there with every UTF-8 continuation state of every
     * count built (~10 rows a character); the path builds one row a character. It stops where
     * it repeats a pair (an unbounded string: one step); a failure found is the search's answer. */
    if (max_len > probe_above) {
        int32_t q = q0, u = u0;
        for (int32_t d = 0; d < max_len; d++) {
            int64_t j0 = sl->start[u];
            if (j0 >= sl->start[u + 1]) break;
            const int32_t *row = dfa->table + (int64_t)q * 256;
            if (row[sl->byte[j0]] == -2) {
                if (!budget_take(budget)) return 2;
                if (build_row(dfa, build, q) < 0) return -1;
                row = dfa->table + (int64_t)q * 256;
            }
            int32_t t = row[sl->byte[j0]], v = sl->next[j0];
            if (t < 0) return 0;
            if (t == q && v == u) break;
            q = t;
            u = v;
        }
    }
    pair_queue queue = queue_new(n_slots, max_pairs, slots, pa, pb, pd, ps);
    int64_t result = 1;
    queue_push(&queue, q0, u0, 0);
    while (queue.head < queue.tail && result == 1) {
        int32_t q = pa[queue.head], u = pb[queue.head], d = pd[queue.head];
        queue.head++;
        if (d >= max_len) continue;
        const int32_t *row = dfa->table + (int64_t)q * 256;
        int64_t j0 = sl->start[u], j1 = sl->start[u + 1];
        if (j0 < j1 && row[sl->byte[j0]] == -2) {
            if (!budget_take(budget)) { result = 2; break; }
            if (build_row(dfa, build, q) < 0) { result = -1; break; }
            row = dfa->table + (int64_t)q * 256;
        }
        for (int64_t j = j0; j < j1; j++) {
            int32_t t = row[sl->byte[j]];
            if (t < 0) { result = 0; break; }
            if (d + 1 >= max_len) continue;  /* its successors would not be expanded */
            if (queue_push(&queue, t, sl->next[j], d + 1) < 0) { result = 2; break; }
        }
    }
    queue_clear(&queue);
    return result;
}

typedef struct {        /* the slice checks of a vocabulary, and one thread's search buffers */
    slice_view sl;
    int32_t n_checks;
    const int32_t *u0;      /* check i: slice automaton start state */
    const int32_t *len;     /* check i: byte bound (its slice's longest token) */
    const int64_t *implies; /* check i: the groups it proves when it holds */
    const int32_t *group;   /* check i: its own group */
    int32_t floor;          /* check 0 is implied by every other */
    int64_t max_pairs, max_builds, n_slots;
    int64_t max_build_ns;   /* time the checks of one state may spend building rows (0: none) */
    int64_t *slots;         /* the search buffers, as for sg_bounded_equal */
    int32_t *pa, *pb, *pd;
    int64_t *ps;
    int32_t probe_above;    /* checks deeper than this start with a probe (slice_contained) */
} slice_checks;

/* The token groups whose every token is provably allowed in q, as a bitmask, with bit 62 set
 * when a check gave up (its answer may change once more rows are built); -1: building a row
 * failed. All checks together build at most max_builds DFA rows, and start none after
 * max_build_ns (checks that were cut short may be asked again). Checks run in order; one whose
 * group is already proved is skipped; when `floor` is set, check 0 is the check most others
 * imply, and its failure skips every check that implies it (those would fail too: a state that
 * allows few bytes costs one short check, plus those of the slices that do not imply the floor,
 * the space-led ones, each failing at its first byte unless a space is allowed). The fixed
 * arguments come in one struct: a call costs a few arguments, not twenty. */
int64_t sg_contained_groups(dfa_view *dfa, row_builder build, int32_t q, const slice_checks *c)
{
    int64_t found = 0, gave_up = 0, floor_failed = 0;
    build_budget budget = {c->max_builds, c->max_build_ns ? now_ns() + c->max_build_ns : 0};
    for (int32_t i = 0; i < c->n_checks; i++) {
        if ((found >> c->group[i]) & 1) continue;
        if (floor_failed && ((c->implies[i] >> c->group[0]) & 1)) continue;
        int64_t ok = slice_contained(dfa, build, &c->sl, c->u0[i], q, c->len[i],
                                     c->probe_above, c->max_pairs, &budget, c->n_slots,
                                     c->slots, c->pa, c->pb, c->pd, c->ps);
        if (ok < 0) return -1;
        if (ok == 1) found |= c->implies[i];
        else {
            if (ok == 2) gave_up = 1;
            if (i == 0 && c->floor) floor_failed = 1;
        }
    }
    return found | (gave_up << 62);
}

/* Whether states p and q keep the same byte strings of length <= max_len alive.
 *
 * A token of at most max_len bytes is allowed in a state iff reading its bytes never hits the
 * dead state, so two such states have the same token mask: a counted repetition's counter
 * states (`.{0,500}` after 10 or after 11 characters) or two states that differ only in what
 * they accept far ahead share one mask instead of each paying a vocabulary walk.
 *
 * Breadth first over pairs (a, b) reached by the same string (unordered, a != b), each visited
 * once at its smallest depth d: every byte class (one representative byte each, `reps`) must be
 * dead in both or in neither. Only the classes that some token has at position d matter
 * (`relevant[d * n_reps + i]`, for d < max_len): the other strings are no token's prefix.
 * Pairs at depth max_len are not expanded. Gives up (0, "not known equal") after max_pairs
 * pairs or when it would build more than max_builds rows. `slots` (a power of two > max_pairs,
 * all -1) is the visited set and is left all -1 again; pa/pb/pd/ps hold max_pairs entries each.
 * Rows that are not built yet (-2) are built through `build`. Returns 1 equal, 0 not known
 * equal, -1 when building a row failed (Python holds the exception). */
int64_t sg_bounded_equal(
    dfa_view *dfa, row_builder build, const uint8_t *reps, int32_t n_reps,
    const uint8_t *relevant, int32_t p, int32_t q, int32_t max_len, int64_t max_pairs,
    int64_t max_builds, int64_t n_slots,
    int64_t *slots, int32_t *pa, int32_t *pb, int32_t *pd, int64_t *ps)
{
    int64_t builds = 0;
    if (p == q) return 1;
    if (max_len <= 0 || max_pairs <= 0) return max_len <= 0;
    pair_queue queue = queue_new(n_slots, max_pairs, slots, pa, pb, pd, ps);
    int64_t result = 1;
    queue_push(&queue, p < q ? p : q, p < q ? q : p, 0);
    while (queue.head < queue.tail && result == 1) {
        int32_t a = pa[queue.head], b = pb[queue.head], d = pd[queue.head];
        queue.head++;
        const int32_t *ra = dfa->table + (int64_t)a * 256;
        const int32_t *rb = dfa->table + (int64_t)b * 256;
        if (ra[reps[0]] == -2) {
            if (++builds > max_builds) { result = 0; break; }
            if (build_row(dfa, build, a) < 0) { result = -1; break; }
            ra = dfa->table + (int64_t)a * 256;
            rb = dfa->table + (int64_t)b * 256;
        }
        if (rb[reps[0]] == -2) {
            if (++builds > max_builds) { result = 0; break; }
            if (build_row(dfa, build, b) < 0) { result = -1; break; }
            ra = dfa->table + (int64_t)a * 256;
            rb = dfa->table + (int64_t)b * 256;
        }
        const uint8_t *rel = relevant + (int64_t)d * n_reps;
        for (int32_t i = 0; i < n_reps; i++) {
            if (!rel[i]) continue;
            int32_t ta = ra[reps[i]], tb = rb[reps[i]];
            if ((ta < 0) != (tb < 0)) { result = 0; break; }
            if (ta < 0 || ta == tb || d + 1 >= max_len) continue;
            int32_t x = ta < tb ? ta : tb, y = ta < tb ? tb : ta;
            if (queue_push(&queue, x, y, d + 1) < 0) { result = 0; break; }
        }
    }
    queue_clear(&queue);
    return result;
}

/* The non-zero words of `words[0..n)`: their indices into `idx` and values into `val`, each
 * word zeroed as it is taken (the buffer is ready for the next walk). Returns their count.
 * A continued walk sets a few tokens of a large vocabulary: blocks of eight words are tested
 * together (four 64-bit loads), and only a block with a bit set is read word by word. */
int64_t sg_take_words(uint32_t *words, int64_t n, int64_t *idx, uint32_t *val)
{
    int64_t k = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t b[4];
        memcpy(b, words + i, sizeof b);
        if (!(b[0] | b[1] | b[2] | b[3])) continue;
        for (int64_t j = i; j < i + 8; j++) {
            uint32_t w = words[j];
            if (w) {
                idx[k] = j;
                val[k++] = w;
                words[j] = 0;
            }
        }
    }
    for (; i < n; i++) {
        uint32_t w = words[i];
        if (w) {
            idx[k] = i;
            val[k++] = w;
            words[i] = 0;
        }
    }
    return k;
}

/* end[k] = the first node after k at depth <= depth[k] (n when none): subtree ends. */
void sg_subtree_ends(const int32_t *depth, int64_t n, int32_t *end, int32_t *stack)
{
    int64_t top = 0;
    for (int64_t k = n - 1; k >= 0; k--) {
        while (top > 0 && depth[stack[top - 1]] > depth[k]) top--;
        end[k] = top > 0 ? stack[top - 1] : (int32_t)n;
        stack[top++] = (int32_t)k;
    }
}

/* ---- Python entry points -------------------------------------------------------------------
 *
 * The walks and checks above take many arguments and call back into Python for rows a C builder
 * does not make. Through ctypes each call cost more than a small walk (its argument conversion
 * and the callback's set-up), so Python calls them through these functions instead: plain
 * integers (addresses of numpy buffers and ctypes structs that Python keeps alive) and the
 * Python DFA, whose `table_address`, `accepting_address`, `native_builder` and `native_context`
 * fill the view and whose `row(state)` builds a row. The C work runs without the GIL (batches are
 * filled on threads); a row built in Python takes it back for the call. */

#if defined(_MSC_VER)
#define SG_THREAD_LOCAL __declspec(thread)
#else
#define SG_THREAD_LOCAL _Thread_local
#endif

typedef struct python_call {   /* one C call's link back to Python, per thread (nesting: outer) */
    PyObject *dfa;
    dfa_view *view;
    PyThreadState *released;   /* the thread state while the GIL is released */
    int64_t build_ns;          /* time spent building rows in Python */
    PyObject *exc_type, *exc_value, *exc_tb;  /* the failure of a row build */
    struct python_call *outer;
} python_call;

static SG_THREAD_LOCAL python_call *current_call;
static PyObject *str_row, *str_table, *str_accepting, *str_builder, *str_context;

/* An attribute that holds an address (an int, 0, None or missing: NULL). -1 on error. */
static int address_attr(PyObject *obj, PyObject *name, void **out, int optional)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) {
        if (optional && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            *out = NULL;
            return 0;
        }
        return -1;
    }
    *out = value == Py_None ? NULL : PyLong_AsVoidPtr(value);
    Py_DECREF(value);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* Fills the view from the DFA's current arrays (with the GIL). */
static int read_view(PyObject *dfa, dfa_view *view)
{
    void *table, *accepting, *builder, *ctx;
    if (address_attr(dfa, str_table, &table, 0) < 0
            || address_attr(dfa, str_accepting, &accepting, 0) < 0
            || address_attr(dfa, str_builder, &builder, 1) < 0
            || address_attr(dfa, str_context, &ctx, 1) < 0)
        return -1;
    view->table = (const int32_t *)table;
    view->accepting = (const uint8_t *)accepting;
    view->native_build = (native_builder)builder;
    view->native_ctx = ctx;
    return 0;
}

/* The row builder the C walks get: takes the GIL back, calls `dfa.row(state)` and refreshes the
 * view (the DFA may have grown its table, or switched to its C builder). */
static int python_row(int32_t state)
{
    python_call *call = current_call;
    PyEval_RestoreThread(call->released);
    int64_t started = now_ns();
    PyObject *arg = PyLong_FromLong(state);
    PyObject *result = arg ? PyObject_CallMethodOneArg(call->dfa, str_row, arg) : NULL;
    Py_XDECREF(arg);
    int ok = 0;
    if (result != NULL) {
        Py_DECREF(result);
        ok = read_view(call->dfa, call->view) == 0;
    }
    if (!ok && call->exc_type == NULL)
        PyErr_Fetch(&call->exc_type, &call->exc_value, &call->exc_tb);
    else if (!ok)
        PyErr_Clear();
    call->build_ns += now_ns() - started;
    call->released = PyEval_SaveThread();
    return ok ? 0 : -1;
}

/* Starts a C call on `dfa`: the view filled, this thread's link set, the GIL released (on
 * failure, -1 with the GIL held). The link points into the caller's frame, which resets it in
 * call_leave before it returns. */
#if defined(__GNUC__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
static int call_enter(python_call *call, PyObject *dfa, dfa_view *view)
{
    memset(call, 0, sizeof(*call));
    call->dfa = dfa;
    call->view = view;
    if (read_view(dfa, view) < 0) return -1;
    call->outer = current_call;
    current_call = call;
    call->released = PyEval_SaveThread();
    return 0;
}

/* Ends it: the GIL taken back, the link restored, a row build's failure raised (-1). */
static int call_leave(python_call *call, int64_t result)
{
    PyEval_RestoreThread(call->released);
    current_call = call->outer;
    if (call->exc_type != NULL) {
        PyErr_Restore(call->exc_type, call->exc_value, call->exc_tb);
        return -1;
    }
    if (result < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the C trie walk failed");
        return -1;
    }
    return 0;
}

static int args_ok(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, want, nargs);
    return 0;
}

#define ADDR(i) PyLong_AsVoidPtr(args[i])
#define I64(i) PyLong_AsLongLong(args[i])

/* walk(view, roots, n_groups, skip, lo, hi, base, n_ranges, start, dfa, stack, words, events,
 *      collect, group_words, n_words, zero) -> (n_events, build_ns)
 * `sg_walk_forest` when `roots` is not 0 (the whole vocabulary; lo, hi, base unused), else
 * `sg_walk_nodes` over the ranges. `events` is an events_out whose `cap` is used when `collect`.
 * `words` (n_words of them) is zeroed first when `zero`; the tokens of the groups in `skip`
 * (allowed whole without a walk) are set from `group_words` ([n_groups, n_words]; 0: none) —
 * in Python, a fresh zeroed mask and a numpy OR per group cost more than the walk of a
 * string state's remaining tokens. */
static PyObject *py_walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 17, "walk")) return NULL;
    const node_view *v = ADDR(0);
    const int32_t *roots = ADDR(1);
    int32_t n_groups = (int32_t)I64(2);
    uint64_t skip = PyLong_AsUnsignedLongLongMask(args[3]);
    const int64_t *lo = ADDR(4), *hi = ADDR(5);
    const int32_t *base = ADDR(6);
    int64_t n_ranges = I64(7);
    int32_t start = (int32_t)I64(8);
    int32_t *stack = ADDR(10);
    uint32_t *words = ADDR(11);
    events_out *ev_given = ADDR(12);
    int collect = PyObject_IsTrue(args[13]);
    const uint32_t *group_words = ADDR(14);
    int64_t n_words = I64(15);
    int zero = PyObject_IsTrue(args[16]);
    if (PyErr_Occurred()) return NULL;
    if (v == NULL || stack == NULL || words == NULL || ev_given == NULL) {
        PyErr_SetString(PyExc_ValueError, "walk: a NULL buffer");
        return NULL;
    }
    if (n_words < 0 || n_groups < 0 || n_groups > SG_MAX_GROUPS) {
        PyErr_SetString(PyExc_ValueError, "walk: bad word or group count");
        return NULL;
    }
    if (zero) memset(words, 0, (size_t)n_words * sizeof(uint32_t));
    if (roots != NULL && group_words != NULL) {
        for (int32_t g = 0; g < n_groups; g++) {
            if (!((skip >> g) & 1u)) continue;
            const uint32_t *src = group_words + (int64_t)g * n_words;
            for (int64_t i = 0; i < n_words; i++) words[i] |= src[i];
        }
    }
    events_out ev = *ev_given;
    if (!collect) ev.cap = 0;
    walk_state ws = {0};
    dfa_view view;
    python_call call;
    if (call_enter(&call, args[9], &view) < 0) return NULL;
    int64_t result;
    if (roots != NULL) {
        /* the forest reads the start's row to skip dead first bytes: built here first, in C
         * where the DFA has a builder (a lexer state's first visit; through Python's `row()`
         * it cost ~5 µs more, the ctypes call and the Python around it) */
        result = 0;
        if (view.table[(int64_t)start * 256] == -2 && build_row(&view, python_row, start) < 0)
            result = -1;
        if (result == 0)
            result = sg_walk_forest(v, roots, n_groups, skip, start, &view, python_row, stack,
                                    &ws, words, &ev);
    } else
        result = sg_walk_nodes(v, lo, hi, base, n_ranges, start, &view, python_row, stack, &ws,
                               words, &ev);
    if (call_leave(&call, result) < 0) return NULL;
    return Py_BuildValue("(LL)", (long long)ws.n_events, (long long)call.build_ns);
}

/* contained(dfa, state, checks) -> groups (sg_contained_groups; `checks` a slice_checks). */
static PyObject *py_contained(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 3, "contained")) return NULL;
    int32_t q = (int32_t)I64(1);
    const slice_checks *checks = ADDR(2);
    if (PyErr_Occurred()) return NULL;
    dfa_view view;
    python_call call;
    if (call_enter(&call, args[0], &view) < 0) return NULL;
    int64_t result = sg_contained_groups(&view, python_row, q, checks);
    if (call_leave(&call, result) < 0) return NULL;
    return PyLong_FromLongLong(result);
}

/* bounded_equal(dfa, reps, n_reps, relevant, p, q, max_len, max_pairs, max_builds, n_slots,
 *               slots, pa, pb, pd, ps) -> 1 equal, 0 not known equal (sg_bounded_equal). */
static PyObject *py_bounded_equal(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 15, "bounded_equal")) return NULL;
    const uint8_t *reps = ADDR(1);
    int32_t n_reps = (int32_t)I64(2);
    const uint8_t *relevant = ADDR(3);
    int32_t p = (int32_t)I64(4), q = (int32_t)I64(5), max_len = (int32_t)I64(6);
    int64_t max_pairs = I64(7), max_builds = I64(8), n_slots = I64(9);
    int64_t *slots = ADDR(10);
    int32_t *pa = ADDR(11), *pb = ADDR(12), *pd = ADDR(13);
    int64_t *ps = ADDR(14);
    if (PyErr_Occurred()) return NULL;
    dfa_view view;
    python_call call;
    if (call_enter(&call, args[0], &view) < 0) return NULL;
    int64_t result = sg_bounded_equal(&view, python_row, reps, n_reps, relevant, p, q, max_len,
                                      max_pairs, max_builds, n_slots, slots, pa, pb, pd, ps);
    if (call_leave(&call, result) < 0) return NULL;
    return PyLong_FromLongLong(result);
}

/* take_words(words, n, idx, val) -> count (sg_take_words). */
static PyObject *py_take_words(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 4, "take_words")) return NULL;
    uint32_t *words = ADDR(0);
    int64_t n = I64(1);
    int64_t *idx = ADDR(2);
    uint32_t *val = ADDR(3);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(sg_take_words(words, n, idx, val));
}

/* One event's place in the stable order by state (see py_pack_events). */
typedef struct {
    int32_t state;
    int32_t index;
} event_key;

static int event_key_cmp(const void *a, const void *b)
{
    const event_key *x = a, *y = b;
    if (x->state != y->state) return x->state < y->state ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* pack_events(lo, hi, cut, state, k) -> (packed, bounds)
 * A walk's k boundary events copied from its buffers into one bytes object, ordered by state
 * (each state's events in walk order: a stable sort) and laid out as lo (int64 x k), hi (int64
 * x k), cut (int32 x k), state (int32 x k); `bounds` are the groups as (state, end, state, end,
 * ...) with ascending states. Every mask that reaches the events splits them by the state they
 * die in and walks each group's subtrees again (`walk_spans`, straight from the bytes): in
 * Python that was four fancy-indexed copies per group and four arrays per walk. */
static PyObject *pack_events(const int64_t *lo, const int64_t *hi, const int32_t *cut,
                             const int32_t *state, int64_t k)
{
    if (k <= 0 || k > INT32_MAX / 24 || !lo || !hi || !cut || !state) {
        PyErr_SetString(PyExc_ValueError, "pack_events: bad buffers or count");
        return NULL;
    }
    PyObject *packed = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(24 * k));
    if (packed == NULL) return NULL;
    char *base = PyBytes_AS_STRING(packed);
    int64_t *o_lo = (int64_t *)base, *o_hi = (int64_t *)(base + 8 * k);
    int32_t *o_cut = (int32_t *)(base + 16 * k), *o_state = (int32_t *)(base + 20 * k);
    int64_t same = 1;
    while (same < k && state[same] == state[0]) same++;
    if (same == k) {  /* the common case: one state, walk order kept */
        memcpy(o_lo, lo, (size_t)k * sizeof(int64_t));
        memcpy(o_hi, hi, (size_t)k * sizeof(int64_t));
        memcpy(o_cut, cut, (size_t)k * sizeof(int32_t));
        memcpy(o_state, state, (size_t)k * sizeof(int32_t));
        return Py_BuildValue("(N(iL))", packed, (int)state[0], (long long)k);
    }
    event_key *order = PyMem_Malloc((size_t)k * sizeof(event_key));
    if (order == NULL) {
        Py_DECREF(packed);
        return PyErr_NoMemory();
    }
    for (int64_t i = 0; i < k; i++) {
        order[i].state = state[i];
        order[i].index = (int32_t)i;
    }
    qsort(order, (size_t)k, sizeof(event_key), event_key_cmp);
    int64_t n_groups = 1;
    for (int64_t i = 0; i < k; i++) {
        int32_t j = order[i].index;
        o_lo[i] = lo[j];
        o_hi[i] = hi[j];
        o_cut[i] = cut[j];
        o_state[i] = state[j];
        if (i && order[i].state != order[i - 1].state) n_groups++;
    }
    PyMem_Free(order);
    PyObject *bounds = PyTuple_New((Py_ssize_t)(2 * n_groups));
    if (bounds == NULL) {
        Py_DECREF(packed);
        return NULL;
    }
    Py_ssize_t g = 0;
    for (int64_t i = 1; i <= k; i++) {
        if (i < k && o_state[i] == o_state[i - 1]) continue;
        PyObject *s = PyLong_FromLong(o_state[i - 1]);
        PyObject *end = s ? PyLong_FromLongLong(i) : NULL;
        if (end == NULL) {
            Py_XDECREF(s);
            Py_DECREF(bounds);
            Py_DECREF(packed);
            return NULL;
        }
        PyTuple_SET_ITEM(bounds, g, s);
        PyTuple_SET_ITEM(bounds, g + 1, end);
        g += 2;
    }
    return Py_BuildValue("(NN)", packed, bounds);
}

static PyObject *py_pack_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 5, "pack_events")) return NULL;
    const int64_t *lo = ADDR(0), *hi = ADDR(1);
    const int32_t *cut = ADDR(2), *state = ADDR(3);
    int64_t k = I64(4);
    if (PyErr_Occurred()) return NULL;
    return pack_events(lo, hi, cut, state, k);
}

/* The continued walk shared by walk_spans and continue_spans: `sg_walk_nodes` over events
 * [first, end) of a `pack_events` result of `total` events (their subtrees, each from its cut),
 * boundary events collected into `*ev`, then the mask's non-zero words taken out of `words`
 * (zeroed again) into idx/val (`sg_take_words`). 0, or -1 with an exception set. */
static int spans_walk(PyObject *const *args, int64_t *k_out, int64_t *n_events,
                      int64_t *build_ns, events_out *ev_out)
{
    const node_view *v = ADDR(0);
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "walk_spans: packed events must be bytes");
        return -1;
    }
    int64_t total = I64(2), first = I64(3), end = I64(4);
    int32_t start = (int32_t)I64(5);
    int32_t *stack = ADDR(7);
    uint32_t *words = ADDR(8);
    events_out *ev_given = ADDR(9);
    int64_t n_words = I64(10);
    int64_t *idx = ADDR(11);
    uint32_t *val = ADDR(12);
    if (PyErr_Occurred()) return -1;
    if (total < 0 || first < 0 || end < first || end > total
            || PyBytes_GET_SIZE(args[1]) != 24 * total) {
        PyErr_SetString(PyExc_ValueError, "walk_spans: events out of range");
        return -1;
    }
    if (v == NULL || stack == NULL || words == NULL || ev_given == NULL || idx == NULL
            || val == NULL || n_words < 0) {
        PyErr_SetString(PyExc_ValueError, "walk_spans: a NULL buffer");
        return -1;
    }
    const char *base = PyBytes_AS_STRING(args[1]);
    const int64_t *lo = (const int64_t *)base + first;
    const int64_t *hi = (const int64_t *)(base + 8 * total) + first;
    const int32_t *cut = (const int32_t *)(base + 16 * total) + first;
    events_out ev = *ev_given;
    walk_state ws = {0};
    dfa_view view;
    python_call call;
    Py_INCREF(args[1]);  /* (the bytes are read without the GIL) */
    if (call_enter(&call, args[6], &view) < 0) {
        Py_DECREF(args[1]);
        return -1;
    }
    int64_t result = sg_walk_nodes(v, lo, hi, cut, end - first, start, &view, python_row, stack,
                                   &ws, words, &ev);
    int failed = call_leave(&call, result) < 0;
    Py_DECREF(args[1]);
    *k_out = sg_take_words(words, n_words, idx, val);  /* (zeroed again, even on failure) */
    *n_events = ws.n_events;
    *build_ns = call.build_ns;
    *ev_out = *ev_given;
    return failed ? -1 : 0;
}

/* walk_spans(view, packed, total, first, end, start, dfa, stack, words, events, n_words, idx,
 *            val) -> (n_words_set, n_events, build_ns)
 * `spans_walk`: a continued walk in one call (the words set left in idx/val, the events in the
 * buffers of `events`). */
static PyObject *py_walk_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 13, "walk_spans")) return NULL;
    int64_t k, n_events, build_ns;
    events_out ev;
    if (spans_walk(args, &k, &n_events, &build_ns, &ev) < 0) return NULL;
    return Py_BuildValue("(LLL)", (long long)k, (long long)n_events, (long long)build_ns);
}

/* continue_spans(same arguments as walk_spans) -> (indices, values, packed, bounds, build_ns)
 * `walk_spans` and `pack_events` in one call, with the results as new bytes: the words set
 * (int64 indices, uint32 values) and the boundary events packed (None and () when there are
 * none). A first visit continues a few walks from each boundary: the Python between the two
 * calls, and the two copies of the words, cost as much as a short walk. */
static PyObject *py_continue_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!args_ok(nargs, 13, "continue_spans")) return NULL;
    int64_t k, n_events, build_ns;
    events_out ev;
    if (spans_walk(args, &k, &n_events, &build_ns, &ev) < 0) return NULL;
    const int64_t *idx = ADDR(11);
    const uint32_t *val = ADDR(12);
    PyObject *indices = PyBytes_FromStringAndSize((const char *)idx, (Py_ssize_t)(8 * k));
    PyObject *values = indices ? PyBytes_FromStringAndSize((const char *)val,
                                                            (Py_ssize_t)(4 * k)) : NULL;
    PyObject *events = NULL;
    if (values != NULL) {
        if (n_events > 0 && n_events <= ev.cap)
            events = pack_events(ev.lo, ev.hi, ev.cut, ev.state, n_events);
        else if (n_events == 0)
            events = Py_BuildValue("(O())", Py_None);
        else
            PyErr_SetString(PyExc_RuntimeError, "continue_spans: more events than buffers");
    }
    if (events == NULL) {
        Py_XDECREF(indices);
        Py_XDECREF(values);
        return NULL;
    }
    PyObject *out = Py_BuildValue("(NNOOL)", indices, values, PyTuple_GET_ITEM(events, 0),
                                  PyTuple_GET_ITEM(events, 1), (long long)build_ns);
    Py_DECREF(events);
    return out;
}

#undef ADDR
#undef I64

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))py_walk, METH_FASTCALL, "The trie walk (see the file)."},
    {"contained", (PyCFunction)(void (*)(void))py_contained, METH_FASTCALL,
     "The token groups a state allows whole."},
    {"bounded_equal", (PyCFunction)(void (*)(void))py_bounded_equal, METH_FASTCALL,
     "Whether two states keep the same token prefixes alive."},
    {"take_words", (PyCFunction)(void (*)(void))py_take_words, METH_FASTCALL,
     "The non-zero words of a mask, zeroing them."},
    {"pack_events", (PyCFunction)(void (*)(void))py_pack_events, METH_FASTCALL,
     "A walk's boundary events packed into bytes ordered by state, and the groups."},
    {"walk_spans", (PyCFunction)(void (*)(void))py_walk_spans, METH_FASTCALL,
     "A continued walk over packed events' subtrees, its mask as non-zero words."},
    {"continue_spans", (PyCFunction)(void (*)(void))py_continue_spans, METH_FASTCALL,
     "walk_spans and pack_events in one call, the results as new bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void)
{
    str_row = PyUnicode_InternFromString("row");
    str_table = PyUnicode_InternFromString("table_address");
    str_accepting = PyUnicode_InternFromString("accepting_address");
    str_builder = PyUnicode_InternFromString("native_builder");
    str_context = PyUnicode_InternFromString("native_context");
    if (!str_row || !str_table || !str_accepting || !str_builder || !str_context) return NULL;
    /* Safe without the GIL: the walks' scratch is the caller's (per thread), their link back
     * to Python thread-local */
    return sg_without_gil(PyModule_Create(&module));
}
