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
 * Loaded with ctypes (see _kernel.py); the module init only makes the file importable.
 */
#include <Python.h>
#include <stdint.h>
#include <time.h>

typedef struct {
    int64_t range;       /* current range */
    int64_t next;        /* next token index to process (-1: the range has not started) */
    int64_t valid;       /* stack depth that is valid for the previous token's prefix */
    int64_t n_events;    /* boundary events written */
    int64_t dead_event;  /* event that a run of skipped tokens extends, or -1 */
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

typedef struct {        /* the vocabulary's trie as nodes in preorder (fixed per vocabulary) */
    const uint8_t *byte;     /* the byte that leads into the node */
    const int32_t *depth;    /* 1 for the root's children */
    const int32_t *end;      /* one past the node's subtree */
    const int32_t *tok_lo;   /* tokens ending at the node: ids[tok_lo .. tok_hi) */
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
    const uint8_t *bytes = v->byte;
    const int32_t *depth = v->depth;
    const int32_t *end = v->end;
    const int32_t *tok_lo = v->tok_lo;
    const int32_t *tok_hi = v->tok_hi;
    const int32_t *ids = v->ids;
    int collect = ev->cap > 0;
    for (ws->range = 0; ws->range < n_ranges; ws->range++) {
        int64_t k = r_lo[ws->range], hi = r_hi[ws->range];
        int32_t base = r_base[ws->range];
        int64_t last = -1;
        stack[base] = start;
        while (k < hi) {
            int32_t d = depth[k];
            int32_t s = stack[d - 1];
            int32_t t = dfa->table[(int64_t)s * 256 + bytes[k]];
            if (t == -2) {
                if (build_row(dfa, build, s) < 0) return -1;
                t = dfa->table[(int64_t)s * 256 + bytes[k]];
            }
            if (t < 0) {
                int64_t e = end[k];
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
            for (int32_t j = tok_lo[k]; j < tok_hi[k]; j++) {
                int32_t id = ids[j];
                mask_words[id >> 5] |= (uint32_t)1u << (id & 31);
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
            lo[n] = k; hi[n] = v->end[k]; base[n] = 0;
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
 * rows built, may get further), -1 when building a row failed. Same buffers as
 * sg_bounded_equal. */
static int64_t slice_contained(
    dfa_view *dfa, row_builder build, const slice_view *sl, int32_t u0, int32_t q0,
    int32_t max_len, int64_t max_pairs, build_budget *budget, int64_t n_slots,
    int64_t *slots, int32_t *pa, int32_t *pb, int32_t *pd, int64_t *ps)
{
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
} slice_checks;

/* The token groups whose every token is provably allowed in q, as a bitmask, with bit 62 set
 * when a check gave up (its answer may change once more rows are built); -1: building a row
 * failed. All checks together build at most max_builds DFA rows, and start none after
 * max_build_ns (checks that were cut short may be asked again). Checks run in order; one whose
 * group is already proved is skipped; when `floor` is set, check 0 is implied by every other, so
 * its failure ends the search (the common case: a state that allows few bytes costs one short
 * check). The fixed arguments come in one struct: a call costs a few arguments, not twenty. */
int64_t sg_contained_groups(dfa_view *dfa, row_builder build, int32_t q, const slice_checks *c)
{
    int64_t found = 0, gave_up = 0;
    build_budget budget = {c->max_builds, c->max_build_ns ? now_ns() + c->max_build_ns : 0};
    for (int32_t i = 0; i < c->n_checks; i++) {
        if ((found >> c->group[i]) & 1) continue;
        int64_t ok = slice_contained(dfa, build, &c->sl, c->u0[i], q, c->len[i], c->max_pairs,
                                     &budget, c->n_slots, c->slots, c->pa, c->pb, c->pd,
                                     c->ps);
        if (ok < 0) return -1;
        if (ok == 1) found |= c->implies[i];
        else {
            if (ok == 2) gave_up = 1;
            if (i == 0 && c->floor) break;
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
 * word zeroed as it is taken (the buffer is ready for the next walk). Returns their count. */
int64_t sg_take_words(uint32_t *words, int64_t n, int64_t *idx, uint32_t *val)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
