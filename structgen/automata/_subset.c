/* Lazy DFA rows in C: the subset construction of structgen's regex DFAs and the tagged union of
 * a grammar's lexer (see dfa.py, `NFASource` and `UnionSource`).
 *
 * Both kinds of context intern their states the same way (`sg_states`): a state is a sorted set
 * of int64 *elements*, kept in an arena and found through an open-addressing hash table; rows go
 * into the DFA's `int32 [capacity, 256]` table (-1 dead, -2 not built), byte 0 last, so a row
 * whose byte 0 is not -2 is complete.
 *
 * Subset construction: an element is `next * P + node` ("inside a character at pool DAG node
 * `node`, continuing at NFA state `next`", P = pool size) or -1 (the match state), exactly the
 * elements of the Python `NFASource`. `sg_subset_build` expands one state: per byte class it
 * collects the moved elements, closes the completed characters over epsilon moves and interns the
 * result.
 *
 * Union: an element is `component << 32 | component state`, one per component still alive, as
 * the Python `UnionSource` keys. A row reads each component's row (built by the component's own C
 * builder when it has one) and interns, per byte class, the components that move. A component
 * whose rows Python builds and whose row is not there yet stops the build with SG_NEED_ROW
 * (`sg_union_need` says which); Python builds it, refreshes the component's arrays and retries.
 * The same context builds two more kinds of composed DFA (`sg_union_set_mode`), with the same
 * components and stops: a *sequence* (`counted.SequenceSource`: elements as the union's, any
 * number per component, closed under "component i accepts: component i + 1 starts"; accepting
 * when the last component accepts) and a *counted repetition* (`counted.CountedSource`: one
 * element `count << 32 | unit state`, unit state 0xFFFFFFFF between units), and a *product*
 * (`dfa.ProductSource`: one element per component; a tuple gets an id only once a search finds
 * it can reach acceptance: breadth first, then guided by the components' distances, which
 * Python provides once (SG_NEED_GUIDE, `sg_union_set_distances`), up to the budget
 * (SG_SEARCH_LIMIT); see `product_live`).
 *
 * Python owns the tables and accepting arrays and keeps the limits: when a new state would need a
 * bigger table, pass `max_states`, or is due for a compile-budget check (every 1024 states) the
 * build stops and returns a code; Python acts and calls again (interning is idempotent, so a
 * retried row gives the same ids). A mutex per context serialises builds, because the C trie walk
 * builds rows directly (`sg_subset_walk_build`, `sg_union_walk_build`) with the GIL released. A
 * union build may take its components' locks, never the other way round.
 *
 * Loaded with ctypes (see _native_subset.py); the module init only makes the file importable.
 */
#include <Python.h>

#include "../_module_gil.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SG_OK 0
#define SG_GROW 1
#define SG_LIMIT 2
#define SG_BUDGET 3
#define SG_NOMEM 4
#define SG_BAD_STATE 5
#define SG_NEED_ROW 6
#define SG_NEED_LIVE 7
#define SG_NEED_GUIDE 8
#define SG_SEARCH_LIMIT 9
#define SNAPSHOT_UNBUILT (-2) /* a row not built yet (snapshot.py, UNBUILT) */

#define K_SPLIT 0
#define K_CONSUME 1

/* The states of one lazy DFA: the interned element sets and the arrays rows go into. First in
 * every context, so Python reads `n_states` and `capacity` at the same offsets in both. */
typedef struct {
    /* read by Python through ctypes: keep these first and in this order */
    int64_t n_states;
    int64_t capacity;
    int32_t *table;
    uint8_t *accepting;
    int64_t max_states;
    int64_t budget_checked; /* the state count at which the budget was last checked */
    int64_t clean;          /* rows below this are -2 or built; a state created at or past it
                             * gets its row filled with -2 first (a grown table is not filled) */
    int64_t *elems;         /* the element sets, in an arena */
    int64_t elems_len, elems_cap;
    int64_t *set_off;       /* per state (n_states + 1 used) */
    uint64_t *set_hash;
    int64_t sets_cap;
    int32_t *slots;         /* hash table of state ids, -1 empty */
    int64_t n_slots;
    pthread_mutex_t lock;
} sg_states;

typedef struct {
    sg_states st;
    /* the NFA */
    int32_t n;
    int64_t p;
    const int8_t *kind;
    const uint8_t *live;
    const int32_t *node;
    const int32_t *next;
    const int32_t *eps_off;
    const int32_t *eps;
    const int32_t *mv_off;    /* per pool node: moves mv_off[k] .. mv_off[k + 1] */
    const int32_t *mv_child;  /* -1: the character is complete */
    int32_t *mc_off;          /* per move: its classes mc[mc_off[m] .. mc_off[m + 1]) */
    uint8_t *mc;
    uint8_t classes[256];
    int32_t n_classes;
    /* scratch */
    int64_t *items;
    int64_t items_cap;
    int32_t *count; /* per class */
    int32_t *start; /* per class */
    int64_t *target;
    int64_t target_cap;
    uint32_t *seen; /* NFA state stamps for closures */
    uint32_t stamp;
    int32_t *stack;
    int32_t row[256];
    uint64_t memo_hash[256];
    int32_t memo_class[512];
} sg_subset;

static uint64_t hash_elems(const int64_t *a, int64_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) {
        h ^= (uint64_t)a[i];
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h ? h : 1;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* Sort and deduplicate a[0..n); returns the new length. */
static int64_t sort_unique(int64_t *a, int64_t n)
{
    if (n <= 1) return n;
    if (n <= 24) {
        for (int64_t i = 1; i < n; i++) {
            int64_t v = a[i], j = i - 1;
            while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j--; }
            a[j + 1] = v;
        }
    } else {
        qsort(a, (size_t)n, sizeof(int64_t), cmp_i64);
    }
    int64_t w = 1;
    for (int64_t i = 1; i < n; i++)
        if (a[i] != a[w - 1]) a[w++] = a[i];
    return w;
}

static int reserve_i64(int64_t **buf, int64_t *cap, int64_t need)
{
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    int64_t *nb = (int64_t *)realloc(*buf, (size_t)c * sizeof(int64_t));
    if (!nb) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int states_init(sg_states *st, int64_t max_states)
{
    pthread_mutex_init(&st->lock, NULL);
    st->max_states = max_states;
    st->n_slots = 1024;
    st->slots = (int32_t *)malloc((size_t)st->n_slots * sizeof(int32_t));
    st->sets_cap = 256;
    st->set_off = (int64_t *)malloc((size_t)(st->sets_cap + 1) * sizeof(int64_t));
    st->set_hash = (uint64_t *)malloc((size_t)st->sets_cap * sizeof(uint64_t));
    if (!st->slots || !st->set_off || !st->set_hash) return -1;
    memset(st->slots, 0xFF, (size_t)st->n_slots * sizeof(int32_t));
    st->set_off[0] = 0;
    return 0;
}

static void states_free(sg_states *st)
{
    pthread_mutex_destroy(&st->lock);
    free(st->elems); free(st->set_off); free(st->set_hash); free(st->slots);
}

void sg_subset_free(sg_subset *s)
{
    if (!s) return;
    states_free(&s->st);
    free(s->mc_off); free(s->mc); free(s->items); free(s->count); free(s->start);
    free(s->target); free(s->seen); free(s->stack);
    free(s);
}

/* The NFA arrays must stay alive as long as the context (Python keeps them). */
sg_subset *sg_subset_new(
    int32_t n, const int8_t *kind, const uint8_t *live, const int32_t *node, const int32_t *next,
    const int32_t *eps_off, const int32_t *eps, int64_t p, const int32_t *mv_off,
    const int32_t *mv_lo, const int32_t *mv_hi, const int32_t *mv_child,
    const uint8_t *classes, int64_t max_states)
{
    sg_subset *s = (sg_subset *)calloc(1, sizeof(sg_subset));
    if (!s) return NULL;
    if (states_init(&s->st, max_states)) { sg_subset_free(s); return NULL; }
    s->n = n; s->p = p; s->kind = kind; s->live = live; s->node = node; s->next = next;
    s->eps_off = eps_off; s->eps = eps; s->mv_off = mv_off; s->mv_child = mv_child;
    memcpy(s->classes, classes, 256);
    int32_t nc = 0;
    for (int b = 0; b < 256; b++) if (classes[b] + 1 > nc) nc = classes[b] + 1;
    s->n_classes = nc;
    int64_t n_moves = p > 0 ? mv_off[p] : 0;
    int64_t total = 0;
    for (int64_t m = 0; m < n_moves; m++) total += mv_hi[m] - mv_lo[m] + 1;
    s->mc_off = (int32_t *)malloc((size_t)(n_moves + 1) * sizeof(int32_t));
    s->mc = (uint8_t *)malloc((size_t)(total > 0 ? total : 1));
    s->count = (int32_t *)calloc(256, sizeof(int32_t));
    s->start = (int32_t *)calloc(257, sizeof(int32_t));
    s->seen = (uint32_t *)calloc((size_t)(n > 0 ? n : 1), sizeof(uint32_t));
    s->stack = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!s->mc_off || !s->mc || !s->count || !s->start || !s->seen || !s->stack) {
        sg_subset_free(s);
        return NULL;
    }
    /* each move's distinct classes, in increasing order */
    uint8_t mark[256];
    int64_t w = 0;
    for (int64_t m = 0; m < n_moves; m++) {
        s->mc_off[m] = (int32_t)w;
        memset(mark, 0, sizeof mark);
        for (int32_t b = mv_lo[m]; b <= mv_hi[m]; b++) mark[classes[b]] = 1;
        for (int c = 0; c < nc; c++) if (mark[c]) s->mc[w++] = (uint8_t)c;
    }
    s->mc_off[n_moves] = (int32_t)w;
    return s;
}

/* Adds the epsilon closure of NFA state `q` to s->target[*len ..]. */
static int closure(sg_subset *s, int32_t q, int64_t *len)
{
    if (!s->live[q] || s->seen[q] == s->stamp) return 0;
    int32_t top = 0;
    s->seen[q] = s->stamp;
    s->stack[top++] = q;
    while (top > 0) {
        int32_t x = s->stack[--top];
        int8_t k = s->kind[x];
        if (k == K_SPLIT) {
            for (int32_t i = s->eps_off[x]; i < s->eps_off[x + 1]; i++) {
                int32_t y = s->eps[i];
                if (s->seen[y] != s->stamp) { s->seen[y] = s->stamp; s->stack[top++] = y; }
            }
        } else {
            if (reserve_i64(&s->target, &s->target_cap, *len + 1)) return -1;
            s->target[(*len)++] = k == K_CONSUME ? (int64_t)s->next[x] * s->p + s->node[x] : -1;
        }
    }
    return 0;
}

static void next_stamp(sg_subset *s)
{
    if (++s->stamp == 0) {
        memset(s->seen, 0, (size_t)(s->n > 0 ? s->n : 1) * sizeof(uint32_t));
        s->stamp = 1;
    }
}

/* The id of the (sorted, unique, non-empty) set a[0..n), creating it (with `accepting`) if
 * needed: >= 0, or -SG_GROW / -SG_LIMIT / -SG_BUDGET / -SG_NOMEM. */
static int64_t intern(sg_states *s, const int64_t *a, int64_t n, uint8_t accepting)
{
    uint64_t h = hash_elems(a, n);
    uint64_t mask = (uint64_t)s->n_slots - 1;
    uint64_t i = h & mask;
    for (;; i = (i + 1) & mask) {
        int32_t id = s->slots[i];
        if (id < 0) break;
        if (s->set_hash[id] == h) {
            int64_t off = s->set_off[id], len = s->set_off[id + 1] - off;
            if (len == n && !memcmp(s->elems + off, a, (size_t)n * sizeof(int64_t))) return id;
        }
    }
    int64_t sid = s->n_states;
    if (!(sid & 0x3FF) && sid > s->budget_checked) return -SG_BUDGET;
    if (sid >= s->max_states) return -SG_LIMIT;
    if (sid >= s->capacity) return -SG_GROW;
    if (sid + 1 >= s->sets_cap) {
        int64_t c = s->sets_cap * 2;
        int64_t *no = (int64_t *)realloc(s->set_off, (size_t)(c + 1) * sizeof(int64_t));
        if (!no) return -SG_NOMEM;
        s->set_off = no;
        uint64_t *nh = (uint64_t *)realloc(s->set_hash, (size_t)c * sizeof(uint64_t));
        if (!nh) return -SG_NOMEM;
        s->set_hash = nh;
        s->sets_cap = c;
    }
    if (reserve_i64(&s->elems, &s->elems_cap, s->elems_len + n)) return -SG_NOMEM;
    if ((sid + 1) * 2 > s->n_slots) {
        int64_t ns = s->n_slots * 2;
        int32_t *nslots = (int32_t *)malloc((size_t)ns * sizeof(int32_t));
        if (!nslots) return -SG_NOMEM;
        memset(nslots, 0xFF, (size_t)ns * sizeof(int32_t));
        uint64_t nm = (uint64_t)ns - 1;
        for (int64_t k = 0; k < sid; k++) {
            uint64_t j = s->set_hash[k] & nm;
            while (nslots[j] >= 0) j = (j + 1) & nm;
            nslots[j] = (int32_t)k;
        }
        free(s->slots);
        s->slots = nslots;
        s->n_slots = ns;
        mask = nm;
        i = h & mask;
        while (s->slots[i] >= 0) i = (i + 1) & mask;
    }
    memcpy(s->elems + s->elems_len, a, (size_t)n * sizeof(int64_t));
    s->elems_len += n;
    s->set_off[sid + 1] = s->elems_len;
    s->set_hash[sid] = h;
    s->slots[i] = (int32_t)sid;
    if (sid >= s->clean) {
        int32_t *row = s->table + sid * 256;
        for (int k = 0; k < 256; k++) row[k] = -2;
        s->clean = sid + 1;
    }
    s->accepting[sid] = accepting;
    __atomic_store_n(&s->n_states, sid + 1, __ATOMIC_RELEASE);
    return sid;
}

/* The start state (the closure of NFA state `q`): its id (>= 0), -1 for an empty language (no
 * state is created), or a negative code -1 - SG_x. */
int64_t sg_subset_start(sg_subset *s, int32_t q)
{
    pthread_mutex_lock(&s->st.lock);
    next_stamp(s);
    int64_t len = 0, r;
    if (closure(s, q, &len)) r = -1 - SG_NOMEM;
    else if (len == 0) r = -1;
    else {
        len = sort_unique(s->target, len);
        r = intern(&s->st, s->target, len, s->target[0] == -1);
        if (r < 0) r = -1 + r;
    }
    pthread_mutex_unlock(&s->st.lock);
    return r;
}

/* Creates the state of a sorted, unique, non-empty element set (unpickling); id or -1 - SG_x. */
int64_t sg_subset_intern(sg_subset *s, const int64_t *a, int64_t n)
{
    pthread_mutex_lock(&s->st.lock);
    int64_t r = n > 0 ? intern(&s->st, a, n, a[0] == -1) : -SG_BAD_STATE;
    pthread_mutex_unlock(&s->st.lock);
    return r < 0 ? -1 + r : r;
}

/* Writes a row (per class targets) into the table, byte 0 last: a reader that sees byte 0 built
 * sees the whole row. */
static void publish_row(int32_t *out, const int32_t *row, const uint8_t *classes)
{
    for (int b = 255; b >= 1; b--) out[b] = row[classes[b]];
    __atomic_store_n(&out[0], row[classes[0]], __ATOMIC_RELEASE);
}

/* publish_row for a row written per byte (a chain's: each byte its own class). */
static void publish_byte_row(int32_t *out, const int32_t *row)
{
    for (int b = 255; b >= 1; b--) out[b] = row[b];
    __atomic_store_n(&out[0], row[0], __ATOMIC_RELEASE);
}

static int build_locked(sg_subset *s, int32_t state)
{
    sg_states *st = &s->st;
    if (state < 0 || state >= st->n_states) return SG_BAD_STATE;
    int32_t *out = st->table + (int64_t)state * 256;
    if (out[0] != -2) return SG_OK;  /* built meanwhile */
    const int64_t *key = st->elems + st->set_off[state];
    int64_t klen = st->set_off[state + 1] - st->set_off[state];
    int32_t nc = s->n_classes;
    const int64_t p = s->p;
    /* pass 1: bucket sizes */
    memset(s->count, 0, (size_t)nc * sizeof(int32_t));
    for (int64_t i = 0; i < klen; i++) {
        int64_t e = key[i];
        if (e < 0) continue;
        int64_t node = e % p;
        for (int32_t m = s->mv_off[node]; m < s->mv_off[node + 1]; m++)
            for (int32_t j = s->mc_off[m]; j < s->mc_off[m + 1]; j++) s->count[s->mc[j]]++;
    }
    int64_t total = 0;
    for (int32_t c = 0; c < nc; c++) { s->start[c] = (int32_t)total; total += s->count[c]; }
    s->start[nc] = (int32_t)total;
    if (reserve_i64(&s->items, &s->items_cap, total > 0 ? total : 1)) return SG_NOMEM;
    /* pass 2: fill (count[] becomes the fill position); a completed character continuing at
     * NFA state q is recorded as -2 - q */
    for (int32_t c = 0; c < nc; c++) s->count[c] = s->start[c];
    for (int64_t i = 0; i < klen; i++) {
        int64_t e = key[i];
        if (e < 0) continue;
        int64_t nxt = e / p, node = e % p, base = nxt * p;
        for (int32_t m = s->mv_off[node]; m < s->mv_off[node + 1]; m++) {
            int32_t child = s->mv_child[m];
            int64_t item = child >= 0 ? base + child : -2 - nxt;
            for (int32_t j = s->mc_off[m]; j < s->mc_off[m + 1]; j++)
                s->items[s->count[s->mc[j]]++] = item;
        }
    }
    /* per class: the target (classes with the same items share it) */
    memset(s->memo_class, 0xFF, sizeof s->memo_class);
    for (int32_t c = 0; c < nc; c++) {
        int64_t lo = s->start[c], n = s->start[c + 1] - lo;
        if (n == 0) { s->row[c] = -1; continue; }
        int64_t *it = s->items + lo;
        n = sort_unique(it, n);
        s->count[c] = (int32_t)(lo + n);  /* the bucket's end after dedup */
        uint64_t h = hash_elems(it, n);
        uint32_t j = (uint32_t)(h & 511);
        int32_t found = -1;
        for (; s->memo_class[j] >= 0; j = (j + 1) & 511) {
            int32_t d = s->memo_class[j];
            int64_t dlo = s->start[d], dn = s->count[d] - dlo;
            if (s->memo_hash[d] == h && dn == n
                && !memcmp(s->items + dlo, it, (size_t)n * sizeof(int64_t))) {
                found = d;
                break;
            }
        }
        if (found >= 0) { s->row[c] = s->row[found]; continue; }
        s->memo_hash[c] = h;
        s->memo_class[j] = c;
        /* items are sorted: completed characters (negative) first */
        if (reserve_i64(&s->target, &s->target_cap, n)) return SG_NOMEM;
        int64_t len = 0, k = 0;
        next_stamp(s);
        for (; k < n && it[k] < 0; k++)
            if (closure(s, (int32_t)(-2 - it[k]), &len)) return SG_NOMEM;
        if (reserve_i64(&s->target, &s->target_cap, len + (n - k))) return SG_NOMEM;
        memcpy(s->target + len, it + k, (size_t)(n - k) * sizeof(int64_t));
        len += n - k;
        if (len == 0) { s->row[c] = -1; continue; }
        len = sort_unique(s->target, len);
        int64_t sid = intern(st, s->target, len, s->target[0] == -1);
        if (sid < 0) return (int)-sid;
        s->row[c] = (int32_t)sid;
    }
    publish_row(out, s->row, s->classes);
    return SG_OK;
}

/* Builds the row of `state`: SG_OK, or SG_GROW (a bigger table first: sg_states_set_table),
 * SG_LIMIT (max_states reached), SG_BUDGET (check the compile budget, then
 * sg_states_budget_checked), SG_NOMEM, SG_BAD_STATE. States created before the stop stay. */
int sg_subset_build(sg_subset *s, int32_t state)
{
    pthread_mutex_lock(&s->st.lock);
    int r = build_locked(s, state);
    pthread_mutex_unlock(&s->st.lock);
    return r;
}

/* Builds the rows of states first, first + 1, ... (in id order: breadth first) while below
 * `last` and the states created so far, for at most `budget_ns` nanoseconds. *next: the first
 * state not built. Returns SG_OK or the stop code of the row that stopped (not built). */
int sg_subset_build_range(sg_subset *s, int32_t first, int32_t last, int64_t budget_ns,
                          int32_t *next)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_mutex_lock(&s->st.lock);
    int r = SG_OK;
    int32_t state = first;
    while (state < last && state < s->st.n_states) {
        r = build_locked(s, state);
        if (r != SG_OK) break;
        state++;
        if (!(state & 7)) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            int64_t spent = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
            if (spent > budget_ns) break;
        }
    }
    *next = state;
    pthread_mutex_unlock(&s->st.lock);
    return r;
}

