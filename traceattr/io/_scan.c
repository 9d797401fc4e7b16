/* _scan: one job, JSON bytes of a trace's event array -> the columns io/columns.py builds.
 *
 * Scanner(int_keys, text_keys, nullable_keys).scan(buffer) reads one JSON array of events (a chunk the
 * splitter cut, or the whole array) and returns the raw columns of its complete ("X") events, or None
 * when it meets anything it does not handle exactly like msgspec: then the caller decodes the chunk with
 * msgspec, which gives the same columns or the same error. So this file never raises a format error and
 * never has to copy msgspec's messages; it only has to be sure that whatever it accepts, msgspec accepts
 * with the same values. It refuses (returns None on): invalid JSON, a wrong type for any field the typed
 * decode reads (events.Event / events.Args), an escape in a string whose value is kept, a \u surrogate,
 * invalid UTF-8, a duplicate known key, an integer outside int64, a float that overflows, nesting deeper
 * than MAX_DEPTH, an X event without numeric ts/dur.
 *
 * Raw args (`Input Dims`...) take any JSON value: its raw text (validated, escapes and all: msgspec.Raw gives
 * the same bytes) is interned in its family, or absent when longer than the raw limit.
 *
 * Strings whose value is kept (ph, cat, name, string pid/tid, the text args) are interned per family in a
 * hash table keyed by their raw bytes (equal bytes without escapes are equal strings); each new one is
 * decoded to a Python str once and handed to the caller in `new`, in code order, so the caller can map
 * codes to its own interners. Numbers: integers exactly into int64; ts/dur floats by Clinger's exact fast
 * path or PyOS_string_to_double (both correctly rounded, like msgspec), integers converted as msgspec does.
 * Text the scanner refuses is decoded twice (scanner, then msgspec); real traces have none (the shared
 * traces hold no backslash at all), and the splitter's rare bad cuts fail fast in both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64           /* deeper args go to msgspec, whose recursion check gives the error */
#define MAX_KEYS 32
#define NO_INT (-1)
#define ERR_ALLOC (-2)          /* a real MemoryError, not a refusal */

/* ---- interning: raw bytes -> int32 code, per family ---------------------------------------------- */
typedef struct { uint64_t hash; Py_ssize_t off, len; int32_t code; } Slot;
typedef struct {
    Slot *slots; size_t cap, used;
    char *bytes; size_t bytes_len, bytes_cap;
    PyObject *pending;          /* new strings not yet handed over (list of str, in code order) */
} Table;

static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); h = (h ^ w) * 0xFF51AFD7ED558CCDull; h ^= h >> 32; p += 8; n -= 8; }
    while (n-- > 0) h = (h ^ (unsigned char)*p++) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

static int table_grow(Table *t) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    Slot *slots = calloc(cap, sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].code) continue;              /* empty */
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].code) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots); t->slots = slots; t->cap = cap;
    return 0;
}

/* The code of string p[0:n] (valid UTF-8, no escapes); -1 refusal, ERR_ALLOC on memory. Slot code is
 * stored +1 so that a zeroed slot is empty. */
static int32_t intern(Table *t, const char *p, Py_ssize_t n) {
    if (t->used * 2 >= t->cap && table_grow(t) < 0) return ERR_ALLOC;
    uint64_t h = hash_bytes(p, n);
    size_t j = h & (t->cap - 1);
    for (; t->slots[j].code; j = (j + 1) & (t->cap - 1)) {
        Slot *s = &t->slots[j];
        if (s->hash == h && s->len == n && memcmp(t->bytes + s->off, p, n) == 0) return s->code - 1;
    }
    PyObject *text = PyUnicode_DecodeUTF8(p, n, "strict");
    if (!text) { PyErr_Clear(); return -1; }
    int failed = PyList_Append(t->pending, text);
    Py_DECREF(text);
    if (failed) return ERR_ALLOC;
    if (t->bytes_len + n > t->bytes_cap) {
        size_t cap = (t->bytes_cap + n) * 2;
        char *bytes = realloc(t->bytes, cap);
        if (!bytes) return ERR_ALLOC;
        t->bytes = bytes; t->bytes_cap = cap;
    }
    memcpy(t->bytes + t->bytes_len, p, n);
    t->slots[j] = (Slot){h, (Py_ssize_t)t->bytes_len, n, (int32_t)(t->used + 1)};
    t->bytes_len += n;
    return (int32_t)t->used++;
}

