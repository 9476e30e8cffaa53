/* Subset construction of structgen's lazy regex DFAs, in C (see dfa.py, `NFASource`).
 *
 * A DFA state is a sorted set of int64 *elements*: `next * P + node` ("inside a character at
 * pool DAG node `node`, continuing at NFA state `next`", P = pool size) or -1 (the match state),
 * exactly the elements of the Python `NFASource`. `sg_subset_build` expands one state: per byte
 * class it collects the moved elements, closes the completed characters over epsilon moves,
 * interns the resulting set (an open-addressing hash table) and writes the row into the DFA's
 * `int32 [capacity, 256]` table (-1 dead, -2 not built), byte 0 last, so a row whose byte 0 is
 * not -2 is complete.
 *
 * Python owns the table and the accepting array and keeps the limits: when a new state would
 * need a bigger table, pass `max_states`, or is due for a compile-budget check (every 1024
 * states) the build stops and returns a code; Python acts and calls again (interning is
 * idempotent, so a retried row gives the same ids). A mutex serialises builds, because the C
 * trie walk builds rows directly (`sg_subset_walk_build`) with the GIL released.
 *
 * Loaded with ctypes (see _native_subset.py); the module init only makes the file importable.
 */
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SG_OK 0
#define SG_GROW 1
#define SG_LIMIT 2
#define SG_BUDGET 3
#define SG_NOMEM 4
#define SG_BAD_STATE 5

#define K_SPLIT 0
#define K_CONSUME 1

typedef struct {
    /* read by Python through ctypes: keep these first and in this order */
    int64_t n_states;
    int64_t capacity;
    int32_t *table;
    uint8_t *accepting;
    int64_t max_states;
    int64_t budget_checked; /* the state count at which the budget was last checked */
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
    /* the states: elements in an arena */
    int64_t *elems;
    int64_t elems_len, elems_cap;
    int64_t *set_off; /* per state (n_states + 1 used) */
    uint64_t *set_hash;
    int64_t sets_cap;
    int32_t *slots; /* hash table of state ids, -1 empty */
    int64_t n_slots;
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
    pthread_mutex_t lock;
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

void sg_subset_free(sg_subset *s)
{
    if (!s) return;
    pthread_mutex_destroy(&s->lock);
    free(s->mc_off); free(s->mc); free(s->elems); free(s->set_off); free(s->set_hash);
    free(s->slots); free(s->items); free(s->count); free(s->start); free(s->target);
    free(s->seen); free(s->stack);
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
    pthread_mutex_init(&s->lock, NULL);
    s->n = n; s->p = p; s->kind = kind; s->live = live; s->node = node; s->next = next;
    s->eps_off = eps_off; s->eps = eps; s->mv_off = mv_off; s->mv_child = mv_child;
    s->max_states = max_states;
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
    s->n_slots = 1024;
    s->slots = (int32_t *)malloc((size_t)s->n_slots * sizeof(int32_t));
    s->sets_cap = 256;
    s->set_off = (int64_t *)malloc((size_t)(s->sets_cap + 1) * sizeof(int64_t));
    s->set_hash = (uint64_t *)malloc((size_t)s->sets_cap * sizeof(uint64_t));
    if (!s->mc_off || !s->mc || !s->count || !s->start || !s->seen || !s->stack || !s->slots
        || !s->set_off || !s->set_hash) {
        sg_subset_free(s);
        return NULL;
    }
    memset(s->slots, 0xFF, (size_t)s->n_slots * sizeof(int32_t));
    s->set_off[0] = 0;
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

/* The id of the (sorted, unique, non-empty) set a[0..n), creating it if needed: >= 0, or
 * -SG_GROW / -SG_LIMIT / -SG_BUDGET / -SG_NOMEM. */
static int64_t intern(sg_subset *s, const int64_t *a, int64_t n)
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
    s->accepting[sid] = a[0] == -1;
    __atomic_store_n(&s->n_states, sid + 1, __ATOMIC_RELEASE);
    return sid;
}

/* The start state (the closure of NFA state `q`): its id (>= 0), -1 for an empty language (no
 * state is created), or a negative code -1 - SG_x. */
int64_t sg_subset_start(sg_subset *s, int32_t q)
{
    pthread_mutex_lock(&s->lock);
    next_stamp(s);
    int64_t len = 0, r;
    if (closure(s, q, &len)) r = -1 - SG_NOMEM;
    else if (len == 0) r = -1;
    else {
        len = sort_unique(s->target, len);
        r = intern(s, s->target, len);
        if (r < 0) r = -1 + r;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* Creates the state of a sorted, unique, non-empty element set (unpickling); id or -1 - SG_x. */
int64_t sg_subset_intern(sg_subset *s, const int64_t *a, int64_t n)
{
    pthread_mutex_lock(&s->lock);
    int64_t r = n > 0 ? intern(s, a, n) : -SG_BAD_STATE;
    pthread_mutex_unlock(&s->lock);
    return r < 0 ? -1 + r : r;
}

static int build_locked(sg_subset *s, int32_t state)
{
    if (state < 0 || state >= s->n_states) return SG_BAD_STATE;
    int32_t *out = s->table + (int64_t)state * 256;
    if (out[0] != -2) return SG_OK;  /* built meanwhile */
    const int64_t *key = s->elems + s->set_off[state];
    int64_t klen = s->set_off[state + 1] - s->set_off[state];
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
        int64_t sid = intern(s, s->target, len);
        if (sid < 0) return (int)-sid;
        s->row[c] = (int32_t)sid;
    }
    for (int b = 255; b >= 1; b--) out[b] = s->row[s->classes[b]];
    __atomic_store_n(&out[0], s->row[s->classes[0]], __ATOMIC_RELEASE);
    return SG_OK;
}

/* Builds the row of `state`: SG_OK, or SG_GROW (a bigger table first: sg_subset_set_table),
 * SG_LIMIT (max_states reached), SG_BUDGET (check the compile budget, then
 * sg_subset_budget_checked), SG_NOMEM, SG_BAD_STATE. States created before the stop stay. */
int sg_subset_build(sg_subset *s, int32_t state)
{
    pthread_mutex_lock(&s->lock);
    int r = build_locked(s, state);
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* The trie walk's entry: builds the row and hands back the current arrays; nonzero means
 * "let Python build it" (it handles every stop code). */
int sg_subset_walk_build(sg_subset *s, int32_t state, const int32_t **table,
                         const uint8_t **accepting)
{
    pthread_mutex_lock(&s->lock);
    int r = build_locked(s, state);
    *table = s->table;
    *accepting = s->accepting;
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* Installs bigger arrays (filled with -2 / 0): copies the states so far and switches. */
void sg_subset_set_table(sg_subset *s, int32_t *table, uint8_t *accepting, int64_t capacity)
{
    pthread_mutex_lock(&s->lock);
    if (s->table && s->n_states) {
        memcpy(table, s->table, (size_t)s->n_states * 256 * sizeof(int32_t));
        memcpy(accepting, s->accepting, (size_t)s->n_states);
    }
    s->table = table;
    s->accepting = accepting;
    s->capacity = capacity;
    pthread_mutex_unlock(&s->lock);
}

void sg_subset_budget_checked(sg_subset *s)
{
    pthread_mutex_lock(&s->lock);
    s->budget_checked = s->n_states;
    pthread_mutex_unlock(&s->lock);
}

/* The elements of `state` into out[0..cap); returns their number (-1: no such state). */
int64_t sg_subset_key(sg_subset *s, int32_t state, int64_t *out, int64_t cap)
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_subset", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__subset(void) { return PyModule_Create(&module); }