/* The trie walk's entry: builds the row and hands back the current arrays; nonzero means
 * "let Python build it" (it handles every stop code). */
int sg_subset_walk_build(sg_subset *s, int32_t state, const int32_t **table,
                         const uint8_t **accepting)
{
    pthread_mutex_lock(&s->st.lock);
    int r = build_locked(s, state);
    *table = s->st.table;
    *accepting = s->st.accepting;
    pthread_mutex_unlock(&s->st.lock);
    return r;
}

/* ------------------------------------------------------------------------ chains */

/* A key's or literal's chain of blocks (chains.py `LiteralSource`): states are the laid-out
 * ids (element q < 2**32: block starts, first states, the final state) and the deeper states of
 * the blocks, met on first visit (element (block + 1) << 32 | local). A row is the block's
 * moves from its local state, its targets the next block's start, a first state (its id laid
 * out) or a deeper one (interned). Each block's data is one int32 array (`Block.c_data`):
 * size, width, rank[size] (a first state's rank, 0 otherwise), first[width - 1], move offsets
 * [size + 1], then (byte, target local) pairs; Python keeps the arrays alive. */
typedef struct {
    sg_states st;
    int32_t n_blocks;
    int32_t *spine;            /* n_blocks + 1: each block's start id, then the final state */
    const int32_t **blocks;
    int32_t row[256];
} sg_chain;

void sg_chain_free(sg_chain *c)
{
    if (!c) return;
    states_free(&c->st);
    free(c->spine);
    free((void *)c->blocks);
    free(c);
}

/* A chain over `n_blocks` blocks' data (kept alive by the caller); the spine from their widths. */
static sg_chain *chain_new(int32_t n_blocks, const int32_t *const *blocks, int64_t max_states)
{
    if (n_blocks < 1) return NULL;
    sg_chain *c = (sg_chain *)calloc(1, sizeof(sg_chain));
    if (!c) return NULL;
    c->spine = (int32_t *)malloc((size_t)(n_blocks + 1) * sizeof(int32_t));
    c->blocks = (const int32_t **)malloc((size_t)n_blocks * sizeof(int32_t *));
    if (!c->spine || !c->blocks || states_init(&c->st, max_states)) {
        sg_chain_free(c);
        return NULL;
    }
    c->n_blocks = n_blocks;
    c->spine[0] = 0;
    for (int32_t i = 0; i < n_blocks; i++) {
        c->blocks[i] = blocks[i];
        c->spine[i + 1] = c->spine[i] + blocks[i][1];
    }
    return c;
}

/* Creates the laid-out states from n_states on, up to `n` (ids are their elements): the count
 * created so far, or a negative code -SG_x (a budget check, a bigger table) to act on first. */
int64_t sg_chain_lay_out(sg_chain *c, int64_t n)
{
    pthread_mutex_lock(&c->st.lock);
    int64_t r = 0;
    int32_t final = c->spine[c->n_blocks];
    while (c->st.n_states < n) {
        int64_t q = c->st.n_states;
        int64_t sid = intern(&c->st, &q, 1, q == final);
        if (sid < 0) { r = sid; break; }
    }
    if (r == 0) r = c->st.n_states;
    pthread_mutex_unlock(&c->st.lock);
    return r;
}

/* Interns a deeper state's element (unpickling, the hand-over from Python): id or -1 - SG_x. */
int64_t sg_chain_intern(sg_chain *c, int64_t element)
{
    pthread_mutex_lock(&c->st.lock);
    int64_t r = intern(&c->st, &element, 1, 0);
    pthread_mutex_unlock(&c->st.lock);
    return r < 0 ? -1 + r : r;
}

static int chain_build_locked(sg_chain *c, int32_t state)
{
    sg_states *st = &c->st;
    if (state < 0 || state >= st->n_states) return SG_BAD_STATE;
    int32_t *out = st->table + (int64_t)state * 256;
    if (out[0] != -2) return SG_OK;  /* built already (the spine, or meanwhile) */
    int64_t e = st->elems[st->set_off[state]];
    int32_t final = c->spine[c->n_blocks], i, local;
    if (e < ((int64_t)1 << 32)) {
        int32_t q = (int32_t)e;
        if (q == final) {
            for (int b = 0; b < 256; b++) c->row[b] = -1;
            publish_byte_row(out, c->row);
            return SG_OK;
        }
        int32_t lo = 0, hi = c->n_blocks;  /* the last block start <= q */
        while (hi - lo > 1) {
            int32_t mid = (lo + hi) / 2;
            if (c->spine[mid] <= q) lo = mid; else hi = mid;
        }
        i = lo;
        const int32_t *d = c->blocks[i];
        int32_t size = d[0];
        local = q == c->spine[i] ? 0 : d[2 + size + (q - c->spine[i] - 1)];
    } else {
        i = (int32_t)((e >> 32) - 1);
        local = (int32_t)(e & 0xFFFFFFFF);
        if (i < 0 || i >= c->n_blocks) return SG_BAD_STATE;
    }
    const int32_t *d = c->blocks[i];
    int32_t size = d[0], width = d[1];
    const int32_t *rank = d + 2, *moves = d + 2 + size + (width - 1);
    const int32_t *pairs = moves + size + 1;
    for (int b = 0; b < 256; b++) c->row[b] = -1;
    for (int32_t m = moves[local]; m < moves[local + 1]; m++) {
        int32_t byte = pairs[2 * m], t = pairs[2 * m + 1], id;
        if (t == size) {
            id = c->spine[i + 1];
        } else if (rank[t]) {
            id = c->spine[i] + rank[t];
        } else {
            int64_t el = ((int64_t)(i + 1) << 32) | t;
            int64_t sid = intern(st, &el, 1, 0);
            if (sid < 0) return (int)-sid;
            id = (int32_t)sid;
            out = st->table + (int64_t)state * 256;  /* (unchanged: a grown table stops first) */
        }
        c->row[byte] = id;
    }
    publish_byte_row(out, c->row);
    return SG_OK;
}

/* Builds ``state``'s row: OK or a stop code (a bigger table, a budget check first). */
int sg_chain_build(sg_chain *c, int32_t state)
{
    pthread_mutex_lock(&c->st.lock);
    int r = chain_build_locked(c, state);
    pthread_mutex_unlock(&c->st.lock);
    return r;
}

/* The trie walk's and a union's entry (as sg_subset_walk_build). */
int sg_chain_walk_build(sg_chain *c, int32_t state, const int32_t **table,
                        const uint8_t **accepting)
{
    pthread_mutex_lock(&c->st.lock);
    int r = chain_build_locked(c, state);
    *table = c->st.table;
    *accepting = c->st.accepting;
    pthread_mutex_unlock(&c->st.lock);
    return r;
}

/* ------------------------------------------------------------------------ any context */

/* Installs bigger arrays: copies the states so far and switches. `clean`: the rows of `table`
 * that are -2 or built already (a grown table: 0, its rows past the copied states are not
 * filled — each is filled when its state is created, so unused capacity is never written). */
void sg_states_set_table(sg_states *s, int32_t *table, uint8_t *accepting, int64_t capacity,
                         int64_t clean)
{
    pthread_mutex_lock(&s->lock);
    if (s->table && s->n_states) {
        memcpy(table, s->table, (size_t)s->n_states * 256 * sizeof(int32_t));
        memcpy(accepting, s->accepting, (size_t)s->n_states);
    }
    s->table = table;
    s->accepting = accepting;
    s->capacity = capacity;
    s->clean = clean > s->n_states ? clean : s->n_states;
    pthread_mutex_unlock(&s->lock);
}

void sg_states_budget_checked(sg_states *s)
{
    pthread_mutex_lock(&s->lock);
    s->budget_checked = s->n_states;
    pthread_mutex_unlock(&s->lock);
}

/* The elements of `state` into out[0..cap); returns their number (-1: no such state). */
int64_t sg_states_key(sg_states *s, int32_t state, int64_t *out, int64_t cap)
{
    pthread_mutex_lock(&s->lock);
    int64_t r = -1;
    if (state >= 0 && state < s->n_states) {
        int64_t off = s->set_off[state];
        r = s->set_off[state + 1] - off;
        if (r <= cap) memcpy(out, s->elems + off, (size_t)r * sizeof(int64_t));
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* ------------------------------------------------------------------------ union */

/* A component's row builder in C (`sg_subset_walk_build`): builds the row and hands back the
 * current arrays (0), or asks for Python (nonzero). */
typedef int (*part_builder)(void *ctx, int32_t state, const int32_t **table,
                            const uint8_t **accepting);

typedef struct {
    const int32_t *table;     /* the component's arrays, as of the last refresh */
    const uint8_t *accepting;
    int64_t capacity;         /* their number of rows */
    part_builder build;       /* NULL: the component's rows come from Python */
    void *ctx;
    /* a chain of one-byte blocks not laid out yet (Python's automaton deferred): its `chain_m`
     * byte sets, 32 bytes each, from which `part_row` lays it out here (NULL: none, or done) */
    uint8_t *chain_bits;
    int32_t chain_m;
    int32_t *chain_table;     /* the chain's arrays laid out here (owned; NULL: none) */
    uint8_t *chain_acc;
} sg_part;

#define U_UNION 0
#define U_SEQUENCE 1
#define U_COUNTED 2
#define U_PRODUCT 3
/* A difference: component 0's language less the others' (`DifferenceSource`, dfa.py). A key
 * holds component 0 (else the text is dead) and the others still alive; it accepts where
 * component 0 does and no other. Component 0 is checked by Python to have an infinite future
 * from every state with a transition, so with finitely many other texts a state is dead only
 * where component 0 has no transition left and another component accepts. */
#define U_DIFFERENCE 4
/* Tuples a search visits breadth first before it asks for the components' distances: at most
 * GUIDE_AFTER, a quarter of the budget, at least GUIDE_MIN. The distances build each component
 * whole (~2 ms for a format's automaton); a breadth-first search of a few thousand tuples costs
 * less and mostly finds a witness (on 600 MaskBench schemas: 31 of 54 searches were guided with
 * 256, 0 with 4096; their time at compile 83 -> 44 ms). */
#define GUIDE_AFTER 4096
#define GUIDE_MIN 256

/* A set of fixed-width int32 tuples (a product's live and dead tuples, a search's visited
 * ones, in visiting order), open addressing over an arena. */
typedef struct {
    int32_t width;
    int32_t *tuples;
    int64_t n, cap;
    uint64_t *hash;
    int32_t *slots;
    int64_t n_slots;
} tset;

static uint64_t hash_tuple(const int32_t *x, int32_t w)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)w;
    for (int32_t k = 0; k < w; k++) {
        h ^= (uint64_t)(uint32_t)x[k];
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h;
}

static void tset_free(tset *t)
{
    free(t->tuples); free(t->hash); free(t->slots);
    memset(t, 0, sizeof *t);
}

static void tset_clear(tset *t)
{
    t->n = 0;
    if (t->slots) memset(t->slots, 0xFF, (size_t)t->n_slots * sizeof(int32_t));
}

/* The index of `x` in the set, or -1. */
static int64_t tset_find(const tset *t, const int32_t *x, uint64_t h)
{
    if (!t->n) return -1;
    uint64_t mask = (uint64_t)t->n_slots - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->hash[id] == h
            && !memcmp(t->tuples + (int64_t)id * t->width, x, (size_t)t->width * sizeof(int32_t)))
            return id;
    }
}

/* Adds `x` (not in the set): its index, or -1 out of memory. */
static int64_t tset_add(tset *t, const int32_t *x, uint64_t h)
{
    int32_t w = t->width;
    if (t->n >= t->cap) {
        int64_t c = t->cap ? t->cap * 2 : 64;
        int32_t *nt = (int32_t *)realloc(t->tuples, (size_t)(c * w) * sizeof(int32_t));
        if (!nt) return -1;
        t->tuples = nt;
        uint64_t *nh = (uint64_t *)realloc(t->hash, (size_t)c * sizeof(uint64_t));
        if (!nh) return -1;
        t->hash = nh;
        t->cap = c;
    }
    if ((t->n + 1) * 2 > t->n_slots) {
        int64_t ns = t->n_slots ? t->n_slots * 2 : 128;
        int32_t *sl = (int32_t *)malloc((size_t)ns * sizeof(int32_t));
        if (!sl) return -1;
        memset(sl, 0xFF, (size_t)ns * sizeof(int32_t));
        for (int64_t k = 0; k < t->n; k++) {
            uint64_t j = t->hash[k] & (uint64_t)(ns - 1);
            while (sl[j] >= 0) j = (j + 1) & (uint64_t)(ns - 1);
            sl[j] = (int32_t)k;
        }
        free(t->slots);
        t->slots = sl;
        t->n_slots = ns;
    }
    uint64_t mask = (uint64_t)t->n_slots - 1, i = h & mask;
    while (t->slots[i] >= 0) i = (i + 1) & mask;
    int64_t id = t->n++;
    memcpy(t->tuples + id * w, x, (size_t)w * sizeof(int32_t));
    t->hash[id] = h;
    t->slots[i] = (int32_t)id;
    return id;
}

#define BETWEEN_UNITS 0xFFFFFFFFll /* a counted key's unit state between two units */
#define SG_MAX_NEEDS 64          /* component rows one union row build reports missing */

typedef struct {
    sg_states st;
    int32_t n_parts;
    sg_part *parts;
    int32_t mode;             /* U_UNION, U_SEQUENCE, U_COUNTED, U_PRODUCT, U_DIFFERENCE */
    int32_t *starts;          /* per component: its start state (sequence, counted) */
    int64_t lo, hi;           /* counted: the bounds (hi -1: none) */
    uint8_t classes[256];
    uint8_t reps[256];        /* the smallest byte of each class */
    int32_t n_classes;
    int64_t need_part, need_state;  /* after SG_NEED_ROW: the row Python must build */
    /* ... and, after a row build, every component row its key lacked (a lexer's first row
     * lacks one per terminal: Python builds them all before the build is tried again) */
    int64_t needs[2 * SG_MAX_NEEDS];
    int32_t n_needs;
    int32_t *moves;           /* scratch: [n_classes][elements] component targets */
    int64_t moves_cap;
    int64_t *target;          /* scratch: a row's target key (`target_cap` elements) */
    int64_t target_cap;
    int64_t *base;            /* scratch: the key's components, `component << 32` */
    /* product: tuples known live or dead, a search's visited tuples and their parents, the
     * tuple Python must decide after SG_NEED_LIVE */
    tset live, dead, seen;
    int32_t *parent;
    uint8_t *hopeless;        /* per visited tuple: dead by the distances (not expanded) */
    int64_t *heap;            /* the guided search's frontier (see heap_push) */
    int64_t heap_n, heap_cap;
    int64_t parent_cap;
    int32_t guided;           /* the distances were asked for (and set where known) */
    int32_t **shortest, **longest;  /* per component, per state (see sg_union_set_distances) */
    int64_t *dist_n;
    int32_t *tuple;           /* scratch: a successor tuple (n_parts) */
    int32_t *need_tuple;      /* (n_parts) */
    const int32_t **rows;     /* scratch: the rows of a visited tuple's components */
    int32_t row[256];
    uint64_t memo_hash[256];
    int32_t memo_class[512];
} sg_union;

void sg_union_free(sg_union *u)
{
    if (!u) return;
    states_free(&u->st);
    free(u->moves); free(u->target); free(u->base); free(u->starts);
    tset_free(&u->live); tset_free(&u->dead); tset_free(&u->seen);
    free(u->parent); free(u->hopeless); free(u->heap);
    free(u->tuple); free(u->need_tuple); free(u->rows);
    if (u->shortest && u->longest)
        for (int32_t k = 0; k < u->n_parts; k++) { free(u->shortest[k]); free(u->longest[k]); }
    free(u->shortest); free(u->longest); free(u->dist_n);
    if (u->parts)
        for (int32_t k = 0; k < u->n_parts; k++) {
            free(u->parts[k].chain_bits); free(u->parts[k].chain_table); free(u->parts[k].chain_acc);
        }
    free(u->parts);
    free(u);
}

/* A union of `n_parts` (>= 1) components with the union's byte classes; the components' arrays
 * come with sg_union_set_part. */
sg_union *sg_union_new(int32_t n_parts, const uint8_t *classes, int64_t max_states)
{
    if (n_parts < 1) return NULL;
    sg_union *u = (sg_union *)calloc(1, sizeof(sg_union));
    if (!u) return NULL;
    u->parts = (sg_part *)calloc((size_t)n_parts, sizeof(sg_part));
    u->target = (int64_t *)malloc((size_t)n_parts * sizeof(int64_t));
    u->target_cap = n_parts;
    u->base = (int64_t *)malloc((size_t)n_parts * sizeof(int64_t));
    u->starts = (int32_t *)calloc((size_t)n_parts, sizeof(int32_t));
    u->tuple = (int32_t *)calloc((size_t)n_parts, sizeof(int32_t));
    u->need_tuple = (int32_t *)calloc((size_t)n_parts, sizeof(int32_t));
    u->rows = (const int32_t **)calloc((size_t)n_parts, sizeof(int32_t *));
    u->shortest = (int32_t **)calloc((size_t)n_parts, sizeof(int32_t *));
    u->longest = (int32_t **)calloc((size_t)n_parts, sizeof(int32_t *));
    u->dist_n = (int64_t *)calloc((size_t)n_parts, sizeof(int64_t));
    u->live.width = u->dead.width = u->seen.width = n_parts;
    if (!u->parts || !u->target || !u->base || !u->starts || !u->tuple || !u->need_tuple
        || !u->rows || !u->shortest || !u->longest || !u->dist_n
        || states_init(&u->st, max_states)) {
        sg_union_free(u);
        return NULL;
    }
    u->n_parts = n_parts;
    memcpy(u->classes, classes, 256);
    int32_t nc = 0;
    for (int b = 255; b >= 0; b--) {
        u->reps[classes[b]] = (uint8_t)b;
        if (classes[b] + 1 > nc) nc = classes[b] + 1;
    }
    u->n_classes = nc;
    return u;
}

/* Points component `i` at its current arrays (`capacity` rows) and C builder (NULL: Python
 * builds its rows). The arrays may go stale when the component grows: rows built since read as
 * -2 there (and states created since lie beyond `capacity`), so a stale view only ever asks
 * Python for a refresh; the C builder hands back the current arrays with each row. */
void sg_union_set_part(sg_union *u, int32_t i, const int32_t *table, const uint8_t *accepting,
                       int64_t capacity, part_builder build, void *ctx)
{
    pthread_mutex_lock(&u->st.lock);
    if (i >= 0 && i < u->n_parts) {
        sg_part *p = &u->parts[i];
        p->table = table; p->accepting = accepting; p->capacity = capacity;
        p->build = build; p->ctx = ctx;
    }
    pthread_mutex_unlock(&u->st.lock);
}

/* Component `i`'s arrays and builder from its five fields (table, accepting, capacity,
 * builder, context), the caller holding the lock or the only reference. */
static void sg_union_set_parts_from(sg_union *u, int32_t i, const int64_t *f)
{
    sg_part *p = &u->parts[i];
    free(p->chain_bits);  /* (Python's arrays from now on: a chain laid out there is the same) */
    p->chain_bits = NULL;
    p->table = (const int32_t *)(intptr_t)f[0];
    p->accepting = (const uint8_t *)(intptr_t)f[1];
    p->capacity = f[2];
    p->build = (part_builder)(intptr_t)f[3];
    p->ctx = (void *)(intptr_t)f[4];
}

/* sg_union_set_part for components 0..n-1 at once (a new context: one call, not one per
 * terminal): `parts` holds five int64 per component, the table's and accepting array's
 * addresses, the capacity, the C builder and its context (0: none). */
void sg_union_set_parts(sg_union *u, int32_t n, const int64_t *parts)
{
    pthread_mutex_lock(&u->st.lock);
    for (int32_t i = 0; i < n && i < u->n_parts; i++)
        sg_union_set_parts_from(u, i, parts + (size_t)i * 5);
    pthread_mutex_unlock(&u->st.lock);
}

/* A union state's accepting components (a grammar lexer asks which terminals may end a lexeme
 * there): their indices into out[0..cap), ascending; returns their number, or -1 (no such
 * state, not a union, out too small, or a Python-built component's arrays are stale: Python
 * answers from the key). */
int64_t sg_union_accepted(sg_union *u, int32_t state, int64_t *out, int64_t cap)
{
    int64_t r = -1;
    pthread_mutex_lock(&u->st.lock);
    sg_states *s = &u->st;
    if (u->mode == U_UNION && state >= 0 && state < s->n_states) {
        int64_t off = s->set_off[state], end = s->set_off[state + 1];
        r = 0;
        for (int64_t k = off; k < end; k++) {
            int64_t i = s->elems[k] >> 32, q = s->elems[k] & 0xFFFFFFFF;
            const sg_part *p = &u->parts[i];
            /* (a component with a C builder: its arrays are the ones its last build handed
             * back, which made every state a row of it led to; its capacity is Python's old
             * count, and a key past it had sent every such query to Python) */
            if ((p->build == NULL && q >= p->capacity) || r >= cap) { r = -1; break; }
            if (p->accepting[q]) out[r++] = i;
        }
    }
    pthread_mutex_unlock(&u->st.lock);
    return r;
}