/* ---- growable output columns --------------------------------------------------------------------- */
typedef struct { char *data; size_t len, cap; } Buf;

static int buf_grow(Buf *b, size_t size) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + size) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data; b->cap = cap;
    return 0;
}

static inline __attribute__((always_inline)) int buf_push(Buf *b, const void *item, size_t size) {
    if (__builtin_expect(b->len + size > b->cap, 0) && buf_grow(b, size)) return -1;
    memcpy(b->data + b->len, item, size);
    b->len += size;
    return 0;
}

/* ---- the scanner object --------------------------------------------------------------------------- */
enum { F_PH, F_CAT, F_NAME, F_ROWID, F_TEXT0 };     /* families; text args follow from F_TEXT0 */
enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS };

typedef struct {
    PyObject_HEAD
    int n_ints, n_texts;
    PyObject *keys;                         /* keep the key strings alive */
    const char *key[MAX_KEYS]; Py_ssize_t key_len[MAX_KEYS];   /* ints first, then texts */
    int nullable[MAX_KEYS];
    int raw[MAX_KEYS];                      /* text keys whose raw JSON value is kept (any type) */
    Py_ssize_t raw_limit;                   /* longer raw values are absent */
    uint64_t key_lengths;                   /* bit n set when some arg key is n bytes long (n < 64) */
    Table tables[F_TEXT0 + MAX_KEYS];
} Scanner;

typedef struct {        /* one scan: cursor and outputs */
    const char *p, *end;
    Scanner *sc;
    Buf phase, ts, dur, cat, name, pid, tid, pid_str, tid_str;
    Buf ints[MAX_KEYS], texts[MAX_KEYS];
    int alloc_failed;
} Scan;

static const unsigned char WS[256] = {[' '] = 1, ['\n'] = 1, ['\r'] = 1, ['\t'] = 1};
static inline int is_ws(char c) { return WS[(unsigned char)c]; }

static inline void skip_ws(Scan *s) {
    const char *p = s->p, *end = s->end;
    /* pretty-printed traces indent every line: skip runs of 8 spaces a word at a time */
    while (p < end && *p == '\n') {           /* a newline and its indent, 4 spaces at a time */
        p++;
        uint32_t w;
        while (end - p >= 4 && (memcpy(&w, p, 4), w == 0x20202020u)) p += 4;
    }
    while (p < end && is_ws(*p)) p++;
    s->p = p;
}

/* SWAR: the high bit of each byte of word w that may be '"', '\\', below 0x20 or above 0x7F (each ends a
 * plain ASCII run). Borrows can flag bytes after a true one, never before: the lowest flag is exact. */
static inline uint64_t special_bytes(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    return (((quote - ones) & ~quote) | ((slash - ones) & ~slash) | (w - ones * 0x20) | w) & highs;
}

/* Length of a valid UTF-8 sequence at p (lead byte >= 0x80), 0 if invalid (overlong, surrogate, > U+10FFFF). */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return end - p >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;          /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0;         /* UTF-16 surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string at s->p (which is '"'): sets *start and *len to its raw contents; *escaped when it holds an escape
 * (the raw bytes then differ from the value). 0 on invalid JSON/UTF-8 or a \u surrogate. */
