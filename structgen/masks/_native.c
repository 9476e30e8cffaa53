/* The token-trie walk of structgen's mask computation, in C.
 *
 * Tokens are sorted lexicographically; lcp[i] is the length of the prefix token i shares with
 * token i-1. Walking them in order against a DFA transition table visits each trie node once:
 * the states of the current prefix stay on a stack, and a token whose shared prefix already died
 * is skipped without reading its bytes (a whole first-byte bucket at once via skip0).
 *
 * The walk covers tokens [lo, hi) that all share their first `base` bytes (a trie subtree; the
 * whole vocabulary is lo=0, hi=n, base=0) starting from DFA state `stack[base]`. With
 * `accepting`, it also reports *boundary events*: a run of tokens [ev_lo, ev_hi) that die at
 * byte `cut` > base in an accepting state, i.e. where a grammar's lexeme can end and the rest of
 * those tokens continues in the next lexeme — Python then walks that subtree again with the next
 * lexer. The DFA is built lazily by Python: on a row that is not built yet (-2) the walk calls
 * back into Python, which builds the row and refreshes the table pointers, and goes on.
 *
 * Loaded with ctypes (see _kernel.py); the module init only makes the file importable.
 */
#include <Python.h>
#include <stdint.h>

typedef struct {
    int64_t range;       /* current range */
    int64_t next;        /* next token index to process (-1: the range has not started) */
    int64_t valid;       /* stack depth that is valid for the previous token's prefix */
    int64_t n_events;    /* boundary events written */
    int64_t dead_event;  /* event that a run of skipped tokens extends, or -1 */
} walk_state;

typedef struct {        /* the vocabulary in walk order (fixed per vocabulary) */
    const uint8_t *blob;
    const int64_t *offsets;
    const int32_t *lengths;
    const int32_t *lcp;
    const int32_t *ids;
    const int64_t *skip0;
} vocab_view;

typedef struct {        /* the DFA's current arrays; the row builder refreshes them */
    const int32_t *table;
    const uint8_t *accepting;
} dfa_view;

typedef int (*row_builder)(int32_t state);  /* builds a row (0) or fails (-1) */

typedef struct {        /* boundary event output */
    int64_t *lo;
    int64_t *hi;
    int32_t *cut;
    int32_t *state;
    int64_t cap;        /* 0: do not collect events */
} events_out;

/* Walks every range [r_lo[r], r_hi[r]) (tokens sharing their first r_base[r] bytes) from
 * `start`, setting the mask bits of tokens that stay alive. Returns 0, or -1 when building a
 * row failed (Python holds the exception). */
int64_t sg_walk(
    const vocab_view *v,
    const int64_t *r_lo, const int64_t *r_hi, const int32_t *r_base, int64_t n_ranges,
    int32_t start, dfa_view *dfa, row_builder build,
    int32_t *stack, walk_state *ws, uint32_t *mask_words, events_out *ev)
{
    const uint8_t *blob = v->blob;
    const int64_t *offsets = v->offsets;
    const int32_t *lengths = v->lengths;
    const int32_t *lcp = v->lcp;
    const int64_t *skip0 = v->skip0;
    int collect = ev->cap > 0;
    for (ws->range = 0; ws->range < n_ranges; ws->range++) {
        int64_t lo = r_lo[ws->range], hi = r_hi[ws->range], base = r_base[ws->range];
        int64_t valid = base;
        ws->dead_event = -1;
        stack[base] = start;
        for (int64_t i = lo; i < hi; i++) {
            int64_t len = lengths[i];
            int64_t shared = (i == lo) ? base : lcp[i];
            const uint8_t *bytes = blob + offsets[i];
            if (valid == 0 && shared > 0) {
                /* Died at the first byte: the whole first-byte bucket dies with it. */
                int64_t end = skip0[i] < hi ? skip0[i] : hi;
                i = end - 1;
                continue;
            }
            if (shared > valid) {
                /* The prefix this token shares with the previous one died at depth `valid`. */
                if (ws->dead_event >= 0) ev->hi[ws->dead_event] = i + 1;
                continue;
            }
            int64_t d = shared;
            int32_t s = stack[d];
            int alive = 1;
            ws->dead_event = -1;
            while (d < len) {
                int32_t t = dfa->table[(int64_t)s * 256 + bytes[d]];
                if (t == -2) {
                    if (build(s) != 0) return -1;
                    t = dfa->table[(int64_t)s * 256 + bytes[d]];
                }
                if (t < 0) {
                    if (collect && d > base && dfa->accepting[s] && ws->n_events < ev->cap) {
                        int64_t k = ws->n_events++;
                        ev->lo[k] = i; ev->hi[k] = i + 1; ev->cut[k] = (int32_t)d;
                        ev->state[k] = s;
                        ws->dead_event = k;
                    }
                    alive = 0;
                    break;
                }
                d++;
                stack[d] = t;
                s = t;
            }
            valid = d;
            if (alive) {
                int32_t id = v->ids[i];
                mask_words[id >> 5] |= (uint32_t)1u << (id & 31);
            }
        }
    }
    return 0;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