/* After SG_NEED_ROW: out[0] = the component, out[1] = its state whose row Python must build. */
void sg_union_need(sg_union *u, int64_t *out)
{
    out[0] = u->need_part;
    out[1] = u->need_state;
}

/* After SG_NEED_ROW: the component rows Python must build, as (component, state) pairs into
 * out[0..2*cap): every one a row build found missing (`union_build_locked` goes through its
 * whole key), else the one `sg_union_need` names. Returns the number of pairs. */
int64_t sg_union_needs(sg_union *u, int64_t *out, int64_t cap)
{
    pthread_mutex_lock(&u->st.lock);
    int64_t n = 0;
    if (u->n_needs > 0) {  /* (reset by every build and query: only this stop's key's rows) */
        for (; n < u->n_needs && n < cap; n++) {
            out[2 * n] = u->needs[2 * n];
            out[2 * n + 1] = u->needs[2 * n + 1];
        }
    } else if (cap > 0) {
        out[0] = u->need_part;
        out[1] = u->need_state;
        n = 1;
    }
    pthread_mutex_unlock(&u->st.lock);
    return n;
}

/* Makes the context a sequence, a counted repetition or a product (before any state is
 * interned): `starts` holds each component's start state; a counted repetition has one
 * component (the unit) and the bounds `lo`, `hi` (-1: unbounded). 0, or -1 for a bad mode. */
int sg_union_set_mode(sg_union *u, int32_t mode, const int32_t *starts, int64_t lo, int64_t hi)
{
    if (mode < U_UNION || mode > U_DIFFERENCE || (mode == U_COUNTED && u->n_parts != 1)) return -1;
    pthread_mutex_lock(&u->st.lock);
    u->mode = mode;
    memcpy(u->starts, starts, (size_t)u->n_parts * sizeof(int32_t));
    u->lo = lo;
    u->hi = hi;
    pthread_mutex_unlock(&u->st.lock);
    return 0;
}

static uint8_t union_accepting(sg_union *u, const int64_t *a, int64_t n)
{
    if (u->mode == U_COUNTED) {
        int64_t k = a[0] >> 32;
        return (a[0] & 0xFFFFFFFF) == BETWEEN_UNITS && k >= u->lo && (u->hi < 0 || k <= u->hi);
    }
    if (u->mode == U_PRODUCT) {
        if (n != u->n_parts) return 0;
        for (int64_t k = 0; k < n; k++)
            if (!u->parts[k].accepting[a[k] & 0xFFFFFFFF]) return 0;
        return 1;
    }
    if (u->mode == U_SEQUENCE) {
        int64_t last = u->n_parts - 1;
        for (int64_t k = n - 1; k >= 0 && a[k] >> 32 == last; k--)  /* (sorted: last ones last) */
            if (u->parts[last].accepting[a[k] & 0xFFFFFFFF]) return 1;
        return 0;
    }
    if (u->mode == U_DIFFERENCE) {  /* (sorted: component 0 first, when present) */
        if (n < 1 || a[0] >> 32 != 0 || !u->parts[0].accepting[a[0] & 0xFFFFFFFF]) return 0;
        for (int64_t k = 1; k < n; k++)
            if (u->parts[a[k] >> 32].accepting[a[k] & 0xFFFFFFFF]) return 0;
        return 1;
    }
    for (int64_t k = 0; k < n; k++)
        if (u->parts[a[k] >> 32].accepting[a[k] & 0xFFFFFFFF]) return 1;
    return 0;
}

/* Whether a key from Python names states the components have: a union's one per live
 * component, a sequence's any number, a counted repetition's one (count, unit state). */
static int key_valid(sg_union *u, const int64_t *a, int64_t n)
{
    if (n <= 0 || ((u->mode == U_UNION || u->mode == U_DIFFERENCE) && n > u->n_parts)
        || (u->mode == U_COUNTED && n != 1) || (u->mode == U_PRODUCT && n != u->n_parts)
        || (u->mode == U_DIFFERENCE && a[0] >> 32 != 0))
        return 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = a[k] >> 32, s = a[k] & 0xFFFFFFFF;
        if (u->mode == U_COUNTED) {
            if (i < 0 || (s != BETWEEN_UNITS && s >= u->parts[0].capacity)) return 0;
        } else if (i < 0 || i >= u->n_parts || s >= u->parts[i].capacity) {
            return 0;
        } else if (u->mode == U_PRODUCT && i != k) {
            return 0;
        }
    }
    return 1;
}

/* Creates the state of a sorted, unique, non-empty element set (the start state, unpickling):
 * its id or -1 - SG_x. The components' arrays must be set. */
int64_t sg_union_intern(sg_union *u, const int64_t *a, int64_t n)
{
    pthread_mutex_lock(&u->st.lock);
    int64_t r = -SG_BAD_STATE;
    if (key_valid(u, a, n)) r = intern(&u->st, a, n, union_accepting(u, a, n));
    pthread_mutex_unlock(&u->st.lock);
    return r < 0 ? -1 + r : r;
}

/* Row `k` of a chain of one-byte blocks: each byte of the set `bits` (32 bytes) moves to state
 * k + 1, the others are dead; returns whether the set has a byte. The rows `byte_chain_arrays`
 * lays out for Python and `lay_out_chain` for a union's context. */
static int chain_row(int32_t *row, const uint8_t *bits, int32_t k)
{
    int any = 0;
    for (int b = 0; b < 256; b++) {
        int on = (bits[b >> 3] >> (b & 7)) & 1;
        row[b] = on ? k + 1 : -1;
        any |= on;
    }
    return any;
}

/* Lays out component `p`'s pending byte chain (`chain_bits`) here: state k reads byte set k to
 * k + 1, the last state accepts and reads nothing (the rows `byte_chain_arrays` makes, which
 * Python's automaton would make on its first row); the component's arrays become these.
 * 0, or -1 out of memory (then Python builds it). A lexer's first row meets every literal
 * terminal expected there: each laid out in Python was a round trip of a dozen calls. */
static int lay_out_chain(sg_part *p)
{
    int32_t m = p->chain_m, n = m + 1;
    int32_t *table = (int32_t *)malloc((size_t)n * 256 * sizeof(int32_t));
    uint8_t *acc = (uint8_t *)calloc((size_t)n, 1);
    if (!table || !acc) {
        free(table);
        free(acc);
        return -1;
    }
    for (int32_t k = 0; k < m; k++)
        chain_row(table + (size_t)k * 256, p->chain_bits + (size_t)k * 32, k);
    for (int b = 0; b < 256; b++)
        table[(size_t)m * 256 + b] = -1;
    acc[m] = 1;
    free(p->chain_bits);
    p->chain_bits = NULL;
    p->chain_table = table;
    p->chain_acc = acc;
    p->table = table;
    p->accepting = acc;
    p->capacity = n;
    p->build = NULL;
    p->ctx = NULL;
    return 0;
}

/* Component `i`'s row of state `s` (built by its C builder first), or NULL after setting the
 * need (Python must build it, or refresh a stale view). */
static const int32_t *part_row(sg_union *u, int32_t i, int32_t s)
{
    sg_part *p = &u->parts[i];
    if (p->chain_bits && lay_out_chain(p) < 0) {
        u->need_part = i;  /* (no memory here: Python lays it out) */
        u->need_state = s;
        return NULL;
    }
    if (p->build ? p->build(p->ctx, s, &p->table, &p->accepting) != 0 : s >= p->capacity) {
        u->need_part = i;  /* its C builder stopped (e.g. a bigger table first), or the */
        u->need_state = s; /* Python-built component's view is stale */
        return NULL;
    }
    return p->table + (int64_t)s * 256;
}

/* `part_row`, with the targets of every class there too (a row Python builds may still be
 * missing from a stale view): NULL after setting the need. */
static const int32_t *built_part_row(sg_union *u, int32_t i, int32_t s)
{
    const int32_t *prow = part_row(u, i, s);
    if (!prow) return NULL;
    for (int32_t c = 0; c < u->n_classes; c++)
        if (prow[u->reps[c]] == -2) {
            u->need_part = i;
            u->need_state = s;
            return NULL;
        }
    return prow;
}

/* A counted repetition's row (`CountedSource.expand`): from (count k, unit state q) each byte
 * moves the unit; a unit that completes counts one more (capped at `lo` when unbounded) and
 * stands between units, where the next one starts unless `hi` were passed. */
static int counted_build_locked(sg_union *u, int32_t *out, int64_t e)
{
    int64_t k = e >> 32, q = e & 0xFFFFFFFF;
    int32_t nc = u->n_classes;
    if (q == BETWEEN_UNITS) {
        if (u->hi >= 0 && k >= u->hi) {
            for (int32_t c = 0; c < nc; c++) u->row[c] = -1;
            publish_row(out, u->row, u->classes);
            return SG_OK;
        }
        q = u->starts[0];
    }
    const int32_t *prow = built_part_row(u, 0, (int32_t)q);
    if (!prow) return SG_NEED_ROW;
    const uint8_t *acc = u->parts[0].accepting;
    int64_t done = k + 1;
    if (u->hi < 0 && done > u->lo) done = u->lo;  /* (unbounded: counts past lo are alike) */
    int32_t last_t = -3, last_id = -1;
    for (int32_t c = 0; c < nc; c++) {
        int32_t t = prow[u->reps[c]];
        if (t < 0) { u->row[c] = -1; continue; }
        if (t == last_t) { u->row[c] = last_id; continue; }  /* (runs of classes agree) */
        int64_t target = acc[t] ? (done << 32 | BETWEEN_UNITS) : (k << 32 | t);
        int64_t sid = intern(&u->st, &target, 1, union_accepting(u, &target, 1));
        if (sid < 0) return (int)-sid;
        last_t = t;
        last_id = (int32_t)sid;
        u->row[c] = last_id;
    }
    publish_row(out, u->row, u->classes);
    return SG_OK;
}

static int tuple_accepting(sg_union *u, const int32_t *x)
{
    for (int32_t k = 0; k < u->n_parts; k++)
        if (!u->parts[k].accepting[x[k]]) return 0;
    return 1;
}

/* Whether the components' distances prove `x` dead (`ProductSource._guide_unless_hopeless`):
 * some component needs a longer continuation than another can still accept. */
static int tuple_hopeless(sg_union *u, const int32_t *x)
{
    int32_t need = 0, room = -1;
    for (int32_t k = 0; k < u->n_parts; k++) {
        if (x[k] >= u->dist_n[k]) continue;  /* (no distances for this state: no bound) */
        int32_t shortest = u->shortest[k][x[k]], longest = u->longest[k][x[k]];
        if (shortest > need) need = shortest;
        if (longest >= 0 && (room < 0 || longest < room)) room = longest;
    }
    return room >= 0 && room < need;
}

/* After SG_NEED_GUIDE: component `part`'s distances to acceptance for its states 0..n-1, the
 * shortest continuation and the longest (-1: unbounded, or not known); a component without
 * them (n = 0) bounds nothing. 0, or -1 out of memory. */
int sg_union_set_distances(sg_union *u, int32_t part, const int32_t *shortest,
                           const int32_t *longest, int64_t n)
{
    if (part < 0 || part >= u->n_parts) return -1;
    pthread_mutex_lock(&u->st.lock);
    int r = 0;
    free(u->shortest[part]);
    free(u->longest[part]);
    u->shortest[part] = u->longest[part] = NULL;
    u->dist_n[part] = 0;
    if (n > 0) {
        u->shortest[part] = (int32_t *)malloc((size_t)n * sizeof(int32_t));
        u->longest[part] = (int32_t *)malloc((size_t)n * sizeof(int32_t));
        if (!u->shortest[part] || !u->longest[part]) {
            r = -1;
        } else {
            memcpy(u->shortest[part], shortest, (size_t)n * sizeof(int32_t));
            memcpy(u->longest[part], longest, (size_t)n * sizeof(int32_t));
            u->dist_n[part] = n;
        }
    }
    u->guided = 1;
    pthread_mutex_unlock(&u->st.lock);
    return r;
}

/* How much is left to do from `x`, for the guided search's order. */
static int tuple_rank(sg_union *u, const int32_t *x)
{
    int64_t total = 0;  /* (`ProductSource._guide`: the components' distances summed) */
    for (int32_t k = 0; k < u->n_parts; k++)
        if (x[k] < u->dist_n[k] && u->shortest[k][x[k]] > 0) total += u->shortest[k][x[k]];
    return total > 0x7FFFFFFF ? 0x7FFFFFFF : (int)total;
}

/* The search's frontier once guided: a binary min-heap of `rank << 32 | ~id` (least left to
 * do first, newest first among equals, as `ProductSource.decide`). */
static int heap_push(sg_union *u, int64_t key)
{
    if (u->heap_n >= u->heap_cap) {
        int64_t cap = u->heap_cap ? u->heap_cap * 2 : 256;
        int64_t *nh = (int64_t *)realloc(u->heap, (size_t)cap * sizeof(int64_t));
        if (!nh) return -1;
        u->heap = nh;
        u->heap_cap = cap;
    }
    int64_t i = u->heap_n++;
    while (i > 0 && u->heap[(i - 1) / 2] > key) {
        u->heap[i] = u->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    u->heap[i] = key;
    return 0;
}

static int64_t heap_pop(sg_union *u)
{
    int64_t top = u->heap[0], last = u->heap[--u->heap_n], i = 0, n = u->heap_n;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && u->heap[c + 1] < u->heap[c]) c++;
        if (u->heap[c] >= last) break;
        u->heap[i] = u->heap[c];
        i = c;
    }
    if (n) u->heap[i] = last;
    return top;
}

/* Whether the product tuple `x` reaches a tuple of accepting states (`ProductSource.decide`):
 * 1 or 0, remembered; or -SG_NEED_ROW (a component row first), -SG_NEED_GUIDE (after
 * `guide_after` tuples breadth first: the components' distances, then the search starts again
 * guided by them), -SG_SEARCH_LIMIT (more than `max_states` tuples, guided),
 * -SG_NEED_LIVE (more than `max_states` tuples before the distances, a budget under
 * `guide_after`: Python's search decides, or raises the limit; `sg_union_need_tuple`),
 * -SG_NOMEM. A live tuple found marks its path live, an exhausted search marks every tuple it
 * visited dead (none of them reaches acceptance); guided, a tuple the distances prove dead is
 * not expanded. */
static int product_live(sg_union *u, const int32_t *x)
{
    int32_t w = u->n_parts;
    uint64_t h = hash_tuple(x, w);
    if (tset_find(&u->live, x, h) >= 0) return 1;
    if (tset_find(&u->dead, x, h) >= 0) return 0;
    if (tuple_accepting(u, x)) return tset_add(&u->live, x, h) < 0 ? -SG_NOMEM : 1;
    tset *seen = &u->seen;
    tset_clear(seen);
    if (tset_add(seen, x, h) < 0) return -SG_NOMEM;
    if (!u->parent_cap) {
        u->parent = (int32_t *)malloc(256 * sizeof(int32_t));
        u->hopeless = (uint8_t *)malloc(256);
        if (!u->parent || !u->hopeless) return -SG_NOMEM;
        u->parent_cap = 256;
    }
    u->hopeless[0] = 0;
    int guided = u->guided;
    int64_t limit = u->st.max_states;
    int64_t guide_after = limit / 4 > GUIDE_AFTER ? GUIDE_AFTER : limit / 4;
    if (guide_after < GUIDE_MIN) guide_after = GUIDE_MIN;
    u->heap_n = 0;
    if (guided && heap_push(u, (int64_t)tuple_rank(u, x) << 32 | 0xFFFFFFFFll) < 0)
        return -SG_NOMEM;
    int64_t found = -1, next = 0;
    while (found < 0) {
        int64_t head;
        if (guided) {
            if (!u->heap_n) break;
            head = 0xFFFFFFFFll - (heap_pop(u) & 0xFFFFFFFFll);
        } else {
            if (next >= seen->n) break;
            head = next++;
        }
        if (seen->n > limit) {
            if (guided) return -SG_SEARCH_LIMIT;  /* (the same search as Python's: its limit) */
            /* Python's search decides (past the budget it raises the limit); x is the first
             * tuple visited (the caller's x may be the scratch this search overwrote) */
            memcpy(u->need_tuple, seen->tuples, (size_t)w * sizeof(int32_t));
            return -SG_NEED_LIVE;
        }
        if (!guided && seen->n > guide_after) {
            memcpy(u->need_tuple, seen->tuples, (size_t)w * sizeof(int32_t));
            return -SG_NEED_GUIDE;  /* (the search starts again with the distances) */
        }
        if (u->hopeless[head]) continue;  /* (dead, shown by the distances: not expanded) */
        for (int32_t k = 0; k < w; k++) {
            u->rows[k] = built_part_row(u, k, seen->tuples[head * w + k]);
            if (!u->rows[k]) return -SG_NEED_ROW;
        }
        for (int32_t c = 0; c < u->n_classes && found < 0; c++) {
            int32_t k = 0;
            for (; k < w; k++) {
                int32_t t = u->rows[k][u->reps[c]];
                if (t < 0) break;
                u->tuple[k] = t;
            }
            if (k < w) continue;
            uint64_t ht = hash_tuple(u->tuple, w);
            if (tset_find(seen, u->tuple, ht) >= 0 || tset_find(&u->dead, u->tuple, ht) >= 0)
                continue;
            int64_t id = tset_add(seen, u->tuple, ht);
            if (id < 0) return -SG_NOMEM;
            if (id >= u->parent_cap) {
                int64_t cap = u->parent_cap * 2;
                while (cap <= id) cap *= 2;
                int32_t *np = (int32_t *)realloc(u->parent, (size_t)cap * sizeof(int32_t));
                if (!np) return -SG_NOMEM;
                u->parent = np;
                uint8_t *nh = (uint8_t *)realloc(u->hopeless, (size_t)cap);
                if (!nh) return -SG_NOMEM;
                u->hopeless = nh;
                u->parent_cap = cap;
            }
            u->parent[id] = (int32_t)head;
            u->hopeless[id] = 0;
            if (tset_find(&u->live, u->tuple, ht) >= 0 || tuple_accepting(u, u->tuple)) {
                found = id;
            } else if (guided) {
                u->hopeless[id] = (uint8_t)tuple_hopeless(u, u->tuple);
                if (!u->hopeless[id]
                    && heap_push(u, (int64_t)tuple_rank(u, u->tuple) << 32
                                        | (0xFFFFFFFFll - id)) < 0)
                    return -SG_NOMEM;
            }
        }
    }
    if (found >= 0) {  /* the path from x to the live tuple is live */
        for (int64_t j = found; j >= 0; j = j ? u->parent[j] : -1) {
            const int32_t *t = seen->tuples + j * w;
            if (tset_find(&u->live, t, seen->hash[j]) < 0
                && tset_add(&u->live, t, seen->hash[j]) < 0)
                return -SG_NOMEM;
        }
        return 1;
    }
    for (int64_t j = 0; j < seen->n; j++)
        if (tset_add(&u->dead, seen->tuples + j * w, seen->hash[j]) < 0) return -SG_NOMEM;
    return 0;
}

/* Whether the product tuple `x` is live (`product_live`, under the lock): 1, 0, or -code
 * (SG_NEED_ROW, SG_NEED_LIVE: act as for a row build, then ask again). */
int sg_union_live(sg_union *u, const int32_t *x)
{
    pthread_mutex_lock(&u->st.lock);
    u->n_needs = 0;
    int r = u->mode == U_PRODUCT ? product_live(u, x) : -SG_BAD_STATE;
    pthread_mutex_unlock(&u->st.lock);
    return r;
}

static int64_t tset_bytes(const tset *t)
{
    return t->cap * ((int64_t)t->width * 4 + 8) + t->n_slots * 4;
}

/* The bytes a product's liveness memo and search scratch hold (for cache budgets). */
int64_t sg_union_search_bytes(sg_union *u)
{
    pthread_mutex_lock(&u->st.lock);
    int64_t total = tset_bytes(&u->live) + tset_bytes(&u->dead) + tset_bytes(&u->seen);
    total += u->parent_cap * 5 + u->heap_cap * 8;
    for (int32_t k = 0; k < u->n_parts; k++) total += u->dist_n[k] * 8;
    pthread_mutex_unlock(&u->st.lock);
    return total;
}

/* After SG_NEED_LIVE: the tuple Python must decide (n_parts states). */
void sg_union_need_tuple(sg_union *u, int32_t *out)
{
    memcpy(out, u->need_tuple, (size_t)u->n_parts * sizeof(int32_t));
}