static int scan_string(Scan *s, const char **start, Py_ssize_t *len, int *escaped) {
    const unsigned char *p = (const unsigned char *)s->p + 1, *end = (const unsigned char *)s->end;
    *escaped = 0;
    *start = (const char *)p;
    while (p < end) {
        while (end - p >= 8) {          /* plain ASCII runs a word at a time */
            uint64_t w; memcpy(&w, p, 8);
            uint64_t special = special_bytes(w);
            if (!special) { p += 8; continue; }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            p += __builtin_ctzll(special) >> 3;      /* straight to the first special byte */
#endif
            break;
        }
        if (p >= end) return 0;
        unsigned c = *p;
        if (c == '"') { *len = (const char *)p - *start; s->p = (const char *)p + 1; return 1; }
        if (c < 0x20) return 0;
        if (c < 0x80 && c != '\\') { p++; continue; }
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2) return 0;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': p += 2; continue;
            case 'u': {
                if (end - p < 6) return 0;
                int v = 0;
                for (int i = 2; i < 6; i++) { int h = hexval(p[i]); if (h < 0) return 0; v = v * 16 + h; }
                if (v >= 0xD800 && v <= 0xDFFF) return 0;      /* pairs and lone halves: msgspec decides */
                p += 6; continue;
            }
            default: return 0;
            }
        }
        int n = utf8_len(p, end);
        if (!n) return 0;
        p += n;
    }
    return 0;
}

/* A JSON number at s->p. *is_int for integer syntax (then *ival holds it; 0 when outside int64);
 * *start and *len the token. 0 on invalid syntax. */
static int scan_number(Scan *s, int *is_int, int *fits, int64_t *ival, const char **start, Py_ssize_t *len) {
    const char *p = s->p, *end = s->end;
    *start = p;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return 0;
    uint64_t mag = 0; int big = 0;
    const char *digits = p;
    if (*p == '0') { p++; if (p < end && *p >= '0' && *p <= '9') return 0; }
    else while (p < end && *p >= '0' && *p <= '9') {
        if (p - digits < 19) mag = mag * 10 + (*p - '0');    /* 19 digits cannot overflow uint64 */
        else big = 1;                                          /* beyond: not an int64 anyway */
        p++;
    }
    *is_int = 1;
    if (p < end && *p == '.') {
        *is_int = 0; p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0; p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *fits = !big && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX);
    *ival = *fits ? (neg ? (int64_t)(0 - mag) : (int64_t)mag) : 0;
    *len = p - *start;
    s->p = p;
    return 1;
}

/* `"key"` ws `:` ws at s->p (*escaped as scan_string); 0 on anything else. */
static int member_key(Scan *s, const char **k, Py_ssize_t *n, int *escaped) {
    if (s->p >= s->end || *s->p != '"' || !scan_string(s, k, n, escaped)) return 0;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return 0;
    s->p++; skip_ws(s);
    return 1;
}

/* After a member or element: 1 when a ',' follows (more to read), 0 at `close` (consumed), -1 otherwise. */
static int next_member(Scan *s, char close) {
    skip_ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == close) { s->p++; return 0; }
    if (*s->p != ',') return -1;
    s->p++; skip_ws(s);
    return 1;
}

static int skip_value(Scan *s, int depth);

static int skip_container(Scan *s, int depth, char close) {
    if (depth > MAX_DEPTH) return 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; return 1; }
    for (;;) {
        const char *k; Py_ssize_t n; int esc;
        if (close == '}' && !member_key(s, &k, &n, &esc)) return 0;
        if (!skip_value(s, depth + 1)) return 0;
        int more = next_member(s, close);
        if (more <= 0) return more == 0;
    }
}

static int skip_literal(Scan *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n)) return 0;
    s->p += n;
    return 1;
}

/* Any JSON value, validated and skipped. */
static int skip_value(Scan *s, int depth) {
    if (s->p >= s->end) return 0;
    switch (*s->p) {
    case '{': return skip_container(s, depth, '}');
    case '[': return skip_container(s, depth, ']');
    case '"': { const char *a; Py_ssize_t n; int e; return scan_string(s, &a, &n, &e); }
    case 't': return skip_literal(s, "true", 4);
    case 'f': return skip_literal(s, "false", 5);
    case 'n': return skip_literal(s, "null", 4);
    default: { int i, f; int64_t v; const char *a; Py_ssize_t n; return scan_number(s, &i, &f, &v, &a, &n); }
    }
}

/* A kept string: its interned code in family f, or -1 (refuse); intern() allocation errors are flagged. */
static int32_t kept_string(Scan *s, int family, int intern_it) {
    const char *a; Py_ssize_t n; int esc;
    if (s->p >= s->end || *s->p != '"' || !scan_string(s, &a, &n, &esc) || esc) return -1;
    if (!intern_it) return 0;
    int32_t code = intern(&s->sc->tables[family], a, n);
    if (code == ERR_ALLOC) { s->alloc_failed = 1; return -1; }
    return code;
}

/* ts/dur: a number or null (*present 0). msgspec turns integers into float by conversion. */
static int time_value(Scan *s, double *out, int *present) {
    if (s->p < s->end && *s->p == 'n') { *present = 0; return skip_literal(s, "null", 4); }
    int is_int, fits; int64_t v; const char *a; Py_ssize_t n;
    if (!scan_number(s, &is_int, &fits, &v, &a, &n)) return 0;
    *present = 1;
    if (is_int) {
        if (!fits) return 0;
        *out = (double)v;
        return 1;
    }
    /* Clinger's fast path: a mantissa below 2^53 with at most 22 decimals is exact as a double, so is
     * 10^k, and one IEEE division rounds correctly: the same double as a full correctly rounded parse.
     * It covers every era-C time (below 2^43 µs with three decimals). */
    if (n < 24) {
        uint64_t mant = 0; int decimals = 0, after_dot = 0, digits = 0;
        const char *q = a + (*a == '-');
        for (; q < a + n; q++) {
            if (*q == '.') { after_dot = 1; continue; }
            if (*q < '0' || *q > '9') break;              /* an exponent: take the slow path */
            mant = mant * 10 + (*q - '0'); digits++; decimals += after_dot;
        }
        if (q == a + n && digits <= 19 && mant < (1ull << 53)) {
            static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                           1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
            double d = (double)mant / pow10[decimals];
            *out = *a == '-' ? -d : d;
            return 1;
        }
    }
    char text[64];
    if (n >= (Py_ssize_t)sizeof text) return 0;
    memcpy(text, a, n); text[n] = 0;
    char *stop;
    double d = PyOS_string_to_double(text, &stop, NULL);   /* no exception: overflow gives ±inf */
    if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (stop != text + n || d == Py_HUGE_VAL || d == -Py_HUGE_VAL) return 0;
    *out = d;
    return 1;
}

/* pid/tid: an int64 (*str_code -1) or a string (interned, when kept). */
static int row_id(Scan *s, int64_t *value, int32_t *str_code, int keep) {
    *value = NO_INT; *str_code = -1;
    if (s->p < s->end && *s->p == '"') {
        int32_t code = kept_string(s, F_ROWID, keep);
        if (code < 0) return 0;
        *str_code = keep ? code : -1;
        return 1;
    }
    int is_int, fits; const char *a; Py_ssize_t n;
    return scan_number(s, &is_int, &fits, value, &a, &n) && is_int && fits;
}

static int key_is(const char *k, Py_ssize_t n, const char *word) {
    return (size_t)n == strlen(word) && memcmp(k, word, n) == 0;
}

/* The args object into ints[]/texts[] (defaults preset by the caller); text codes only when `keep`. */
static int scan_args(Scan *s, int64_t *ints, int32_t *texts, int keep) {
    Scanner *sc = s->sc;
    if (s->p >= s->end || *s->p != '{') return 0;
    s->p++; skip_ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 1; }
    uint64_t seen = 0;
    for (;;) {
        const char *k; Py_ssize_t n; int esc;
        if (!member_key(s, &k, &n, &esc) || esc) return 0;
        int which = -1;
        if (n < 64 && (sc->key_lengths >> n) & 1)      /* most arg keys are not ours: one test says so */
            for (int i = 0; i < sc->n_ints + sc->n_texts; i++)
            if (sc->key_len[i] == n && memcmp(sc->key[i], k, n) == 0) { which = i; break; }
        if (which < 0) {
            if (!skip_value(s, 2)) return 0;
        } else {
            if (seen & (1ull << which)) return 0;          /* duplicate key: msgspec decides */
            seen |= 1ull << which;
            if (which < sc->n_ints) {
                int is_int, fits; const char *a; Py_ssize_t len;
                if (sc->nullable[which] && s->p < s->end && *s->p == 'n') {
                    if (!skip_literal(s, "null", 4)) return 0;
                    ints[which] = NO_INT;
                } else if (!scan_number(s, &is_int, &fits, &ints[which], &a, &len) || !is_int || !fits) {
                    return 0;
                }
            } else if (sc->raw[which]) {
                int t = which - sc->n_ints;
                const char *a = s->p;
                if (!skip_value(s, 2)) return 0;
                Py_ssize_t len = s->p - a;
                if (keep && len <= sc->raw_limit) {
                    int32_t code = intern(&sc->tables[F_TEXT0 + t], a, len);
                    if (code == ERR_ALLOC) { s->alloc_failed = 1; return 0; }
                    if (code < 0) return 0;
                    texts[t] = code;
                }
            } else {
                int t = which - sc->n_ints;
                int32_t code = kept_string(s, F_TEXT0 + t, keep);
                if (code < 0) return 0;
                texts[t] = code;
            }
        }
        int more = next_member(s, '}');
        if (more <= 0) return more == 0;
    }
}