/* Python's verdict (after SG_NEED_LIVE) on `n` tuples `x` (n_parts states each): remembered
 * as all live or all dead. 0, or -1 out of memory. */
int sg_union_set_live(sg_union *u, const int32_t *x, int64_t n, int32_t live)
{
    pthread_mutex_lock(&u->st.lock);
    tset *t = live ? &u->live : &u->dead;
    int r = 0;
    for (int64_t k = 0; k < n && !r; k++) {
        const int32_t *y = x + k * u->n_parts;
        uint64_t h = hash_tuple(y, u->n_parts);
        if (tset_find(t, y, h) < 0 && tset_add(t, y, h) < 0) r = -1;
    }
    pthread_mutex_unlock(&u->st.lock);
    return r;
}

/* A sequence's target closed under "component i accepts: component i + 1 starts" (the moved
 * states are distinct; each start is added once), sorted: its new length. */
static int64_t sequence_close(sg_union *u, int64_t n)
{
    int64_t last = u->n_parts - 1;
    for (int64_t j = 0; j < n; j++) {
        int64_t i = u->target[j] >> 32, s = u->target[j] & 0xFFFFFFFF;
        if (i >= last || !u->parts[i].accepting[s]) continue;
        int64_t e = (i + 1) << 32 | u->starts[i + 1];
        int64_t m = 0;
        while (m < n && u->target[m] != e) m++;
        if (m == n) u->target[n++] = e;
    }
    return sort_unique(u->target, n);
}

static int union_build_locked(sg_union *u, int32_t state)
{
    sg_states *st = &u->st;
    u->n_needs = 0;
    if (state < 0 || state >= st->n_states) return SG_BAD_STATE;
    int32_t *out = st->table + (int64_t)state * 256;
    if (out[0] != -2) return SG_OK;  /* built meanwhile */
    const int64_t *key = st->elems + st->set_off[state];
    int64_t klen = st->set_off[state + 1] - st->set_off[state];
    if (u->mode == U_COUNTED) return counted_build_locked(u, out, key[0]);
    int32_t nc = u->n_classes;
    int64_t need = u->mode == U_SEQUENCE ? klen + u->n_parts : klen;
    if (need > u->target_cap) {  /* (a sequence's key may hold several states of a component) */
        int64_t *t = (int64_t *)realloc(u->target, (size_t)need * sizeof(int64_t));
        if (!t) return SG_NOMEM;
        u->target = t;
        u->target_cap = need;
    }
    if (klen > u->n_parts) {
        int64_t *b = (int64_t *)realloc(u->base, (size_t)klen * sizeof(int64_t));
        if (!b) return SG_NOMEM;
        u->base = b;
    }
    if (klen * nc > u->moves_cap) {
        int32_t *m = (int32_t *)realloc(u->moves, (size_t)(klen * nc) * sizeof(int32_t));
        if (!m) return SG_NOMEM;
        u->moves = m;
        u->moves_cap = klen * nc;
    }
    /* each component's moves on the class representatives (its row built first); the key is
     * read only here, because interning may move the arena */
    int64_t missing = 0;  /* (each component row missing is noted: all are asked for at once) */
    for (int64_t k = 0; k < klen; k++) {
        int32_t i = (int32_t)(key[k] >> 32), s = (int32_t)(key[k] & 0xFFFFFFFF);
        u->base[k] = (int64_t)i << 32;
        const int32_t *prow = part_row(u, i, s);
        int32_t *col = u->moves + k;
        for (int32_t c = 0; prow && c < nc; c++) {
            int32_t t = prow[u->reps[c]];
            if (t == -2) prow = NULL;
            col[(int64_t)c * klen] = t;
        }
        if (!prow) {
            if (!missing) {
                u->need_part = i;
                u->need_state = s;
            }
            missing++;
            if (u->n_needs < SG_MAX_NEEDS) {
                u->needs[2 * u->n_needs] = i;
                u->needs[2 * u->n_needs + 1] = s;
                u->n_needs++;
            }
        }
    }
    if (missing) return SG_NEED_ROW;
    /* a difference's text is dead without component 0 (read now: interning moves the key) */
    const int lost = u->mode == U_DIFFERENCE && key[0] >> 32 != 0;
    /* per class: the moved components (classes that move them all alike share the target) */
    memset(u->memo_class, 0xFF, sizeof u->memo_class);
    for (int32_t c = 0; c < nc; c++) {
        const int32_t *mv = u->moves + (int64_t)c * klen;
        uint64_t h = 0x9E3779B97F4A7C15ull;
        for (int64_t k = 0; k < klen; k++) {
            h ^= (uint64_t)(uint32_t)mv[k];
            h *= 0xFF51AFD7ED558CCDull;
            h ^= h >> 32;
        }
        uint32_t j = (uint32_t)(h & 511);
        int32_t found = -1;
        for (; u->memo_class[j] >= 0; j = (j + 1) & 511) {
            int32_t d = u->memo_class[j];
            if (u->memo_hash[d] == h
                && !memcmp(u->moves + (int64_t)d * klen, mv, (size_t)klen * sizeof(int32_t))) {
                found = d;
                break;
            }
        }
        if (found >= 0) { u->row[c] = u->row[found]; continue; }
        u->memo_hash[c] = h;
        u->memo_class[j] = c;
        int64_t n = 0;
        for (int64_t k = 0; k < klen; k++)
            if (mv[k] >= 0) u->target[n++] = u->base[k] | mv[k];
        if (n == 0) { u->row[c] = -1; continue; }
        if (u->mode == U_SEQUENCE) n = sequence_close(u, n);
        if (u->mode == U_DIFFERENCE) {  /* component 0 moves; and where it has no move left, */
            if (lost || mv[0] < 0) { u->row[c] = -1; continue; }
            int other = 0;              /* the text must not be another component's */
            for (int64_t j = 1; j < n && !other; j++) {
                int64_t i = u->target[j] >> 32, t = u->target[j] & 0xFFFFFFFF;
                other = u->parts[i].accepting[t];
            }
            if (other) {
                const int32_t *first = built_part_row(u, 0, mv[0]);
                if (!first) return SG_NEED_ROW;
                int moves = 0;
                for (int32_t d = 0; d < nc && !moves; d++) moves = first[u->reps[d]] >= 0;
                if (!moves) { u->row[c] = -1; continue; }
            }
        }
        if (u->mode == U_PRODUCT) {  /* every component moves, and the tuple is live */
            if (n < klen) { u->row[c] = -1; continue; }
            for (int64_t k = 0; k < klen; k++) u->tuple[k] = mv[k];
            int live = product_live(u, u->tuple);
            if (live < 0) return -live;
            if (!live) { u->row[c] = -1; continue; }
        }
        int64_t sid = intern(st, u->target, n, union_accepting(u, u->target, n));
        if (sid < 0) return (int)-sid;
        u->row[c] = (int32_t)sid;
    }
    publish_row(out, u->row, u->classes);
    return SG_OK;
}

/* Builds the row of `state`: the codes of sg_subset_build, and SG_NEED_ROW (build the component
 * row sg_union_need names, refresh that component with sg_union_set_part, then call again). */
int sg_union_build(sg_union *u, int32_t state)
{
    pthread_mutex_lock(&u->st.lock);
    int r = union_build_locked(u, state);
    pthread_mutex_unlock(&u->st.lock);
    return r;
}

/* The trie walk's entry, as sg_subset_walk_build. */
int sg_union_walk_build(sg_union *u, int32_t state, const int32_t **table,
                        const uint8_t **accepting)
{
    pthread_mutex_lock(&u->st.lock);
    int r = union_build_locked(u, state);
    *table = u->st.table;
    *accepting = u->st.accepting;
    pthread_mutex_unlock(&u->st.lock);
    return r;
}

/* addresses(*arrays): the data address of each C-contiguous buffer (numpy arrays), as ints:
 * what `array.ctypes.data` gives for the ctypes calls above, at a fraction of its cost (an NFA
 * build passes a dozen arrays, a compile builds dozens of NFAs). */
static PyObject *addresses(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(args[i], &view, PyBUF_C_CONTIGUOUS) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *address = PyLong_FromVoidPtr(view.buf);
        PyBuffer_Release(&view);
        if (address == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, address);
    }
    return out;
}

/* Takes the buffers of three arguments, C-contiguous, the first writable (the output of the
 * packed-mask helpers below); on failure releases those taken and returns -1. */
static int three_buffers(PyObject *const *args, Py_buffer views[3])
{
    for (int i = 0; i < 3; i++) {
        int flags = PyBUF_C_CONTIGUOUS | (i == 0 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(args[i], &views[i], flags) < 0) {
            while (i--)
                PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static void release_three(Py_buffer views[3])
{
    for (int i = 0; i < 3; i++)
        PyBuffer_Release(&views[i]);
}

/* or_words(words, indices, values): words[indices[k]] |= values[k] for every k (uint32 words,
 * int64 indices, uint32 values; bounds checked). A mask's first visit ORs in the cached sparse
 * results of each continued walk, a few words each: numpy's fancy indexing (a gather, an OR and
 * a scatter) cost several times the work. */
static PyObject *or_words(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "or_words takes words, indices and values");
        return NULL;
    }
    Py_buffer views[3];
    if (three_buffers(args, views) < 0)
        return NULL;
    Py_buffer words = views[0], idx = views[1], val = views[2];
    Py_ssize_t m = idx.len / (Py_ssize_t)sizeof(int64_t), size = words.len / 4;
    const int64_t *at = (const int64_t *)idx.buf;
    const uint32_t *v = (const uint32_t *)val.buf;
    uint32_t *w = (uint32_t *)words.buf;
    int bad = idx.len % 8 || words.len % 4 || val.len != m * 4;
    for (Py_ssize_t k = 0; !bad && k < m; k++)
        bad = at[k] < 0 || at[k] >= size;
    if (!bad)
        for (Py_ssize_t k = 0; k < m; k++)
            w[at[k]] |= v[k];
    release_three(views);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "or_words: indices out of range or sizes differ");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* first_byte_dead(row, by_byte, out): `out` (int32 words) = the text tokens whose first byte
 * has no transition in `row` (256 int32, -1 dead): the OR of `by_byte`'s rows (int32
 * [257, words]: row b the text tokens starting with byte b, row 256 all of them) of the dead
 * bytes, or when fewer bytes live than die, row 256 less the OR of the live bytes' rows
 * (_walker.py, `first_byte_dead`, whose five numpy calls cost ~60 us together on a first
 * visit's cold caches: the rows OR'd are few, the set-up per call was the cost). */
static PyObject *first_byte_dead(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "first_byte_dead takes row, by_byte and out");
        return NULL;
    }
    /* (the output first: `three_buffers` takes the first argument writable) */
    PyObject *const order[3] = {args[2], args[0], args[1]};
    Py_buffer views[3];
    if (three_buffers(order, views) < 0)
        return NULL;
    Py_buffer out = views[0], row = views[1], table = views[2];
    Py_ssize_t words = out.len / 4;
    int bad = row.len != 256 * 4 || out.len % 4 || table.len != 257 * out.len;
    if (!bad) {
        const int32_t *r = (const int32_t *)row.buf;
        const uint32_t *t = (const uint32_t *)table.buf;
        uint32_t *o = (uint32_t *)out.buf;
        int live = 0;
        for (int b = 0; b < 256; b++)
            live += r[b] >= 0;
        int take_live = live < 128; /* OR the smaller side's rows */
        memset(o, 0, (size_t)words * 4);
        for (int b = 0; b < 256; b++) {
            if ((r[b] >= 0) != take_live)
                continue;
            const uint32_t *src = t + (size_t)b * (size_t)words;
            for (Py_ssize_t i = 0; i < words; i++)
                o[i] |= src[i];
        }
        if (take_live) {
            const uint32_t *all = t + (size_t)256 * (size_t)words;
            for (Py_ssize_t i = 0; i < words; i++)
                o[i] = all[i] & ~o[i];
        }
    }
    release_three(views);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "first_byte_dead: sizes differ");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* or_and(out, a, b): out |= a & b, over 32-bit words (three buffers of one size). A lexeme that
 * may end adds the next lexeme's tokens whose first byte cannot extend it: two numpy calls and
 * a temporary per first visit before. */
static PyObject *or_and(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "or_and takes out, a and b");
        return NULL;
    }
    Py_buffer views[3];
    if (three_buffers(args, views) < 0)
        return NULL;
    Py_buffer out = views[0], a = views[1], b = views[2];
    int bad = out.len % 4 || a.len != out.len || b.len != out.len;
    if (!bad) {
        uint32_t *o = (uint32_t *)out.buf;
        const uint32_t *x = (const uint32_t *)a.buf, *y = (const uint32_t *)b.buf;
        for (Py_ssize_t i = 0, m = out.len / 4; i < m; i++)
            o[i] |= x[i] & y[i];
    }
    release_three(views);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "or_and: sizes differ");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* byte_classes(ranges): bytes(256), the coarsest partition of the bytes in which each (lo, hi)
 * pair of the iterable `ranges` is a union of classes, classes numbered in order of their
 * smallest byte (dfa.py, `byte_classes_from_ranges`, whose numpy path it replaces: a terminal's
 * NFA reads dozens of ranges, and numpy's set-up per call costs more than the work). Two bytes
 * share a class iff every range holds both or neither: each byte's membership is a bitset over
 * the ranges, compared only where a range starts or ends. */
static PyObject *byte_classes(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 1) {
        PyErr_SetString(PyExc_TypeError, "byte_classes takes one iterable of (lo, hi) pairs");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "byte_classes takes an iterable of (lo, hi) pairs");
    if (seq == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    size_t words = m > 0 ? ((size_t)m + 63) / 64 : 1;
    uint64_t *sig = (uint64_t *)calloc(256 * words, sizeof(uint64_t));
    if (sig == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    uint8_t cut[256] = {0};
    cut[0] = 1;
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *pair = items[k];
        long lo = -1, hi = -1;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
            lo = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
            hi = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        }
        if (PyErr_Occurred() || lo < 0 || hi < lo || hi > 255) {
            free(sig);
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "byte ranges are (lo, hi) with 0 <= lo <= hi <= 255");
            return NULL;
        }
        uint64_t bit = (uint64_t)1 << (k & 63);
        size_t word = (size_t)k >> 6;
        for (long b = lo; b <= hi; b++) sig[(size_t)b * words + word] |= bit;
        cut[lo] = 1;
        if (hi < 255) cut[hi + 1] = 1;
    }
    Py_DECREF(seq);
    char out[256];
    int reps[256];
    uint64_t hashes[256];
    int classes = 0;
    for (int b = 0; b < 256; b++) {
        if (!cut[b]) {  /* no range starts or ends here: the class of the byte before */
            out[b] = out[b - 1];
            continue;
        }
        const uint64_t *mine = sig + (size_t)b * words;
        uint64_t h = 0x9E3779B97F4A7C15ull;
        for (size_t w = 0; w < words; w++) {
            h ^= mine[w];
            h *= 0xFF51AFD7ED558CCDull;
            h ^= h >> 32;
        }
        int found = -1;
        for (int c = 0; c < classes && found < 0; c++)
            if (hashes[c] == h
                && !memcmp(sig + (size_t)reps[c] * words, mine, words * sizeof(uint64_t)))
                found = c;
        if (found < 0) {
            found = classes++;
            reps[found] = b;
            hashes[found] = h;
        }
        out[b] = (char)found;
    }
    free(sig);
    return PyBytes_FromStringAndSize(out, 256);
}

/* ------------------------------------------------------------------ regex AST -> program
 *
 * program_tables(root, types): the flat program of a regex AST (nfa.py, `Program`): one entry
 * per distinct node (equal nodes, as Python's == has them, are one entry), in post-order. Returns
 * (top, typ, arg_a, arg_b, offsets, children, leaves, leaf_at, nullable, size, empty_alternation,
 * leaf bytes): the five integer tables as bytes of native int64 (what the digest reads), the
 * leaves (a CharClass's ranges, a String's text) and their entry numbers as lists, whether the
 * AST matches the empty string, its NFA size (`nfa_size`, saturated at 2**62), whether it holds
 * an alternation of no items, and the leaves as bytes for the digest (`blob`). `types` is (Empty, String, CharClass, Concat, Alternation,
 * Repeat). The Python walk it replaces visits a compile's ~100k nodes at ~1 µs each. */

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} i64buf;

static int buf_push(i64buf *b, int64_t v)
{
    if (b->len == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 64;
        int64_t *d = (int64_t *)realloc(b->data, (size_t)cap * sizeof(int64_t));
        if (!d) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = d;
        b->cap = cap;
    }
    b->data[b->len++] = v;
    return 0;
}

typedef struct {
    PyObject *leaves, *leaf_at;
    PyObject *types[6];
    i64buf typ, a, b, offsets, children, scratch, nullable, size;
    int empty_alternation;
    /* Equal nodes are one entry. Python's dict did that with the nodes' own __hash__ and ==
     * (Python calls, deep comparisons of equal-but-distinct subtrees): here a node seen before
     * (the same object) is found by address, and a new one by its structure — its type, numbers
     * and children's entries, which are equal exactly when the nodes are (children come first),
     * and for a leaf its text or ranges, compared by value. */
    PyObject **seen_key;      /* open addressing by address: node -> entry */
    int64_t *seen_entry;
    Py_ssize_t seen_cap, seen_len;
    int64_t *by_shape;        /* open addressing by structure: entry numbers, -1 empty */
    Py_ssize_t shape_cap;
    i64buf shape_hash;        /* per entry */
    PyObject **leaf_obj;      /* per entry: its leaf (borrowed: the AST holds it), or NULL */
    Py_ssize_t leaf_cap;
    /* the leaves as the digest reads them: per leaf, b"s" + its length (int64) + its code
     * points (uint32), or b"r" + its range count (int64) + the bounds (int64); native order */
    char *blob;
    Py_ssize_t blob_len, blob_cap;
} program_walk;

static int blob_add(program_walk *w, const void *data, Py_ssize_t n)
{
    if (w->blob_len + n > w->blob_cap) {
        Py_ssize_t cap = w->blob_cap ? w->blob_cap : 256;
        while (cap < w->blob_len + n) cap *= 2;
        char *grown = (char *)realloc(w->blob, (size_t)cap);
        if (!grown) { PyErr_NoMemory(); return -1; }
        w->blob = grown;
        w->blob_cap = cap;
    }
    memcpy(w->blob + w->blob_len, data, (size_t)n);
    w->blob_len += n;
    return 0;
}

/* Appends `leaf` (a str, or a tuple of (lo, hi) int pairs) to the blob. */
static int blob_leaf(program_walk *w, PyObject *leaf)
{
    if (PyUnicode_Check(leaf)) {
        int64_t n = PyUnicode_GET_LENGTH(leaf);
        if (blob_add(w, "s", 1) || blob_add(w, &n, 8)) return -1;
        int kind = PyUnicode_KIND(leaf);
        const void *data = PyUnicode_DATA(leaf);
        for (int64_t k = 0; k < n; k++) {
            uint32_t cp = (uint32_t)PyUnicode_READ(kind, data, k);
            if (blob_add(w, &cp, 4)) return -1;
        }
        return 0;
    }
    if (!PyTuple_Check(leaf)) {
        PyErr_SetString(PyExc_TypeError, "a leaf is neither text nor ranges");
        return -1;
    }
    int64_t n = PyTuple_GET_SIZE(leaf);
    if (blob_add(w, "r", 1) || blob_add(w, &n, 8)) return -1;
    for (int64_t k = 0; k < n; k++) {
        PyObject *pair = PyTuple_GET_ITEM(leaf, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a range is not a (lo, hi) pair");
            return -1;
        }
        for (int j = 0; j < 2; j++) {
            int64_t v = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, j));
            if (v == -1 && PyErr_Occurred()) return -1;
            if (blob_add(w, &v, 8)) return -1;
        }
    }
    return 0;
}

static int64_t seen_get(program_walk *w, PyObject *n)
{
    if (!w->seen_cap) return -1;
    size_t mask = (size_t)w->seen_cap - 1, i = ((uintptr_t)n >> 4) & mask;
    for (;; i = (i + 1) & mask) {
        if (w->seen_key[i] == n) return w->seen_entry[i];
        if (!w->seen_key[i]) return -1;
    }
}