/* One event object. */
static int scan_event(Scan *s) {
    Scanner *sc = s->sc;
    const char *ev = s->p;
    if (s->p >= s->end || *s->p != '{') return 0;
    /* a first pass finds `ph`, so that only X events intern their strings: it is the first key in every
     * writer, so this usually looks at a few bytes only */
    int is_x = -1;
    s->p++; skip_ws(s);
    while (s->p < s->end && *s->p != '}') {
        const char *k; Py_ssize_t n; int esc;
        if (!member_key(s, &k, &n, &esc) || esc) return 0;
        if (key_is(k, n, "ph")) {
            const char *a; Py_ssize_t len;
            if (s->p >= s->end || *s->p != '"' || !scan_string(s, &a, &len, &esc) || esc) return 0;
            is_x = len == 1 && a[0] == 'X';
            break;
        }
        if (!skip_value(s, 1) || next_member(s, '}') <= 0) return 0;
    }
    if (is_x < 0) return 0;                       /* no `ph` (a required field): msgspec decides */
    s->p = ev + 1;
    skip_ws(s);
    int64_t pid = NO_INT, tid = NO_INT, ints[MAX_KEYS];
    int32_t ph = -1, cat = -1, name = -1, pid_str = -1, tid_str = -1, texts[MAX_KEYS];
    double ts = 0, dur = 0;
    int has_ts = 0, has_dur = 0, seen = 0;
    for (int i = 0; i < sc->n_ints; i++) ints[i] = NO_INT;
    for (int i = 0; i < sc->n_texts; i++) texts[i] = -1;   /* -1: absent (the caller's code for "") */
    if (s->p < s->end && *s->p == '}') return 0;
    for (;;) {
        const char *k; Py_ssize_t n; int esc;
        if (!member_key(s, &k, &n, &esc) || esc) return 0;
        int key = -1;
        switch (n) {
        case 2: key = k[0] == 'p' && k[1] == 'h' ? K_PH : k[0] == 't' && k[1] == 's' ? K_TS : -1; break;
        case 3: key = key_is(k, n, "cat") ? K_CAT : key_is(k, n, "pid") ? K_PID : key_is(k, n, "tid") ? K_TID
                    : key_is(k, n, "dur") ? K_DUR : -1; break;
        case 4: key = key_is(k, n, "name") ? K_NAME : key_is(k, n, "args") ? K_ARGS : -1; break;
        }
        if (key >= 0) {
            if (seen & (1 << key)) return 0;
            seen |= 1 << key;
        }
        int ok = 1;
        switch (key) {
        case K_PH: ok = (ph = kept_string(s, F_PH, 1)) >= 0; break;
        case K_CAT: ok = (cat = kept_string(s, F_CAT, is_x)) >= 0; break;
        case K_NAME: ok = (name = kept_string(s, F_NAME, is_x)) >= 0; break;
        case K_PID: ok = row_id(s, &pid, &pid_str, is_x); break;
        case K_TID: ok = row_id(s, &tid, &tid_str, is_x); break;
        case K_TS: ok = time_value(s, &ts, &has_ts); break;
        case K_DUR: ok = time_value(s, &dur, &has_dur); break;
        case K_ARGS: ok = scan_args(s, ints, texts, is_x); break;
        default: ok = skip_value(s, 1);
        }
        int more = ok ? next_member(s, '}') : -1;
        if (more < 0) return 0;
        if (!more) break;
    }
    if (buf_push(&s->phase, &ph, sizeof ph)) goto oom;
    if (!is_x) return 1;
    if (!has_ts || !has_dur) return 0;            /* msgspec path raises "X event without a numeric ts" */
    /* absent cat/name are "": intern the empty string so that every row has a code */
    if (cat < 0 && (cat = intern(&sc->tables[F_CAT], "", 0)) < 0) goto oom;
    if (name < 0 && (name = intern(&sc->tables[F_NAME], "", 0)) < 0) goto oom;
    if (buf_push(&s->ts, &ts, 8) || buf_push(&s->dur, &dur, 8) || buf_push(&s->cat, &cat, 4)
        || buf_push(&s->name, &name, 4) || buf_push(&s->pid, &pid, 8) || buf_push(&s->tid, &tid, 8)
        || buf_push(&s->pid_str, &pid_str, 4) || buf_push(&s->tid_str, &tid_str, 4)) goto oom;
    for (int i = 0; i < sc->n_ints; i++) if (buf_push(&s->ints[i], &ints[i], 8)) goto oom;
    for (int i = 0; i < sc->n_texts; i++) if (buf_push(&s->texts[i], &texts[i], 4)) goto oom;
    return 1;
oom:
    s->alloc_failed = 1;
    return 0;
}

static int scan_array(Scan *s) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '[') return 0;
    s->p++; skip_ws(s);
    if (s->p < s->end && *s->p == ']') { s->p++; }
    else for (;;) {
        if (!scan_event(s)) return 0;
        int more = next_member(s, ']');
        if (more < 0) return 0;
        if (!more) break;
    }
    skip_ws(s);
    return s->p == s->end;                         /* trailing text: msgspec decides */
}

/* ---- Python glue ---------------------------------------------------------------------------------- */
static PyObject *as_bytearray(Buf *b) {
    return PyByteArray_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static void scan_free(Scan *s) {
    Buf *bufs[] = {&s->phase, &s->ts, &s->dur, &s->cat, &s->name, &s->pid, &s->tid, &s->pid_str, &s->tid_str};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->data);
    for (int i = 0; i < MAX_KEYS; i++) { free(s->ints[i].data); free(s->texts[i].data); }
}

/* Hand the pending new strings of every family over (and start new lists). */
static PyObject *take_new(Scanner *sc) {
    int families = F_TEXT0 + sc->n_texts;
    PyObject *out = PyTuple_New(families);
    if (!out) return NULL;
    for (int f = 0; f < families; f++) {
        PyObject *fresh = PyList_New(0);
        if (!fresh) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, f, sc->tables[f].pending);
        sc->tables[f].pending = fresh;
    }
    return out;
}

static PyObject *Scanner_scan(Scanner *sc, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scan s;
    memset(&s, 0, sizeof s);
    s.p = view.buf; s.end = (const char *)view.buf + view.len; s.sc = sc;
    int ok = scan_array(&s);
    PyBuffer_Release(&view);
    if (s.alloc_failed) { scan_free(&s); return PyErr_NoMemory(); }
    if (!ok) { scan_free(&s); Py_RETURN_NONE; }
    PyObject *ints = PyTuple_New(sc->n_ints), *texts = PyTuple_New(sc->n_texts), *result = NULL;
    if (ints && texts) {
        int failed = 0;
        for (int i = 0; i < sc->n_ints; i++) {
            PyObject *b = as_bytearray(&s.ints[i]);
            failed |= !b; if (b) PyTuple_SET_ITEM(ints, i, b);
        }
        for (int i = 0; i < sc->n_texts; i++) {
            PyObject *b = as_bytearray(&s.texts[i]);
            failed |= !b; if (b) PyTuple_SET_ITEM(texts, i, b);
        }
        PyObject *new = failed ? NULL : take_new(sc);
        if (new)
            result = Py_BuildValue("(nNNNNNNNNNNNN)", (Py_ssize_t)(s.phase.len / 4), new, as_bytearray(&s.phase),
                                   as_bytearray(&s.ts), as_bytearray(&s.dur), as_bytearray(&s.cat),
                                   as_bytearray(&s.name), as_bytearray(&s.pid), as_bytearray(&s.tid),
                                   as_bytearray(&s.pid_str), as_bytearray(&s.tid_str), ints, texts);
        else { Py_XDECREF(ints); Py_XDECREF(texts); }
    } else { Py_XDECREF(ints); Py_XDECREF(texts); }
    scan_free(&s);
    return result;
}