static int seen_put(program_walk *w, PyObject *n, int64_t e)
{
    if ((w->seen_len + 1) * 2 > w->seen_cap) {
        Py_ssize_t cap = w->seen_cap ? w->seen_cap * 2 : 256;
        PyObject **keys = (PyObject **)calloc((size_t)cap, sizeof(PyObject *));
        int64_t *vals = (int64_t *)malloc((size_t)cap * sizeof(int64_t));
        if (!keys || !vals) { free(keys); free(vals); PyErr_NoMemory(); return -1; }
        size_t mask = (size_t)cap - 1;
        for (Py_ssize_t k = 0; k < w->seen_cap; k++) {
            PyObject *key = w->seen_key[k];
            if (!key) continue;
            size_t i = ((uintptr_t)key >> 4) & mask;
            while (keys[i]) i = (i + 1) & mask;
            keys[i] = key;
            vals[i] = w->seen_entry[k];
        }
        free(w->seen_key); free(w->seen_entry);
        w->seen_key = keys; w->seen_entry = vals; w->seen_cap = cap;
    }
    size_t mask = (size_t)w->seen_cap - 1, i = ((uintptr_t)n >> 4) & mask;
    while (w->seen_key[i]) i = (i + 1) & mask;
    w->seen_key[i] = n;
    w->seen_entry[i] = e;
    w->seen_len++;
    return 0;
}

static uint64_t shape_of(int64_t typ, int64_t a, int64_t b, const int64_t *kids,
                         Py_ssize_t nkids, Py_hash_t leaf_hash)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)typ;
    uint64_t parts[4] = {(uint64_t)a, (uint64_t)b, (uint64_t)nkids, (uint64_t)leaf_hash};
    for (int k = 0; k < 4; k++) h = (h ^ parts[k]) * 0x100000001B3ull + (h >> 29);
    for (Py_ssize_t k = 0; k < nkids; k++) h = (h ^ (uint64_t)kids[k]) * 0x100000001B3ull + (h >> 29);
    return h ^ (h >> 31);
}

/* The entry equal to (typ, a, b, kids, leaf) with structure hash `h`: its number, -1 none,
 * -2 an error (a leaf comparison raised). */
static int64_t shape_find(program_walk *w, uint64_t h, int64_t typ, int64_t a, int64_t b,
                          const int64_t *kids, Py_ssize_t nkids, PyObject *leaf)
{
    if (!w->shape_cap) return -1;
    size_t mask = (size_t)w->shape_cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        int64_t e = w->by_shape[i];
        if (e < 0) return -1;
        if ((uint64_t)w->shape_hash.data[e] != h || w->typ.data[e] != typ || w->a.data[e] != a
                || w->b.data[e] != b)
            continue;
        int64_t lo = w->offsets.data[e], hi = w->offsets.data[e + 1];
        if (hi - lo != nkids || memcmp(w->children.data + lo, kids, (size_t)nkids * 8)) continue;
        if (leaf) {
            int same = PyObject_RichCompareBool(w->leaf_obj[e], leaf, Py_EQ);
            if (same < 0) return -2;
            if (!same) continue;
        }
        return e;
    }
}

static int shape_put(program_walk *w, int64_t e, uint64_t h)
{
    if ((e + 1) * 2 > w->shape_cap) {
        Py_ssize_t cap = w->shape_cap ? w->shape_cap * 2 : 256;
        int64_t *table = (int64_t *)malloc((size_t)cap * sizeof(int64_t));
        if (!table) { PyErr_NoMemory(); return -1; }
        memset(table, 0xFF, (size_t)cap * sizeof(int64_t));
        size_t mask = (size_t)cap - 1;
        for (int64_t k = 0; k < e; k++) {
            size_t i = (uint64_t)w->shape_hash.data[k] & mask;
            while (table[i] >= 0) i = (i + 1) & mask;
            table[i] = k;
        }
        free(w->by_shape);
        w->by_shape = table;
        w->shape_cap = cap;
    }
    size_t mask = (size_t)w->shape_cap - 1, i = h & mask;
    while (w->by_shape[i] >= 0) i = (i + 1) & mask;
    w->by_shape[i] = e;
    return 0;
}

#define SIZE_CAP ((int64_t)1 << 62)

static int64_t sat_add(int64_t x, int64_t y) { return x > SIZE_CAP - y ? SIZE_CAP : x + y; }

static int64_t sat_mul(int64_t x, int64_t y)
{
    if (x == 0 || y == 0) return 0;
    return x > SIZE_CAP / y ? SIZE_CAP : x * y;
}

/* Attribute names, interned when the module is made (not on first use: on a free-threaded
 * build two threads could meet one half made). */
static PyObject *str_items, *str_ranges, *str_text, *str_item, *str_min, *str_max;
static PyObject *str_counts, *str_table, *str_spelled, *str_dag, *str_size;
static PyObject *width_name, *used_name, *row_name, *data_name; /* (a lookup per block) */

static int intern_names(void)
{
    struct { PyObject **slot; const char *text; } names[] = {
        {&str_items, "items"}, {&str_ranges, "ranges"}, {&str_text, "text"},
        {&str_item, "item"}, {&str_min, "min"}, {&str_max, "max"}, {&str_counts, "counts"},
        {&str_table, "table"}, {&str_spelled, "spelled"}, {&str_dag, "dag"},
        {&str_size, "size"}, {&width_name, "width"}, {&used_name, "used"}, {&row_name, "row"},
        {&data_name, "c_data"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return 0;
}

/* The entry of a node with these fields: an equal one made before, or a new one (a leaf's
 * text or ranges then joins `leaves`). -1: an error. */
static int64_t entry(program_walk *w, int64_t typ, int64_t a, int64_t b, const int64_t *kids,
                     Py_ssize_t nkids, PyObject *leaf)
{
    Py_hash_t leaf_hash = 0;
    if (leaf && (leaf_hash = PyObject_Hash(leaf)) == -1) return -1;
    uint64_t h = shape_of(typ, a, b, kids, nkids, leaf_hash);
    int64_t same = shape_find(w, h, typ, a, b, kids, nkids, leaf);
    if (same != -1) return same < 0 ? -1 : same;
    int64_t i = w->typ.len;
    if (leaf) {
        PyObject *at = PyLong_FromLongLong(i);
        int bad = !at || PyList_Append(w->leaves, leaf) || PyList_Append(w->leaf_at, at);
        Py_XDECREF(at);
        if (bad || blob_leaf(w, leaf)) return -1;
    }
    if (i >= w->leaf_cap) {
        Py_ssize_t cap = w->leaf_cap ? w->leaf_cap * 2 : 64;
        PyObject **grown = (PyObject **)realloc(w->leaf_obj, (size_t)cap * sizeof(PyObject *));
        if (!grown) { PyErr_NoMemory(); return -1; }
        w->leaf_obj = grown;
        w->leaf_cap = cap;
    }
    w->leaf_obj[i] = leaf;
    if (buf_push(&w->shape_hash, (int64_t)h)) return -1;
    /* whether the entry matches the empty string (children come first: post-order) */
    int64_t empty = typ == 0 || typ == 2 || (typ == 4 && a == 0);
    if (typ == 2)
        for (Py_ssize_t k = 0; k < nkids && empty; k++) empty = w->nullable.data[kids[k]];
    else if (typ == 3)
        for (Py_ssize_t k = 0; k < nkids && !empty; k++) empty = w->nullable.data[kids[k]];
    else if (typ == 4 && !empty)
        empty = w->nullable.data[kids[0]];
    /* its NFA states (nfa.py, `nfa_size`; saturated at 2**62) */
    int64_t size = typ == 1;
    if (typ == 2 || typ == 3) {
        for (Py_ssize_t k = 0; k < nkids; k++) size = sat_add(size, w->size.data[kids[k]]);
        if (typ == 3) size = sat_add(size, 1);
        if (typ == 3 && nkids == 0) w->empty_alternation = 1;
    } else if (typ == 4) {
        int64_t e = w->size.data[kids[0]];
        if (b < 0)
            size = sat_add(sat_mul(a > 1 ? a : 1, e), 1);
        else
            size = sat_add(sat_mul(a, e), sat_mul(b - a, sat_add(e, 1)));
    }
    if (buf_push(&w->typ, typ) || buf_push(&w->a, a) || buf_push(&w->b, b)
        || buf_push(&w->nullable, empty) || buf_push(&w->size, size))
        return -1;
    for (Py_ssize_t k = 0; k < nkids; k++)
        if (buf_push(&w->children, kids[k])) return -1;
    if (buf_push(&w->offsets, w->children.len)) return -1;
    if (shape_put(w, i, h)) return -1;
    return i;
}

static int64_t visit_node(program_walk *w, PyObject *n)
{
    int64_t known = seen_get(w, n);
    if (known >= 0) return known;
    PyObject *kind = (PyObject *)Py_TYPE(n);
    int64_t i;
    if (kind == w->types[3] || kind == w->types[4]) {  /* Concat, Alternation */
        PyObject *items = PyObject_GetAttr(n, str_items);
        if (!items) return -1;
        if (!PyTuple_Check(items)) {
            Py_DECREF(items);
            PyErr_Format(PyExc_TypeError, "not a regex AST node: %R", n);
            return -1;
        }
        Py_ssize_t k = PyTuple_GET_SIZE(items);
        if (Py_EnterRecursiveCall(" in the regex program walk")) {
            Py_DECREF(items);
            return -1;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t c = visit_node(w, PyTuple_GET_ITEM(items, j));
            if (c < 0 || buf_push(&w->scratch, c)) {
                Py_LeaveRecursiveCall();
                Py_DECREF(items);
                return -1;
            }
        }
        Py_LeaveRecursiveCall();
        Py_DECREF(items);
        w->scratch.len -= k;
        i = entry(w, kind == w->types[3] ? 2 : 3, 0, 0, w->scratch.data + w->scratch.len, k,
                  NULL);
    } else if (kind == w->types[2] || kind == w->types[1]) {  /* CharClass, String */
        PyObject *leaf = PyObject_GetAttr(n, kind == w->types[2] ? str_ranges : str_text);
        if (!leaf) return -1;
        i = entry(w, 1, 0, 0, NULL, 0, leaf);
        Py_DECREF(leaf);  /* (the node still holds it: `leaf_obj` borrows) */
    } else if (kind == w->types[5]) {  /* Repeat */
        PyObject *item = PyObject_GetAttr(n, str_item);
        if (!item) return -1;
        if (Py_EnterRecursiveCall(" in the regex program walk")) {
            Py_DECREF(item);
            return -1;
        }
        int64_t c = visit_node(w, item);
        Py_LeaveRecursiveCall();
        Py_DECREF(item);
        if (c < 0) return -1;
        PyObject *lo = PyObject_GetAttr(n, str_min);
        PyObject *hi = lo ? PyObject_GetAttr(n, str_max) : NULL;
        int64_t vlo = lo ? PyLong_AsLongLong(lo) : -1, vhi = -1;
        if (hi && hi != Py_None) vhi = PyLong_AsLongLong(hi);
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        if (!hi || PyErr_Occurred()) return -1;  /* (past 64 bits: OverflowError) */
        i = entry(w, 4, vlo, vhi, &c, 1, NULL);
    } else if (kind == w->types[0]) {  /* Empty */
        i = entry(w, 0, 0, 0, NULL, 0, NULL);
    } else {
        PyErr_Format(PyExc_TypeError, "not a regex AST node: %R", n);
        return -1;
    }
    if (i < 0) return -1;
    return seen_put(w, n, i) ? -1 : i;
}

static PyObject *buf_bytes(i64buf *b)
{
    return PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)(b->len * sizeof(int64_t)));
}

static PyObject *program_tables(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 2 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 6) {
        PyErr_SetString(PyExc_TypeError, "program_tables(root, (Empty, String, CharClass, Concat, Alternation, Repeat))");
        return NULL;
    }
    program_walk w;
    memset(&w, 0, sizeof w);
    for (int k = 0; k < 6; k++) w.types[k] = PyTuple_GET_ITEM(args[1], k);
    w.leaves = PyList_New(0);
    w.leaf_at = PyList_New(0);
    PyObject *out = NULL;
    if (w.leaves && w.leaf_at && !buf_push(&w.offsets, 0)) {
        int64_t top = visit_node(&w, args[0]);
        if (top >= 0) {
            out = Py_BuildValue("(LNNNNNOOOLON)", (long long)top, buf_bytes(&w.typ),
                                buf_bytes(&w.a), buf_bytes(&w.b), buf_bytes(&w.offsets),
                                buf_bytes(&w.children), w.leaves, w.leaf_at,
                                w.nullable.data[top] ? Py_True : Py_False,
                                (long long)w.size.data[top],
                                w.empty_alternation ? Py_True : Py_False,
                                PyBytes_FromStringAndSize(w.blob ? w.blob : "", w.blob_len));
        }
    }
    Py_XDECREF(w.leaves);
    Py_XDECREF(w.leaf_at);
    free(w.typ.data); free(w.a.data); free(w.b.data); free(w.offsets.data);
    free(w.children.data); free(w.scratch.data); free(w.nullable.data); free(w.size.data);
    free(w.seen_key); free(w.seen_entry); free(w.by_shape); free(w.shape_hash.data);
    free(w.leaf_obj); free(w.blob);
    return out;
}

/* join_pieces(pieces, bases, size): an NFA pool's arrays (nfa.py, `Pool.arrays`) joined from its
 * pieces in one pass: (offsets int32[size + 1], lo, hi, child int32[max(moves, 1)], nonempty
 * uint8[max(size, 1)]) as bytes, child ids moved by their piece's base. A piece is read as it
 * was made (`nfa._Piece`): `spelled`, a string's bytes (a chain: node j reads byte j and goes on
 * to node j + 1, the last completes the character), else `dag`, a tuple of nodes each a tuple
 * of (lo, hi, child) moves, else its arrays `counts` (int32, moves per node) and `table` (int32
 * [moves, 3]). Eight numpy calls per NFA before, on a dozen small arrays each, and a dozen more
 * per piece to make those arrays. */

/* How one piece is read: its bytes, its node tuples, or its two arrays (views). */
typedef struct {
    PyObject *ref;         /* `spelled` (bytes) or `dag` (tuple): a new reference */
    int kind;              /* 0: spelled, 1: dag, 2: arrays */
    Py_ssize_t nodes, moves;
    Py_buffer counts, table;
} piece_view;


static void piece_views_release(piece_view *views, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_XDECREF(views[k].ref);
        if (views[k].kind == 2) {
            if (views[k].counts.obj) PyBuffer_Release(&views[k].counts);
            if (views[k].table.obj) PyBuffer_Release(&views[k].table);
        }
    }
    free(views);
}

/* Fill `v` from `piece`; 0, or -1 with an exception. */
static int piece_view_of(PyObject *piece, piece_view *v)
{
    PyObject *spelled = PyObject_GetAttr(piece, str_spelled);
    if (!spelled) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
    } else if (PyBytes_Check(spelled)) {
        v->ref = spelled;
        v->kind = 0;
        v->nodes = v->moves = PyBytes_GET_SIZE(spelled);
        return 0;
    } else {
        Py_DECREF(spelled);
    }
    PyObject *dag = PyObject_GetAttr(piece, str_dag);
    if (!dag) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
    } else if (PyTuple_Check(dag)) {
        v->ref = dag;
        v->kind = 1;
        v->nodes = PyTuple_GET_SIZE(dag);
        v->moves = 0;
        for (Py_ssize_t j = 0; j < v->nodes; j++) {
            PyObject *node = PyTuple_GET_ITEM(dag, j);
            if (!PyTuple_Check(node)) {
                PyErr_SetString(PyExc_TypeError, "a piece's node must be a tuple of moves");
                return -1;
            }
            Py_ssize_t m = PyTuple_GET_SIZE(node);
            for (Py_ssize_t i = 0; i < m; i++) {
                PyObject *move = PyTuple_GET_ITEM(node, i);
                if (!PyTuple_Check(move) || PyTuple_GET_SIZE(move) != 3) {
                    PyErr_SetString(PyExc_TypeError, "a piece's move must be (lo, hi, child)");
                    return -1;
                }
            }
            v->moves += m;
        }
        return 0;
    } else {
        Py_DECREF(dag);
    }
    v->kind = 2;
    PyObject *counts = PyObject_GetAttr(piece, str_counts);
    PyObject *table = counts ? PyObject_GetAttr(piece, str_table) : NULL;
    int bad = !table;
    if (!bad) bad = PyObject_GetBuffer(counts, &v->counts, PyBUF_C_CONTIGUOUS) < 0;
    if (!bad) bad = PyObject_GetBuffer(table, &v->table, PyBUF_C_CONTIGUOUS) < 0;
    Py_XDECREF(counts);
    Py_XDECREF(table);
    if (bad) return -1;
    if (v->counts.len % 4 || v->table.len % 12) {
        PyErr_SetString(PyExc_ValueError, "piece arrays must be int32");
        return -1;
    }
    v->nodes = v->counts.len / 4;
    v->moves = v->table.len / 12;
    return 0;
}

static PyObject *join_pieces(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "join_pieces(pieces, bases, size)");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[2]);
    if (size < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative pool size");
        return NULL;
    }
    PyObject *pieces = PySequence_Fast(args[0], "pieces must be a sequence");
    if (!pieces) return NULL;
    PyObject *bases = PySequence_Fast(args[1], "bases must be a sequence");
    if (!bases) {
        Py_DECREF(pieces);
        return NULL;
    }
    Py_ssize_t np_ = PySequence_Fast_GET_SIZE(pieces);
    PyObject *result = NULL;
    piece_view *views = (piece_view *)calloc((size_t)(np_ + 1), sizeof(piece_view));
    Py_ssize_t got = 0;
    if (!views || PySequence_Fast_GET_SIZE(bases) != np_) {
        if (views) PyErr_SetString(PyExc_ValueError, "one base per piece");
        else PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nodes = 0, moves = 0;
    for (Py_ssize_t k = 0; k < np_; k++) {
        got = k + 1; /* (released below whatever it holds) */
        if (piece_view_of(PySequence_Fast_GET_ITEM(pieces, k), &views[k]) < 0) goto done;
        nodes += views[k].nodes;
        moves += views[k].moves;
    }
    if (nodes != size) {
        PyErr_SetString(PyExc_ValueError, "the pieces' nodes do not add up to the pool size");
        goto done;
    }
    {
        Py_ssize_t nm = moves > 0 ? moves : 1, ns = size > 0 ? size : 1;
        PyObject *off_b = PyBytes_FromStringAndSize(NULL, (ns + 1) * 4);
        PyObject *lo_b = PyBytes_FromStringAndSize(NULL, nm * 4);
        PyObject *hi_b = PyBytes_FromStringAndSize(NULL, nm * 4);
        PyObject *ch_b = PyBytes_FromStringAndSize(NULL, nm * 4);
        PyObject *ne_b = PyBytes_FromStringAndSize(NULL, ns);
        if (!off_b || !lo_b || !hi_b || !ch_b || !ne_b) {
            Py_XDECREF(off_b); Py_XDECREF(lo_b); Py_XDECREF(hi_b); Py_XDECREF(ch_b);
            Py_XDECREF(ne_b);
            goto done;
        }
        int32_t *off = (int32_t *)PyBytes_AS_STRING(off_b);
        int32_t *lo = (int32_t *)PyBytes_AS_STRING(lo_b);
        int32_t *hi = (int32_t *)PyBytes_AS_STRING(hi_b);
        int32_t *ch = (int32_t *)PyBytes_AS_STRING(ch_b);
        uint8_t *ne = (uint8_t *)PyBytes_AS_STRING(ne_b);
        memset(off, 0, (size_t)(ns + 1) * 4);
        memset(ne, 0, (size_t)ns);
        lo[0] = hi[0] = ch[0] = 0;
        Py_ssize_t node = 0, move = 0;
        int32_t running = 0;
        for (Py_ssize_t k = 0; k < np_ && !PyErr_Occurred(); k++) {
            long base = PyLong_AsLong(PySequence_Fast_GET_ITEM(bases, k));
            piece_view *v = &views[k];
            if (v->kind == 0) { /* a string's chain of bytes */
                const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(v->ref);
                for (Py_ssize_t j = 0; j < v->nodes; j++) {
                    off[node + j + 1] = ++running;
                    ne[node + j] = 1;
                    lo[move + j] = hi[move + j] = data[j];
                    ch[move + j] = j + 1 < v->nodes ? (int32_t)(j + 1 + base) : -1;
                }
            } else if (v->kind == 1) { /* the DAG's node tuples */
                Py_ssize_t at = move;
                for (Py_ssize_t j = 0; j < v->nodes && !PyErr_Occurred(); j++) {
                    PyObject *node_moves = PyTuple_GET_ITEM(v->ref, j);
                    Py_ssize_t m = PyTuple_GET_SIZE(node_moves);
                    running += (int32_t)m;
                    off[node + j + 1] = running;
                    ne[node + j] = m > 0;
                    for (Py_ssize_t i = 0; i < m; i++, at++) {
                        PyObject *mv = PyTuple_GET_ITEM(node_moves, i);
                        lo[at] = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(mv, 0));
                        hi[at] = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(mv, 1));
                        int32_t c = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(mv, 2));
                        ch[at] = c >= 0 ? c + (int32_t)base : c;
                    }
                }
            } else { /* the arrays */
                const int32_t *counts = (const int32_t *)v->counts.buf;
                const int32_t *table = (const int32_t *)v->table.buf;
                for (Py_ssize_t j = 0; j < v->nodes; j++) {
                    running += counts[j];
                    off[node + j + 1] = running;
                    ne[node + j] = counts[j] > 0;
                }
                for (Py_ssize_t j = 0; j < v->moves; j++) {
                    lo[move + j] = table[3 * j];
                    hi[move + j] = table[3 * j + 1];
                    int32_t c = table[3 * j + 2];
                    ch[move + j] = c >= 0 ? c + (int32_t)base : c;
                }
            }
            node += v->nodes;
            move += v->moves;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(off_b); Py_DECREF(lo_b); Py_DECREF(hi_b); Py_DECREF(ch_b); Py_DECREF(ne_b);
            goto done;
        }
        result = Py_BuildValue("(NNNNN)", off_b, lo_b, hi_b, ch_b, ne_b);
    }