static int Scanner_init(Scanner *sc, PyObject *args, PyObject *kw) {
    PyObject *int_keys, *text_keys, *nullable, *raw_keys = NULL, *plain_keys;
    Py_ssize_t raw_limit = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!|O!n", &PyTuple_Type, &int_keys, &PyTuple_Type, &text_keys,
                          &PyTuple_Type, &nullable, &PyTuple_Type, &raw_keys, &raw_limit)) return -1;
    Py_ssize_t ni = PyTuple_GET_SIZE(int_keys), nt = PyTuple_GET_SIZE(text_keys);
    Py_ssize_t nr = raw_keys ? PyTuple_GET_SIZE(raw_keys) : 0;
    if (ni + nt + nr > MAX_KEYS || sc->keys) {
        PyErr_SetString(PyExc_ValueError, "too many arg keys, or Scanner initialised twice");
        return -1;
    }
    plain_keys = PySequence_Concat(int_keys, text_keys);
    if (!plain_keys) return -1;
    sc->keys = raw_keys ? PySequence_Concat(plain_keys, raw_keys) : (Py_INCREF(plain_keys), plain_keys);
    Py_DECREF(plain_keys);
    if (!sc->keys) return -1;
    sc->raw_limit = raw_limit;
    nt += nr;                                   /* raw keys are text families after the texts */
    sc->n_ints = (int)ni; sc->n_texts = (int)nt;
    for (Py_ssize_t i = 0; i < ni + nt; i++) {
        PyObject *key = PyTuple_GET_ITEM(sc->keys, i);
        if (!PyUnicode_Check(key)) { PyErr_SetString(PyExc_TypeError, "keys must be str"); return -1; }
        sc->key[i] = PyUnicode_AsUTF8AndSize(key, &sc->key_len[i]);
        if (!sc->key[i]) return -1;
        if (sc->key_len[i] >= 64) { PyErr_SetString(PyExc_ValueError, "arg keys are shorter than 64 bytes"); return -1; }
        int contained = PySequence_Contains(nullable, key);
        if (contained < 0) return -1;
        sc->nullable[i] = contained && i < ni;
        sc->raw[i] = i >= ni + nt - nr;
        sc->key_lengths |= 1ull << sc->key_len[i];
    }
    for (int f = 0; f < F_TEXT0 + sc->n_texts; f++)
        if (!(sc->tables[f].pending = PyList_New(0))) return -1;
    return 0;
}

static void Scanner_dealloc(Scanner *sc) {
    for (int f = 0; f < F_TEXT0 + MAX_KEYS; f++) {
        free(sc->tables[f].slots); free(sc->tables[f].bytes); Py_XDECREF(sc->tables[f].pending);
    }
    Py_XDECREF(sc->keys);
    Py_TYPE(sc)->tp_free((PyObject *)sc);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(buffer) -> None, or (events, new strings per family, phase codes, ts, dur, cat, name, pid, tid, "
     "pid str codes, tid str codes, int args, text args) for the X events, as bytearrays"},
    {NULL}
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceattr.io._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_doc = "Scanner(int_keys, text_keys, nullable_keys[, raw_keys, raw_limit]): JSON event arrays -> columns "
              "(see the module)",
};

static struct PyModuleDef scan_module = {PyModuleDef_HEAD_INIT, "_scan", "JSON event arrays -> columns", -1, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType); Py_DECREF(m); return NULL;
    }
    return m;
}