done:
    if (views) piece_views_release(views, got);
    Py_DECREF(pieces);
    Py_DECREF(bases);
    return result;
}

/* uninitialised(nbytes): a bytearray of `nbytes` whose contents are not written (plain malloc:
 * no huge-page advice, no zero fill; the pages are touched as the caller writes them). */
static PyObject *uninitialised(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "uninitialised takes one argument");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

/* The (ctx, state) arguments of `states_key` and `union_accepted`: a context's address and a
 * state id. 0, or -1 with an exception set. */
static int ctx_and_state(PyObject *const *args, Py_ssize_t nargs, const char *name, void **ctx,
                         int32_t *state)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes ctx and state", name);
        return -1;
    }
    *ctx = PyLong_AsVoidPtr(args[0]);
    long s = PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return -1;
    if (*ctx == NULL || s < 0 || s > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: no context, or a bad state", name);
        return -1;
    }
    *state = (int32_t)s;
    return 0;
}

/* A state's elements (`sg_states_key`) into `small` (32 entries) or, for a bigger set, a new
 * PyMem buffer set in *out (the caller frees it when *out != small): their count, -1 when there
 * is no such state, -2 with an exception set. */
static int64_t states_key_into(sg_states *st, int32_t state, int64_t *small, int64_t **out,
                               const char *name)
{
    *out = small;
    int64_t n = sg_states_key(st, state, small, 32);
    if (n <= 32) return n;
    int64_t *big = PyMem_Malloc((size_t)n * sizeof(int64_t));  /* (a bigger set: again with room) */
    if (big == NULL) {
        PyErr_NoMemory();
        return -2;
    }
    if (sg_states_key(st, state, big, n) != n) { /* (a state's set never changes once interned) */
        PyMem_Free(big);
        PyErr_Format(PyExc_RuntimeError, "%s: the state's set changed", name);
        return -2;
    }
    *out = big;
    return n;
}

/* states_key(ctx, state): the element set of a context's state (`sg_states_key`) as a tuple of
 * ints, or None when there is no such state. `ctx` is any context's address (the states come
 * first in each). A union state's key is asked at each whole walk's slice proofs (its live
 * components): through ctypes, a buffer and `tolist` that cost ~3 us. */
static PyObject *states_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *ctx;
    int32_t state;
    if (ctx_and_state(args, nargs, "states_key", &ctx, &state) < 0) return NULL;
    int64_t small[32], *out;
    int64_t n = states_key_into((sg_states *)ctx, state, small, &out, "states_key");
    if (n == -2) return NULL;
    PyObject *result;
    if (n < 0) {
        result = Py_None;
        Py_INCREF(result);
    } else if ((result = PyTuple_New((Py_ssize_t)n)) != NULL) {
        for (int64_t k = 0; k < n; k++) {
            PyObject *e = PyLong_FromLongLong(out[k]);
            if (e == NULL) {
                Py_CLEAR(result);
                break;
            }
            PyTuple_SET_ITEM(result, (Py_ssize_t)k, e);
        }
    }
    if (out != small) PyMem_Free(out);
    return result;
}

/* union_parts_in(ctx, state, wanted): a union context's state's (component, its state) pairs,
 * as a tuple of 2-tuples, for the components i with wanted[i] != 0 only (a bytes-like object,
 * one byte per component; those past its end are not wanted), or None when the state is
 * unknown. The token-slice proofs of a new lexer state read its unbounded components (a
 * string, a number): the key pairs of every other component (a hundred keys' spellings)
 * were made in Python only to be skipped. */
static PyObject *union_parts_in(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *ctx;
    int32_t state;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "union_parts_in takes ctx, state and wanted");
        return NULL;
    }
    if (ctx_and_state(args, 2, "union_parts_in", &ctx, &state) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *wanted = (const uint8_t *)view.buf;
    int64_t n_wanted = (int64_t)view.len;
    int64_t small[32], *out;
    int64_t n = states_key_into((sg_states *)ctx, state, small, &out, "union_parts_in");
    PyObject *result = NULL;
    if (n == -2) goto done;
    if (n < 0) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    Py_ssize_t k = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t part = out[j] >> 32;
        if (part >= 0 && part < n_wanted && wanted[part]) k++;
    }
    result = PyTuple_New(k);
    if (result == NULL) goto done;
    k = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t part = out[j] >> 32;
        if (!(part >= 0 && part < n_wanted && wanted[part])) continue;
        PyObject *pair = Py_BuildValue("(LL)", (long long)part, (long long)(out[j] & 0xFFFFFFFF));
        if (pair == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, k++, pair);
    }
done:
    if (out != small) PyMem_Free(out);
    PyBuffer_Release(&view);
    return result;
}

/* union_intern(ctx, elements) -> id or -1 - code: `sg_union_intern` of a sorted, unique list of
 * elements (`component << 32 | state`) given as Python ints: no array made and no ctypes call
 * (a grammar's first mask makes a lexer start per new set of expected terminals). */
static PyObject *union_intern(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "union_intern takes ctx and elements");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(args[0]);
    if (ctx == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "union_intern: no context");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "union_intern: elements must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t small[64], *a = small;
    if (n > 64 && (a = (int64_t *)PyMem_Malloc((size_t)n * sizeof(int64_t))) == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        a[k] = PyLong_AsLongLong(items[k]);
        if (a[k] == -1 && PyErr_Occurred()) break;
    }
    PyObject *out = NULL;
    if (!PyErr_Occurred()) out = PyLong_FromLongLong(sg_union_intern((sg_union *)ctx, a, n));
    if (a != small) PyMem_Free(a);
    Py_DECREF(seq);
    return out;
}

/* alphabet_of_ranges(ranges) -> int: the bytes some (lo, hi) range of `ranges` (an iterable of
 * pairs, 0 <= lo <= hi <= 255) covers, as a bitset (bit b: byte b) — a deferred terminal's
 * alphabet, asked by the slice checks on a first mask (a Python loop of big-int shifts cost
 * ~4 µs for a JSON string's 28 ranges). */
static PyObject *alphabet_of_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "alphabet_of_ranges takes the ranges");
        return NULL;
    }
    PyObject *it = PyObject_GetIter(args[0]);
    if (it == NULL) return NULL;
    uint8_t bits[32] = {0};
    PyObject *pair;
    int bad = 0;
    while (!bad && (pair = PyIter_Next(it)) != NULL) {
        long lo = -1, hi = -1;
        if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
            lo = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
            hi = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        }
        Py_DECREF(pair);
        if (PyErr_Occurred()) {
            bad = 1;
        } else if (lo < 0 || hi > 255 || lo > hi) {
            PyErr_SetString(PyExc_ValueError, "alphabet_of_ranges: a range is (lo, hi), 0-255");
            bad = 1;
        } else {
            for (long b = lo; b <= hi; b++) bits[b >> 3] |= (uint8_t)(1u << (b & 7));
        }
    }
    Py_DECREF(it);
    if (bad || PyErr_Occurred()) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromUnsignedNativeBytes(bits, 32, Py_ASNATIVEBYTES_LITTLE_ENDIAN);
#else
    return _PyLong_FromByteArray(bits, 32, 1, 0);
#endif
}

/* union_needs(ctx) -> (part, state, part, state, ...): after SG_NEED_ROW, every component row
 * to build before the row build is tried again (`sg_union_needs`; one call, where a ctypes call
 * per row, and a build tried again after each, cost a lexer's first row a few µs per terminal). */
static PyObject *union_needs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "union_needs takes ctx");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(args[0]);
    if (ctx == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "union_needs: no context");
        return NULL;
    }
    int64_t pairs[2 * SG_MAX_NEEDS];
    int64_t n = sg_union_needs((sg_union *)ctx, pairs, SG_MAX_NEEDS);
    PyObject *out = PyTuple_New((Py_ssize_t)(2 * n));
    for (int64_t k = 0; out != NULL && k < 2 * n; k++) {
        PyObject *v = PyLong_FromLongLong(pairs[k]);
        if (v == NULL) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, (Py_ssize_t)k, v);
    }
    return out;
}

/* union_set_part(ctx, i, fields): `sg_union_set_part` from a component's five fields packed
 * as `PART_FIELDS` (`ByteDFA.part_fields`): no unpacking, no ctypes conversions. */
static PyObject *union_set_part(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3 || !PyBytes_Check(args[2]) || PyBytes_GET_SIZE(args[2]) != 5 * 8) {
        PyErr_SetString(PyExc_TypeError, "union_set_part takes ctx, i and 40 bytes of fields");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(args[0]);
    long i = PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    sg_union *u = (sg_union *)ctx;
    if (u == NULL || i < 0 || i >= u->n_parts) {
        PyErr_SetString(PyExc_ValueError, "union_set_part: no context, or no such component");
        return NULL;
    }
    int64_t f[5];
    memcpy(f, PyBytes_AS_STRING(args[2]), sizeof f);
    pthread_mutex_lock(&u->st.lock);
    sg_union_set_parts_from(u, (int32_t)i, f);
    pthread_mutex_unlock(&u->st.lock);
    Py_RETURN_NONE;
}

/* union_accepted(ctx, state): a union context's state's accepting components as a frozenset,
 * or None when C cannot tell (`sg_union_accepted`: not a union, a component's arrays stale).
 * `ctx` is the address `sg_union_new` gave (`NativeUnion.ctx`). Asked once per new lexer state
 * of a grammar (`_SharedUnion.accepted`): through ctypes, a buffer and a list, it cost ~3 us. */
static PyObject *union_accepted(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    void *ctx;
    int32_t state;
    if (ctx_and_state(args, nargs, "union_accepted", &ctx, &state) < 0) return NULL;
    sg_union *u = ctx;
    int64_t small[64], *out = small, cap = 64;
    int64_t n = sg_union_accepted(u, state, out, cap);
    if (n < 0 && u->n_parts > cap) {  /* (maybe only too many accepting: ask with room) */
        cap = u->n_parts;
        out = PyMem_Malloc((size_t)cap * sizeof(int64_t));
        if (out == NULL) return PyErr_NoMemory();
        n = sg_union_accepted(u, state, out, cap);
    }
    PyObject *result = NULL;
    if (n < 0) {
        result = Py_None;
        Py_INCREF(result);
    } else if ((result = PyFrozenSet_New(NULL)) != NULL) {
        for (int64_t k = 0; k < n; k++) {
            PyObject *i = PyLong_FromLongLong(out[k]);
            if (i == NULL || PySet_Add(result, i) < 0) {
                Py_XDECREF(i);
                Py_CLEAR(result);
                break;
            }
            Py_DECREF(i);
        }
    }
    if (out != small) PyMem_Free(out);
    return result;
}

/* check_snapshots(rows, byte_classes, states, classes): None when a compile-cache file's
 * automata are consistent, else the reason (snapshot.py, `SnapshotBatch.check`, whose numpy
 * path it replaces: a file holds ~20 automata of a few states, and a dozen numpy calls over
 * them cost more than one pass). `rows`: every automaton's rows (int32, n*k each, in order);
 * `byte_classes`: 256 bytes per automaton; `states`, `classes`: each one's n and k. An
 * automaton's classes are numbered 0..k-1 without gaps, its transitions lie in [UNBUILT, n),
 * and a row is built (no UNBUILT) or not at all. */
static PyObject *check_snapshots(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyList_Check(args[2]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "check_snapshots(rows, byte_classes, states, classes)");
        return NULL;
    }
    Py_ssize_t m = PyList_GET_SIZE(args[2]);
    if (PyList_GET_SIZE(args[3]) != m)
        return PyUnicode_FromString("the automata's fields disagree in number");
    Py_buffer rows, classes;
    if (PyObject_GetBuffer(args[0], &rows, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &classes, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&rows);
        return NULL;
    }
    const char *why = NULL;
    const int32_t *row = (const int32_t *)rows.buf;
    const uint8_t *cls = (const uint8_t *)classes.buf;
    Py_ssize_t total = rows.len / (Py_ssize_t)sizeof(int32_t), at = 0;
    if (rows.len % (Py_ssize_t)sizeof(int32_t) || classes.len != 256 * m)
        why = "the arrays' lengths do not match the automata";
    for (Py_ssize_t i = 0; i < m && why == NULL; i++) {
        long long n = PyLong_AsLongLong(PyList_GET_ITEM(args[2], i));
        long long k = PyLong_AsLongLong(PyList_GET_ITEM(args[3], i));
        if (PyErr_Occurred()) {
            PyErr_Clear();
            why = "bad automaton size";
            break;
        }
        if (n < 1 || k < 1 || k > 256 || n > (long long)INT32_MAX) {
            why = "bad automaton size";
            break;
        }
        unsigned char seen[256] = {0};
        int distinct = 0, top = 0;
        for (int b = 0; b < 256; b++) {
            int c = cls[256 * i + b];
            if (!seen[c]) {
                seen[c] = 1;
                distinct++;
            }
            if (c > top)
                top = c;
        }
        if (top + 1 != k) {
            why = "the class counts do not match the byte classes";
            break;
        }
        if (distinct != k) {
            why = "byte classes are not numbered without gaps";
            break;
        }
        if (n * k > total - at) {
            why = "the arrays' lengths do not match the automata";
            break;
        }
        for (long long s = 0; s < n && why == NULL; s++) {
            const int32_t *r = row + at + s * k;
            int unbuilt = 0;
            for (long long c = 0; c < k; c++) {
                int32_t t = r[c];
                if (t < SNAPSHOT_UNBUILT || t >= n) {
                    why = "a transition leads out of the automaton";
                    break;
                }
                unbuilt += t == SNAPSHOT_UNBUILT;
            }
            if (why == NULL && unbuilt != 0 && unbuilt != k)
                why = "a row is built only in part";
        }
        at += n * k;
    }
    if (why == NULL && at != total)
        why = "the arrays' lengths do not match the automata";
    PyBuffer_Release(&rows);
    PyBuffer_Release(&classes);
    if (why == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

/* context_capsule(kind, address): a capsule that frees the C context at `address` when it is
 * collected (kind 0: a subset construction, 1: a union, 2: a chain) — what owns a context holds
 * it instead of a Python `__del__` that called the free function through ctypes (a key's
 * automaton is dropped at every eviction from the recent ones: ~0.4 µs less each). */
static const char *const CONTEXT_CAPSULE = "structgen.context";

static void context_capsule_free(PyObject *capsule)
{
    void *ctx = PyCapsule_GetPointer(capsule, CONTEXT_CAPSULE);
    intptr_t kind = (intptr_t)PyCapsule_GetContext(capsule);
    if (ctx == NULL) {
        PyErr_Clear();
        return;
    }
    if (kind == 0)
        sg_subset_free((sg_subset *)ctx);
    else if (kind == 1)
        sg_union_free((sg_union *)ctx);
    else
        sg_chain_free((sg_chain *)ctx);
}

/* A capsule that owns the C context `ctx` of `kind` (0 subset, 1 union, 2 chain) and frees it
 * when collected; NULL with an exception set, the context then still the caller's (the
 * destructor is set last: a half-made capsule frees nothing). */
static PyObject *owning_capsule(void *ctx, intptr_t kind)
{
    PyObject *capsule = PyCapsule_New(ctx, CONTEXT_CAPSULE, NULL);
    if (capsule == NULL) return NULL;
    if (PyCapsule_SetContext(capsule, (void *)kind) < 0
        || PyCapsule_SetDestructor(capsule, context_capsule_free) < 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

static PyObject *context_capsule(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "context_capsule(kind, address)");
        return NULL;
    }
    long kind = PyLong_AsLong(args[0]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    if (kind < 0 || kind > 2) {
        PyErr_SetString(PyExc_ValueError, "a context kind is 0 (subset), 1 (union) or 2 (chain)");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(args[1]);
    if (ctx == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "no context at address 0");
        return NULL;
    }
    return owning_capsule(ctx, (intptr_t)kind);
}

/* joint_classes(parts): bytes(256), the coarsest byte partition refining every part's (each a
 * C-contiguous buffer of 256 class ids, uint8), classes numbered in order of their smallest
 * byte (dfa.py, `_number_rows` over the parts stacked, whose numpy path it replaces: a grammar's
 * union lexer joins the classes of every terminal, dozens of parts, at its first mask). Refined
 * one part at a time: a byte's new class is its pair (class so far, part's class), numbered as
 * the bytes are met in order, so the numbering is by smallest byte at every step. The pair
 * table is -1 everywhere between calls (used entries are reset); one per thread, freed when
 * the thread ends (on a free-threaded build calls on two threads overlap). */
static pthread_key_t pair_ids_key;
static pthread_once_t pair_ids_once = PTHREAD_ONCE_INIT;
static int pair_ids_ready;

static void pair_ids_key_make(void) { pair_ids_ready = pthread_key_create(&pair_ids_key, free) == 0; }

/* This thread's pair table, or NULL with MemoryError set. */
static int16_t *thread_pair_ids(void)
{
    pthread_once(&pair_ids_once, pair_ids_key_make);
    if (!pair_ids_ready) {
        PyErr_SetString(PyExc_MemoryError, "no thread-local key for joint_classes");
        return NULL;
    }
    int16_t *ids = (int16_t *)pthread_getspecific(pair_ids_key);
    if (ids == NULL) {
        ids = (int16_t *)malloc(sizeof(int16_t) * 65536);
        if (ids == NULL || pthread_setspecific(pair_ids_key, ids) != 0) {
            free(ids);
            PyErr_NoMemory();
            return NULL;
        }
        memset(ids, 0xff, sizeof(int16_t) * 65536);
    }
    return ids;
}

/* A class array's buffer (C-contiguous, 256 uint8 ids): 0, or -1 with an exception set. */
static int class_buffer(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len != 256) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "a class array has 256 entries (uint8)");
        return -1;
    }
    return 0;
}

/* The classes of a byte mask (32 bytes, little-endian bits): each byte in it its own class,
 * the other bytes one, numbered by smallest byte (a literal chain's classes). */
static void mask_classes(const uint8_t *mask, uint8_t *cur)
{
    int n = 0, other = -1;
    for (int b = 0; b < 256; b++) {
        if ((mask[b >> 3] >> (b & 7)) & 1)
            cur[b] = (uint8_t)n++;
        else {
            if (other < 0)
                other = n++;
            cur[b] = (uint8_t)other;
        }
    }
}

static PyObject *joint_from(PyObject *seq_arg, const uint8_t *mask);

static PyObject *joint_classes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "joint_classes takes one sequence of class arrays");
        return NULL;
    }
    return joint_from(args[0], NULL);
}

/* A byte set (an int below 2**256, bit b: byte b) as 32 little-endian bytes; -1 with an error
 * set otherwise (OverflowError past 256 bits or below 0, from int.to_bytes). Sets below 2**63
 * (ASCII: most keywords' and literals') are read without a bytes object. */
static int byte_set_bits(PyObject *v, uint8_t bits[32])
{
    int overflow = 0;
    long long small = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (small == -1 && PyErr_Occurred())
        return -1;
    if (overflow == 0 && small >= 0) {
        memset(bits, 0, 32);
        for (int k = 0; k < 8; k++)
            bits[k] = (uint8_t)((unsigned long long)small >> (8 * k));
        return 0;
    }
    if (small < 0 && overflow == 0) {
        PyErr_SetString(PyExc_OverflowError, "can't convert negative int to unsigned");
        return -1;
    }
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t got = PyLong_AsNativeBytes(
        v, bits, 32,
        Py_ASNATIVEBYTES_LITTLE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER
            | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (got < 0) return -1;
    if (got > 32) {
        PyErr_SetString(PyExc_OverflowError, "a byte set has 256 bits");
        return -1;
    }
    return 0;
#else
    /* (a method call, `int.to_bytes`, cost ~0.3 us a set: a letter's bit is past 63) */
    return _PyLong_AsByteArray((PyLongObject *)v, bits, 32, 1, 0);
#endif
}

/* joint_classes_masked(parts, mask): joint_classes of the parts and of the classes of the byte
 * mask `mask` (an int below 2**256: each byte in it its own class, the others one), without
 * that array made in Python (dfa.py, `union_classes`: a lexer's literal chains, joined as one
 * mask). */
static PyObject *joint_classes_masked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "joint_classes_masked(parts, mask: int)");
        return NULL;
    }
    uint8_t mask[32];
    if (byte_set_bits(args[1], mask) < 0)
        return NULL;
    return joint_from(args[0], mask);
}

static PyObject *joint_from(PyObject *seq_arg, const uint8_t *mask)
{
    int16_t *pair_ids = thread_pair_ids();
    if (pair_ids == NULL)
        return NULL;
    PyObject *seq = PySequence_Fast(seq_arg, "joint_classes takes a sequence of class arrays");
    if (seq == NULL)
        return NULL;
    uint8_t cur[256], out[256];
    int keys[256];
    if (mask != NULL)
        mask_classes(mask, cur);
    else
        memset(cur, 0, sizeof cur);
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_buffer view;
        if (class_buffer(PySequence_Fast_GET_ITEM(seq, i), &view) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        const uint8_t *part = (const uint8_t *)view.buf;
        int n = 0;
        for (int b = 0; b < 256; b++) {
            int key = (cur[b] << 8) | part[b];
            int id = pair_ids[key];
            if (id < 0) {
                id = n;
                pair_ids[key] = (int16_t)n;
                keys[n++] = key;
            }
            out[b] = (uint8_t)id;
        }
        for (int t = 0; t < n; t++)
            pair_ids[keys[t]] = -1;
        PyBuffer_Release(&view);
        memcpy(cur, out, sizeof cur);
    }
    Py_DECREF(seq);
    return PyBytes_FromStringAndSize((const char *)cur, 256);
}

/* class_firsts(classes): the smallest byte of each class present in `classes` (a C-contiguous
 * buffer of 256 uint8 ids), in order of class id, as int64 bytes (dfa.py,
 * `class_representatives`, whose np.unique it replaces: every automaton, union and product
 * asks once, a compile makes dozens). */
static PyObject *class_firsts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "class_firsts takes one class array");
        return NULL;
    }
    Py_buffer view;
    if (class_buffer(args[0], &view) < 0)
        return NULL;
    const uint8_t *cls = (const uint8_t *)view.buf;
    int first[256];
    for (int c = 0; c < 256; c++)
        first[c] = -1;
    for (int b = 255; b >= 0; b--)
        first[cls[b]] = b;
    PyBuffer_Release(&view);
    int64_t out[256];
    int n = 0;
    for (int c = 0; c < 256; c++)
        if (first[c] >= 0)
            out[n++] = first[c];
    return PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)n * (Py_ssize_t)sizeof(int64_t));
}

/* chain_arrays(blocks): everything `literal_dfa` (chains.py) lays out for a chain of blocks,
 * read from the blocks' `row` (1,024 bytes), `width` and `used` (a bitset int): (table, accepting,
 * built, spine, used, byte classes, classes). The table is one row per laid-out state (no spare
 * rows: a chain's states are all laid out here, and most chains are keys, thousands of them
 * held among the recent automata) of 256 int32, -2 but the spine rows (each block's row plus its
 * first id, clamped to -1) and the final state's (all -1); `accepting` one byte per row (the
 * final state's 1), `built` one per laid-out state (the spine's 1); the classes: each byte read
 * its own, the other bytes one, numbered in order of smallest byte (and their count). One call
 * where Python took a dozen steps per key automaton. */
static PyObject *chain_arrays(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "chain_arrays takes a sequence of blocks");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "chain_arrays takes a sequence of blocks");
    if (seq == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL, *table_obj = NULL, *acc_obj = NULL, *built_obj = NULL;
    PyObject *spine_obj = NULL, *used = NULL, *classes_obj = NULL;
    int32_t *spine = NULL;
    if (m < 1 || m > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "chain_arrays: a chain has 1 to 2**20 blocks");
        goto done;
    }
    spine = (int32_t *)malloc(sizeof(int32_t) * (size_t)(m + 1));
    if (spine == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    spine[0] = 0;
    used = PyLong_FromLong(0);
    if (used == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *w = PyObject_GetAttr(items[i], width_name);
        if (w == NULL)
            goto done;
        long width = PyLong_AsLong(w);
        Py_DECREF(w);
        if (width == -1 && PyErr_Occurred())
            goto done;
        if (width < 1 || (long)spine[i] + width >= (1L << 24)) {
            PyErr_SetString(PyExc_ValueError, "chain_arrays: a block's width is out of range");
            goto done;
        }
        spine[i + 1] = spine[i] + (int32_t)width;
        PyObject *u = PyObject_GetAttr(items[i], used_name);
        if (u == NULL)
            goto done;
        PyObject *joined = PyNumber_Or(used, u);
        Py_DECREF(u);
        if (joined == NULL)
            goto done;
        Py_SETREF(used, joined);
    }
    Py_ssize_t n = (Py_ssize_t)spine[m] + 1; /* the laid-out states: one table row each */
    table_obj = PyByteArray_FromStringAndSize(NULL, n * 256 * (Py_ssize_t)sizeof(int32_t));
    acc_obj = PyByteArray_FromStringAndSize(NULL, n);
    built_obj = PyByteArray_FromStringAndSize(NULL, n);
    spine_obj = PyList_New(m + 1);
    if (table_obj == NULL || acc_obj == NULL || built_obj == NULL || spine_obj == NULL)
        goto done;
    int32_t *table = (int32_t *)PyByteArray_AS_STRING(table_obj);
    for (size_t k = 0, cells = (size_t)n * 256; k < cells; k++)
        table[k] = -2;
    uint8_t *acc = (uint8_t *)PyByteArray_AS_STRING(acc_obj);
    memset(acc, 0, (size_t)n);
    acc[spine[m]] = 1;
    uint8_t *built = (uint8_t *)PyByteArray_AS_STRING(built_obj);
    memset(built, 0, (size_t)n);
    for (Py_ssize_t i = 0; i <= m; i++) {
        built[spine[i]] = 1;
        PyObject *v = PyLong_FromLong(spine[i]);
        if (v == NULL)
            goto done;
        PyList_SET_ITEM(spine_obj, i, v);
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *r = PyObject_GetAttr(items[i], row_name);
        if (r == NULL)
            goto done;
        Py_buffer view;
        int got = PyObject_GetBuffer(r, &view, PyBUF_C_CONTIGUOUS);
        Py_DECREF(r);
        if (got < 0)
            goto done;
        if (view.len != 256 * (Py_ssize_t)sizeof(int32_t)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "chain_arrays: a block's row is not 256 int32");
            goto done;
        }
        const int32_t *src = (const int32_t *)view.buf;
        int32_t base = spine[i], *row = table + (size_t)base * 256;
        for (int b = 0; b < 256; b++) {
            int32_t v = src[b] + base;
            row[b] = v < -1 ? -1 : v;
        }
        PyBuffer_Release(&view);
    }
    int32_t *last = table + (size_t)spine[m] * 256;
    for (int b = 0; b < 256; b++)
        last[b] = -1;
    uint8_t bits[32];
    if (byte_set_bits(used, bits) < 0)
        goto done;
    uint8_t cls[256];
    int next = 0, other = -1;
    for (int b = 0; b < 256; b++) {
        if (bits[b >> 3] >> (b & 7) & 1) {
            cls[b] = (uint8_t)next++;
        } else {
            if (other < 0)
                other = next++;
            cls[b] = (uint8_t)other;
        }
    }
    classes_obj = PyBytes_FromStringAndSize((const char *)cls, 256);
    if (classes_obj == NULL)
        goto done;
    out = Py_BuildValue("(OOOOOOi)", table_obj, acc_obj, built_obj, spine_obj, used, classes_obj, next);
done:
    free(spine);
    Py_XDECREF(table_obj);
    Py_XDECREF(acc_obj);
    Py_XDECREF(built_obj);
    Py_XDECREF(spine_obj);
    Py_XDECREF(used);
    Py_XDECREF(classes_obj);
    Py_DECREF(seq);
    return out;
}

/* byte_chain_arrays(masks): `chain_arrays` of a chain of one-byte blocks read from their byte
 * sets (`byte_chain` in _blocks.py: each an int below 2**256), without the blocks made: block i
 * is state i, which reads a byte of masks[i] to state i + 1, the last state accepts. Returns
 * (table, accepting, built) — one row per state, all built; the spine is 0..len(masks) and the
 * classes are those of the masks' union, which the caller has. A deferred keyword's or key's
 * first row, where making its blocks (a numpy array and a row each) cost most of laying it out. */
static PyObject *byte_chain_arrays(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "byte_chain_arrays takes a sequence of byte sets");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "byte_chain_arrays takes a sequence of byte sets");
    if (seq == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL, *table_obj = NULL, *acc_obj = NULL, *built_obj = NULL;
    if (m < 1 || m > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "byte_chain_arrays: a chain has 1 to 2**20 blocks");
        goto done;
    }
    Py_ssize_t n = m + 1;
    table_obj = PyByteArray_FromStringAndSize(NULL, n * 256 * (Py_ssize_t)sizeof(int32_t));
    acc_obj = PyByteArray_FromStringAndSize(NULL, n);
    built_obj = PyByteArray_FromStringAndSize(NULL, n);
    if (table_obj == NULL || acc_obj == NULL || built_obj == NULL)
        goto done;
    int32_t *table = (int32_t *)PyByteArray_AS_STRING(table_obj);
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *v = items[i];
        if (!PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "byte_chain_arrays: a byte set is an int");
            goto done;
        }
        uint8_t bits[32];
        if (byte_set_bits(v, bits) < 0)
            goto done;
        if (!chain_row(table + (size_t)i * 256, bits, (int32_t)i)) {
            PyErr_SetString(PyExc_ValueError, "byte_chain_arrays: a byte set is empty");
            goto done;
        }
    }
    int32_t *last = table + (size_t)m * 256;
    for (int b = 0; b < 256; b++)
        last[b] = -1;
    uint8_t *acc = (uint8_t *)PyByteArray_AS_STRING(acc_obj);
    memset(acc, 0, (size_t)n);
    acc[m] = 1;
    memset(PyByteArray_AS_STRING(built_obj), 1, (size_t)n);
    out = PyTuple_Pack(3, table_obj, acc_obj, built_obj);
done:
    Py_XDECREF(table_obj);
    Py_XDECREF(acc_obj);
    Py_XDECREF(built_obj);
    Py_DECREF(seq);
    return out;
}

/* A new `sg_chain` over the blocks' `c_data` arrays (int32, C-contiguous; the caller keeps
 * them alive), or NULL with an exception set. */
static sg_chain *chain_of_blocks(PyObject *blocks, long long max_states, const char *name)
{
    PyObject *seq = PySequence_Fast(blocks, "a chain's blocks must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const int32_t **ptrs = NULL;
    sg_chain *c = NULL;
    if (m < 1 || m > (1 << 20)) {
        PyErr_Format(PyExc_ValueError, "%s: a chain has 1 to 2**20 blocks", name);
        goto done;
    }
    ptrs = (const int32_t **)malloc((size_t)m * sizeof(int32_t *));
    if (ptrs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *d = PyObject_GetAttr(items[i], data_name);
        if (d == NULL)
            goto done;
        Py_buffer view;
        int got = PyObject_GetBuffer(d, &view, PyBUF_C_CONTIGUOUS);
        Py_DECREF(d);
        if (got < 0)
            goto done;
        const int32_t *data = (const int32_t *)view.buf;
        Py_ssize_t words = view.len / (Py_ssize_t)sizeof(int32_t);
        PyBuffer_Release(&view);  /* (the array outlives the context: the caller keeps it) */
        if (words < 3 || data[0] < 1 || data[1] < 1 || data[1] > data[0]
            || words < 2 + (Py_ssize_t)data[0] + data[1] - 1 + data[0] + 1) {
            PyErr_Format(PyExc_ValueError, "%s: a block's data is malformed", name);
            goto done;
        }
        ptrs[i] = data;
    }
    c = chain_new((int32_t)m, ptrs, (int64_t)max_states);
    if (c == NULL)
        PyErr_NoMemory();
done:
    free((void *)ptrs);
    Py_DECREF(seq);
    return c;
}

/* chain_context(blocks, max_states): a new `sg_chain` (its address; free with sg_chain_free)
 * over the blocks' `c_data` arrays (int32, C-contiguous; the caller keeps them alive). One call
 * where ctypes took a list of addresses and the spine as arrays. */
static PyObject *chain_context(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "chain_context takes blocks and max_states");
        return NULL;
    }
    long long max_states = PyLong_AsLongLong(args[1]);
    if (max_states == -1 && PyErr_Occurred())
        return NULL;
    sg_chain *c = chain_of_blocks(args[0], max_states, "chain_context");
    if (c == NULL)
        return NULL;
    PyObject *out = PyLong_FromVoidPtr(c);
    if (out == NULL)
        sg_chain_free(c);
    return out;
}

/* The NFA builder (`_thompson.c`), for `nfa_arrays`. */
typedef struct sg_nfa sg_nfa;
sg_nfa *sg_nfa_build(const int8_t *typ, const int64_t *a, const int64_t *b, const int32_t *coff,
                     const int32_t *ch, int32_t root, const uint8_t *pool_nonempty, int64_t *out);
void sg_nfa_copy(const sg_nfa *s, int8_t *kind, int32_t *node, int32_t *next, uint8_t *live,
                 int32_t *eoff, int32_t *eflat);
void sg_nfa_free(sg_nfa *s);

/* nfa_arrays(typ, a, b, offsets, children, top, nonempty): the NFA `sg_nfa_build` makes of a
 * regex program (`nfa.Program`: its five tables as int64 buffers, `top` its root; `nonempty`
 * the pool's per-node flags, uint8), as (start, kind, node, next, live, eps offsets, eps):
 * bytes of int8, int32, int32, uint8, int32 and int32 (eps at least one entry). One call where
 * ctypes took three and numpy a dozen: a terminal's NFA is built at its first row, inside the
 * first mask that reads it, and that set-up cost more than building a small NFA. */
static PyObject *nfa_arrays(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "nfa_arrays(typ, a, b, offsets, children, top, nonempty)");
        return NULL;
    }
    long top = PyLong_AsLong(args[5]);
    if (top == -1 && PyErr_Occurred()) return NULL;
    Py_buffer v[6];
    const int which[6] = {0, 1, 2, 3, 4, 6};
    int taken = 0;
    PyObject *result = NULL;
    int8_t *typ8 = NULL;
    int32_t *off32 = NULL, *ch32 = NULL;
    for (; taken < 6; taken++)
        if (PyObject_GetBuffer(args[which[taken]], &v[taken], PyBUF_C_CONTIGUOUS) < 0) goto done;
    Py_ssize_t n_nodes = v[0].len / 8, n_children = v[4].len / 8;
    if (v[0].len % 8 || v[1].len != v[0].len || v[2].len != v[0].len
        || v[3].len != (n_nodes + 1) * 8 || v[4].len % 8 || top < 0 || top >= n_nodes) {
        PyErr_SetString(PyExc_ValueError, "nfa_arrays: inconsistent program tables");
        goto done;
    }
    const int64_t *t64 = (const int64_t *)v[0].buf, *o64 = (const int64_t *)v[3].buf;
    const int64_t *c64 = (const int64_t *)v[4].buf;
    typ8 = (int8_t *)malloc((size_t)(n_nodes ? n_nodes : 1));
    off32 = (int32_t *)malloc((size_t)(n_nodes + 1) * 4);
    ch32 = (int32_t *)malloc((size_t)(n_children ? n_children : 1) * 4);
    if (!typ8 || !off32 || !ch32) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_nodes; i++) typ8[i] = (int8_t)t64[i];
    for (Py_ssize_t i = 0; i <= n_nodes; i++) off32[i] = (int32_t)o64[i];
    for (Py_ssize_t i = 0; i < n_children; i++) ch32[i] = (int32_t)c64[i];
    if (!n_children) ch32[0] = 0;
    int64_t out[3];
    sg_nfa *nfa = sg_nfa_build(typ8, (const int64_t *)v[1].buf, (const int64_t *)v[2].buf, off32,
                               ch32, (int32_t)top, (const uint8_t *)v[5].buf, out);
    if (!nfa) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = (Py_ssize_t)out[0], n_eps = (Py_ssize_t)out[1];
    PyObject *kind = PyBytes_FromStringAndSize(NULL, n);
    PyObject *node = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *next = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *live = PyBytes_FromStringAndSize(NULL, n);
    PyObject *eoff = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *eps = PyBytes_FromStringAndSize(NULL, (n_eps ? n_eps : 1) * 4);
    if (kind && node && next && live && eoff && eps) {
        if (!n_eps) memset(PyBytes_AS_STRING(eps), 0, 4);
        sg_nfa_copy(nfa, (int8_t *)PyBytes_AS_STRING(kind), (int32_t *)PyBytes_AS_STRING(node),
                    (int32_t *)PyBytes_AS_STRING(next), (uint8_t *)PyBytes_AS_STRING(live),
                    (int32_t *)PyBytes_AS_STRING(eoff), (int32_t *)PyBytes_AS_STRING(eps));
        result = Py_BuildValue("(LNNNNNN)", (long long)out[2], kind, node, next, live, eoff, eps);
    } else {
        Py_XDECREF(kind), Py_XDECREF(node), Py_XDECREF(next);
        Py_XDECREF(live), Py_XDECREF(eoff), Py_XDECREF(eps);
    }
    sg_nfa_free(nfa);
done:
    free(typ8), free(off32), free(ch32);
    while (taken--) PyBuffer_Release(&v[taken]);
    return result;
}

/* The byte chains among a new union's components (`union_context`'s `chains`: per component
 * None, or the byte sets of a chain of one-byte blocks whose automaton has no rows yet): kept
 * as bits, laid out here when a row first needs them (`lay_out_chain`). 0, or -1 with an
 * exception set. */
static int union_chains(sg_union *u, PyObject *chains, Py_ssize_t n)
{
    PyObject *seq = PySequence_Fast(chains, "union_context: chains must be a sequence");
    if (!seq) return -1;
    int r = 0;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_SetString(PyExc_ValueError, "union_context: one chain (or None) per component");
        r = -1;
    }
    for (Py_ssize_t i = 0; !r && i < n; i++) {
        PyObject *c = PySequence_Fast_GET_ITEM(seq, i);
        if (c == Py_None) continue;
        if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) < 1 || PyTuple_GET_SIZE(c) > (1 << 20)) {
            PyErr_SetString(PyExc_ValueError, "union_context: a chain is a tuple of byte sets");
            r = -1;
            break;
        }
        Py_ssize_t m = PyTuple_GET_SIZE(c);
        uint8_t *bits = (uint8_t *)malloc((size_t)m * 32);
        if (!bits) {
            PyErr_NoMemory();
            r = -1;
            break;
        }
        for (Py_ssize_t k = 0; !r && k < m; k++) {
            PyObject *v = PyTuple_GET_ITEM(c, k);
            if (!PyLong_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "union_context: a byte set is an int");
                r = -1;
            } else if (byte_set_bits(v, bits + (size_t)k * 32) < 0) {
                r = -1;
            }
        }
        if (r) {
            free(bits);
            break;
        }
        sg_part *p = &u->parts[i];
        free(p->chain_bits);
        p->chain_bits = bits;
        p->chain_m = (int32_t)m;
    }
    Py_DECREF(seq);
    return r;
}

/* union_context(fields, classes, max_states, mode, starts, lo, hi[, chains]): a new `sg_union`
 * of len(fields) components, each told its arrays and C builder by its `part_fields` (bytes of
 * five int64: table, accepting, capacity, builder, context), over `classes` (256 uint8), in
 * `mode` (starts: each component's start, for the modes other than a union; None for a union;
 * chains: None, or per component None or the byte sets of a chain it lays out itself,
 * `union_chains`): (a capsule that frees it, its address). One call where ctypes took three and `addresses` one:
 * every grammar's lexer and every object's "other keys" go to C inside a first mask. */
static PyObject *union_context(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "union_context(fields, classes, max_states, mode, starts, lo, hi"
                        "[, chains])");
        return NULL;
    }
    long long max_states = PyLong_AsLongLong(args[2]);
    long mode = PyLong_AsLong(args[3]);
    long long lo = PyLong_AsLongLong(args[5]);
    long long hi = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "union_context: fields must be a sequence");
    if (!seq) return NULL;
    PyObject *result = NULL;
    sg_union *u = NULL;
    int32_t *starts = NULL;
    Py_buffer classes;
    int have_classes = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "union_context: one component at least");
        goto done;
    }
    if (class_buffer(args[1], &classes) < 0) goto done;
    have_classes = 1;
    u = sg_union_new((int32_t)n, (const uint8_t *)classes.buf, (int64_t)max_states);
    if (!u) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(f) || PyBytes_GET_SIZE(f) != 5 * 8) {
            PyErr_SetString(PyExc_ValueError, "union_context: a component's fields are 40 bytes");
            goto done;
        }
        sg_union_set_parts_from(u, (int32_t)i, (const int64_t *)PyBytes_AS_STRING(f));
    }
    if (nargs == 8 && args[7] != Py_None && union_chains(u, args[7], n) < 0) goto done;
    if (mode != U_UNION) {
        PyObject *sseq = PySequence_Fast(args[4], "union_context: starts must be a sequence");
        if (!sseq) goto done;
        int bad = PySequence_Fast_GET_SIZE(sseq) != n;
        starts = bad ? NULL : (int32_t *)malloc((size_t)n * sizeof(int32_t));
        for (Py_ssize_t i = 0; !bad && starts && i < n; i++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(sseq, i));
            if (v == -1 && PyErr_Occurred()) bad = 1;
            starts[i] = (int32_t)v;
        }
        Py_DECREF(sseq);
        if (bad || !starts) {
            if (!PyErr_Occurred()) {
                if (bad) PyErr_SetString(PyExc_ValueError, "union_context: one start per component");
                else PyErr_NoMemory();
            }
            goto done;
        }
        if (sg_union_set_mode(u, (int32_t)mode, starts, lo, hi) != 0) {
            PyErr_Format(PyExc_ValueError, "bad composed DFA mode %ld over %zd parts", mode, n);
            goto done;
        }
    }
    {
        PyObject *capsule = owning_capsule(u, 1);
        if (!capsule) goto done;
        result = Py_BuildValue("(NN)", capsule, PyLong_FromVoidPtr(u));
        u = NULL;  /* (the capsule owns it) */
    }
done:
    if (u) sg_union_free(u);
    free(starts);
    if (have_classes) PyBuffer_Release(&classes);
    Py_DECREF(seq);
    return result;
}

/* The writable buffers of a DFA's table (int32 [rows, 256]) and accepting flags (uint8
 * [rows]) a context is to take: 0 and their rows, or -1 with an exception set (none held). */
static int table_buffers(PyObject *table, PyObject *accepting, Py_buffer *t, Py_buffer *a,
                         Py_ssize_t *rows, const char *name)
{
    if (PyObject_GetBuffer(table, t, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return -1;
    if (PyObject_GetBuffer(accepting, a, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(t);
        return -1;
    }
    *rows = t->len / (256 * 4);
    if (t->len % (256 * 4) || a->len != *rows) {
        PyBuffer_Release(t);
        PyBuffer_Release(a);
        PyErr_Format(PyExc_ValueError, "%s: inconsistent arrays", name);
        return -1;
    }
    return 0;
}

/* adopt_table(address, table, accepting, clean, laid_out): a C context (any kind: each begins
 * with its `sg_states`) takes the DFA's table and accepting arrays (its states so far copied in;
 * rows from `clean` on filled as their states are created), the budget checked for its states
 * so far, and — `laid_out` >= 0, a chain's context only — its first `laid_out` states laid out:
 * returns sg_chain_lay_out's result (the count, or a negative stop), else 0. One call where
 * ctypes took three and `addresses` one: a key's automaton goes to C inside many first masks. */
static PyObject *adopt_table(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "adopt_table(address, table, accepting, clean, laid_out)");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(args[0]);
    long long clean = PyLong_AsLongLong(args[3]);
    long long laid_out = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (ctx == NULL) {
        PyErr_SetString(PyExc_ValueError, "adopt_table: no context at address 0");
        return NULL;
    }
    Py_buffer t, a;
    Py_ssize_t rows;
    if (table_buffers(args[1], args[2], &t, &a, &rows, "adopt_table") < 0) return NULL;
    PyObject *result = NULL;
    if (clean < 0 || clean > rows) {
        PyErr_SetString(PyExc_ValueError, "adopt_table: inconsistent arrays");
        goto done;
    }
    sg_states *st = (sg_states *)ctx;
    pthread_mutex_lock(&st->lock);
    int64_t n_states = st->n_states;
    pthread_mutex_unlock(&st->lock);
    if (n_states > rows) {
        PyErr_SetString(PyExc_ValueError, "adopt_table: the table is smaller than the states");
        goto done;
    }
    sg_states_set_table(st, (int32_t *)t.buf, (uint8_t *)a.buf, rows, clean);
    sg_states_budget_checked(st);
    result = PyLong_FromLongLong(laid_out >= 0 ? (long long)sg_chain_lay_out((sg_chain *)ctx, laid_out)
                                               : 0);
done:
    PyBuffer_Release(&t);
    PyBuffer_Release(&a);
    return result;
}

/* chain_started(blocks, max_states, table, accepting): a deferred chain of blocks laid out
 * straight into a C context (`NativeChain`): a new `sg_chain` over the blocks' `c_data`, with
 * the DFA's fresh table and accepting arrays installed (rows filled as their states are made:
 * every row is C's to build, the spine's too) and the laid-out states made (ids 0.. their own
 * elements, the final one accepting). Returns (capsule that frees the context, its address,
 * sg_chain_lay_out's result: the count of laid-out states, or a negative stop to act on before
 * laying out again). One call where the first row of a key with escapes laid the chain out in
 * Python (`chain_arrays`) and a later first visit handed it to C (`chain_context`, a table
 * grown and copied, `adopt_table`): a union of keys needs their rows past the spine at once. */
static PyObject *chain_started(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "chain_started(blocks, max_states, table, accepting)");
        return NULL;
    }
    long long max_states = PyLong_AsLongLong(args[1]);
    if (max_states == -1 && PyErr_Occurred()) return NULL;
    Py_buffer t, a;
    Py_ssize_t rows;
    if (table_buffers(args[2], args[3], &t, &a, &rows, "chain_started") < 0) return NULL;
    PyObject *result = NULL;
    sg_chain *c = chain_of_blocks(args[0], max_states, "chain_started");
    if (c == NULL) goto done;
    PyObject *capsule = owning_capsule(c, 2);
    if (capsule == NULL) {
        sg_chain_free(c);
        goto done;
    }
    sg_states_set_table(&c->st, (int32_t *)t.buf, (uint8_t *)a.buf, rows, 0);
    sg_states_budget_checked(&c->st);
    int64_t laid = sg_chain_lay_out(c, (int64_t)c->spine[c->n_blocks] + 1);
    result = Py_BuildValue("(NNL)", capsule, PyLong_FromVoidPtr(c), (long long)laid);
done:
    PyBuffer_Release(&t);
    PyBuffer_Release(&a);
    return result;
}

/* subset_started(arrays, p, max_states, table, accepting, nfa_start): a new `sg_subset` over a
 * materialised NFA's arrays (`arrays`: kind, live, node, next, eps offsets, eps, moves offsets,
 * lo, hi, child, classes, as `NativeSubset` keeps them alive), with the DFA's table and
 * accepting arrays installed (every row clean), the budget checked for the states so far and
 * the start made from NFA state `nfa_start`: (capsule that frees the context, its address, the
 * start as sg_subset_start returns it). One call where ctypes took four and `addresses` one: a
 * deferred terminal's automaton moves to C inside the first mask that reads it. */
static PyObject *subset_started(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "subset_started(arrays, p, max_states, table, accepting, nfa_start)");
        return NULL;
    }
    long long p = PyLong_AsLongLong(args[1]);
    long long max_states = PyLong_AsLongLong(args[2]);
    long nfa_start = PyLong_AsLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "subset_started: arrays must be a sequence");
    if (!seq) return NULL;
    PyObject *result = NULL;
    Py_buffer v[11], t, a;
    Py_ssize_t rows;
    int taken = 0, have_table = 0;
    if (PySequence_Fast_GET_SIZE(seq) != 11) {
        PyErr_SetString(PyExc_ValueError, "subset_started: eleven NFA arrays");
        goto done;
    }
    for (; taken < 11; taken++)
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, taken), &v[taken],
                               PyBUF_C_CONTIGUOUS) < 0)
            goto done;
    if (table_buffers(args[3], args[4], &t, &a, &rows, "subset_started") < 0) goto done;
    have_table = 1;
    {
        Py_ssize_t n = v[0].len;
        if (v[1].len != n || v[2].len != n * 4 || v[3].len != n * 4 || v[4].len != (n + 1) * 4
            || p < 1 || v[6].len != (p + 1) * 4 || v[10].len != 256 || rows < 1
            || nfa_start < 0 || nfa_start >= n || n > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "subset_started: inconsistent arrays");
            goto done;
        }
        sg_subset *s = sg_subset_new(
            (int32_t)n, (const int8_t *)v[0].buf, (const uint8_t *)v[1].buf,
            (const int32_t *)v[2].buf, (const int32_t *)v[3].buf, (const int32_t *)v[4].buf,
            (const int32_t *)v[5].buf, (int64_t)p, (const int32_t *)v[6].buf,
            (const int32_t *)v[7].buf, (const int32_t *)v[8].buf, (const int32_t *)v[9].buf,
            (const uint8_t *)v[10].buf, (int64_t)max_states);
        if (!s) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject *capsule = owning_capsule(s, 0);
        if (!capsule) {
            sg_subset_free(s);
            goto done;
        }
        sg_states_set_table(&s->st, (int32_t *)t.buf, (uint8_t *)a.buf, rows, rows);
        sg_states_budget_checked(&s->st);
        int64_t start = sg_subset_start(s, (int32_t)nfa_start);
        result = Py_BuildValue("(NNL)", capsule, PyLong_FromVoidPtr(s), (long long)start);
    }
done:
    while (taken--) PyBuffer_Release(&v[taken]);
    if (have_table) {
        PyBuffer_Release(&t);
        PyBuffer_Release(&a);
    }
    Py_DECREF(seq);
    return result;
}

/* nfa_started(typ, a, b, offsets, children, top, leaf_at, pieces, classes, max_states, table,
 * accepting): a deferred terminal's NFA and its C subset context in one call, where Python
 * placed the leaves' pieces in a fresh pool (`Pool.extend`), joined them (`join_pieces`),
 * built the NFA (`nfa_arrays`) and started the context (`subset_started`) — about thirty
 * Python-level steps around 3 µs of C, inside the first mask that reads the terminal. The
 * program's tables are int64 buffers (`nfa.Program`), `leaf_at` the entries of its leaves (in
 * `pieces`' order), `classes` the 256 byte classes. Returns (bases, nfa_start, arrays, capsule,
 * address, start): the pieces' first nodes (list), the NFA's start, the eleven arrays the
 * context reads (`_subset_arrays`' order, as bytes: the pool's joined moves among them), and
 * what `subset_started` returns. */
static PyObject *nfa_started(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError,
                        "nfa_started(typ, a, b, offsets, children, top, leaf_at, pieces, classes, "
                        "max_states, table, accepting)");
        return NULL;
    }
    PyObject *pieces = PySequence_Fast(args[7], "nfa_started: pieces must be a sequence");
    if (!pieces) return NULL;
    PyObject *leaf_at = PySequence_Fast(args[6], "nfa_started: leaf_at must be a sequence");
    PyObject *bases = NULL, *joined = NULL, *arg_a = NULL, *built = NULL, *arrays = NULL;
    PyObject *started = NULL, *result = NULL, *size_obj = NULL;
    Py_buffer a_view;
    int have_a = 0;
    if (!leaf_at) goto done;
    Py_ssize_t n_pieces = PySequence_Fast_GET_SIZE(pieces);
    if (PySequence_Fast_GET_SIZE(leaf_at) != n_pieces) {
        PyErr_SetString(PyExc_ValueError, "nfa_started: one leaf entry per piece");
        goto done;
    }
    /* the pieces placed one after another in a fresh pool: their first nodes */
    bases = PyList_New(n_pieces);
    if (!bases) goto done;
    Py_ssize_t size = 0;
    for (Py_ssize_t k = 0; k < n_pieces; k++) {
        PyObject *base = PyLong_FromSsize_t(size);
        if (!base) goto done;
        PyList_SET_ITEM(bases, k, base);
        PyObject *piece_size = PyObject_GetAttr(PySequence_Fast_GET_ITEM(pieces, k), str_size);
        if (!piece_size) goto done;
        Py_ssize_t n = PyLong_AsSsize_t(piece_size);
        Py_DECREF(piece_size);
        if (n < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative piece size");
            goto done;
        }
        size += n;
    }
    size_obj = PyLong_FromSsize_t(size);
    if (!size_obj) goto done;
    {
        PyObject *join_args[3] = {pieces, bases, size_obj};
        joined = join_pieces(self, join_args, 3);
        if (!joined) goto done;
    }
    /* the program's `a` column with each leaf's entry set to its piece's first node */
    if (PyObject_GetBuffer(args[1], &a_view, PyBUF_C_CONTIGUOUS) < 0) goto done;
    have_a = 1;
    if (a_view.len % 8) {
        PyErr_SetString(PyExc_ValueError, "nfa_started: a must be int64");
        goto done;
    }
    arg_a = PyBytes_FromStringAndSize((const char *)a_view.buf, a_view.len);
    if (!arg_a) goto done;
    {
        int64_t *a64 = (int64_t *)PyBytes_AS_STRING(arg_a);
        Py_ssize_t n_entries = a_view.len / 8;
        for (Py_ssize_t k = 0; k < n_pieces; k++) {
            Py_ssize_t at = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(leaf_at, k));
            if (at < 0 || at >= n_entries) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "nfa_started: a leaf entry out of range");
                goto done;
            }
            a64[at] = (int64_t)PyLong_AsSsize_t(PyList_GET_ITEM(bases, k));
        }
    }
    {
        PyObject *nfa_args[7] = {args[0], arg_a, args[2], args[3], args[4], args[5],
                                 PyTuple_GET_ITEM(joined, 4)};
        built = nfa_arrays(self, nfa_args, 7);
        if (!built) goto done;
    }
    /* (kind, live, node, next, eps offsets, eps, moves, lo, hi, child, classes) */
    arrays = PyTuple_Pack(11, PyTuple_GET_ITEM(built, 1), PyTuple_GET_ITEM(built, 4),
                          PyTuple_GET_ITEM(built, 2), PyTuple_GET_ITEM(built, 3),
                          PyTuple_GET_ITEM(built, 5), PyTuple_GET_ITEM(built, 6),
                          PyTuple_GET_ITEM(joined, 0), PyTuple_GET_ITEM(joined, 1),
                          PyTuple_GET_ITEM(joined, 2), PyTuple_GET_ITEM(joined, 3), args[8]);
    if (!arrays) goto done;
    {
        PyObject *p = PyLong_FromSsize_t(size > 0 ? size : 1);
        if (!p) goto done;
        PyObject *start_args[6] = {arrays, p, args[9], args[10], args[11],
                                   PyTuple_GET_ITEM(built, 0)};
        started = subset_started(self, start_args, 6);
        Py_DECREF(p);
        if (!started) goto done;
    }
    result = Py_BuildValue("(OOOOOO)", bases, PyTuple_GET_ITEM(built, 0), arrays,
                           PyTuple_GET_ITEM(started, 0), PyTuple_GET_ITEM(started, 1),
                           PyTuple_GET_ITEM(started, 2));
done:
    if (have_a) PyBuffer_Release(&a_view);
    Py_XDECREF(started);
    Py_XDECREF(arrays);
    Py_XDECREF(built);
    Py_XDECREF(arg_a);
    Py_XDECREF(joined);
    Py_XDECREF(size_obj);
    Py_XDECREF(bases);
    Py_XDECREF(leaf_at);
    Py_DECREF(pieces);
    return result;
}

static PyMethodDef methods[] = {
    {"addresses", (PyCFunction)(void (*)(void))addresses, METH_FASTCALL,
     "addresses(*arrays): each C-contiguous buffer's data address"},
    {"or_words", (PyCFunction)(void (*)(void))or_words, METH_FASTCALL,
     "or_words(words, indices, values): words[indices] |= values (uint32, int64, uint32)"},
    {"first_byte_dead", (PyCFunction)(void (*)(void))first_byte_dead, METH_FASTCALL,
     "first_byte_dead(row, by_byte, out): the text tokens whose first byte is dead in row"},
    {"or_and", (PyCFunction)(void (*)(void))or_and, METH_FASTCALL,
     "or_and(out, a, b): out |= a & b over 32-bit words"},
    {"byte_classes", (PyCFunction)(void (*)(void))byte_classes, METH_FASTCALL,
     "byte_classes(ranges): bytes(256), the coarsest byte partition refining every range"},
    {"program_tables", (PyCFunction)(void (*)(void))program_tables, METH_FASTCALL,
     "program_tables(root, node types): a regex AST's flat program (nfa.Program)"},
    {"join_pieces", (PyCFunction)(void (*)(void))join_pieces, METH_FASTCALL,
     "join_pieces(pieces, bases, size): an NFA pool's arrays (nfa.Pool.arrays)"},
    {"class_firsts", (PyCFunction)(void (*)(void))class_firsts, METH_FASTCALL,
     "class_firsts(classes): int64 bytes, the smallest byte of each class"},
    {"context_capsule", (PyCFunction)(void (*)(void))context_capsule, METH_FASTCALL,
     "context_capsule(kind, address): a capsule that frees the C context when collected"},
    {"joint_classes_masked", (PyCFunction)(void (*)(void))joint_classes_masked, METH_FASTCALL,
     "joint_classes_masked(parts, mask): joint_classes of the parts and of a byte mask's classes"},
    {"joint_classes", (PyCFunction)(void (*)(void))joint_classes, METH_FASTCALL,
     "joint_classes(parts): bytes(256), the byte classes refining every part's"},
    {"check_snapshots", (PyCFunction)(void (*)(void))check_snapshots, METH_FASTCALL,
     "check_snapshots(rows, byte_classes, states, classes): None, or why they are bad"},
    {"chain_started", (PyCFunction)(void (*)(void))chain_started, METH_FASTCALL,
     "chain_started(blocks, max_states, table, accepting): (capsule, address, laid out)"},
    {"chain_context", (PyCFunction)(void (*)(void))chain_context, METH_FASTCALL,
     "chain_context(blocks, max_states): a new C chain context's address (sg_chain_free)"},
    {"byte_chain_arrays", (PyCFunction)(void (*)(void))byte_chain_arrays, METH_FASTCALL,
     "byte_chain_arrays(masks): a chain of one-byte blocks' table, accepting, built"},
    {"chain_arrays", (PyCFunction)(void (*)(void))chain_arrays, METH_FASTCALL,
     "chain_arrays(blocks): a chain's table, accepting, built, spine, used, classes, count"},
    {"union_context", (PyCFunction)(void (*)(void))union_context, METH_FASTCALL,
     "union_context(fields, classes, max_states, mode, starts, lo, hi): a new union context "
     "(capsule, address)"},
    {"adopt_table", (PyCFunction)(void (*)(void))adopt_table, METH_FASTCALL,
     "adopt_table(address, table, accepting, clean, laid_out): a context takes a DFA's "
     "arrays (and a chain lays out its first states)"},
    {"subset_started", (PyCFunction)(void (*)(void))subset_started, METH_FASTCALL,
     "subset_started(arrays, p, max_states, table, accepting, nfa_start): a started subset "
     "construction context (capsule, address, start)"},
    {"nfa_started", (PyCFunction)(void (*)(void))nfa_started, METH_FASTCALL,
     "nfa_started(typ, a, b, offsets, children, top, leaf_at, pieces, classes, max_states, "
     "table, accepting): a deferred terminal's NFA and its started subset context"},
    {"nfa_arrays", (PyCFunction)(void (*)(void))nfa_arrays, METH_FASTCALL,
     "nfa_arrays(typ, a, b, offsets, children, top, nonempty): a program's NFA as bytes"},
    {"union_parts_in", (PyCFunction)(void (*)(void))union_parts_in, METH_FASTCALL,
     "union_parts_in(ctx, state, wanted): a union state's (component, state) pairs of the "
     "wanted components, or None"},
    {"states_key", (PyCFunction)(void (*)(void))states_key, METH_FASTCALL,
     "states_key(ctx, state): a state's element set as a tuple of ints, or None"},
    {"union_accepted", (PyCFunction)(void (*)(void))union_accepted, METH_FASTCALL,
     "union_accepted(ctx, state): a union state's accepting components, or None"},
    {"union_intern", (PyCFunction)(void (*)(void))union_intern, METH_FASTCALL,
     "A union state from its sorted elements, created if new."},
    {"alphabet_of_ranges", (PyCFunction)(void (*)(void))alphabet_of_ranges, METH_FASTCALL,
     "The bytes some range covers, as a bitset."},
    {"union_needs", (PyCFunction)(void (*)(void))union_needs, METH_FASTCALL,
     "Every component row a union's row build found missing."},
    {"union_set_part", (PyCFunction)(void (*)(void))union_set_part, METH_FASTCALL,
     "Point a union at one component's current arrays and builder."},
    {"uninitialised", (PyCFunction)(void (*)(void))uninitialised, METH_FASTCALL,
     "uninitialised(nbytes): a bytearray whose contents are not written"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_subset", NULL, -1, methods};

PyMODINIT_FUNC PyInit__subset(void)
{
    if (intern_names() < 0)
        return NULL;
    /* Safe without the GIL: builds run under each context's mutex, names are interned above,
     * scratch tables are per thread (docs/design/matcher.md, free-threaded builds) */
    return sg_without_gil(PyModule_Create(&module));
}
