/* Keyword postings (host/keywords/postings.py, host/keywords/top.py): built in two counting passes
 * over a library's words, and searched for the best rows without scoring every posting.
 *
 * Building: the text index has numbered every word of each field (the rows' words back to back, in
 * file order; host/constraints/word_index.py); `map` gives each word number its term (-1: a stop
 * word). `count` walks the rows and counts, for each term, the rows holding it (and of which tag),
 * and each row's terms; `place` walks them again and writes each term's rows, ascending, with how
 * often the row holds it (saturating at 65535), then each block's bound. Rows are numbered in file
 * order: the postings are built before the compile knows how it will store the rows.
 *
 * Searching (`top`): block-max MaxScore over the query's terms (Turtle and Flood's MaxScore, with
 * the per-block bounds of Ding and Suel's block-max indexes). A posting's score is
 * weight * f / (f + k1 * (1 - b + b * length / average)), summed over the terms in the order given,
 * in double precision: the same value, bit for bit, as numpy's exhaustive scoring of the same
 * postings (host/keywords/top.py), since this file is built with -ffp-contract=off.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Buffer;

static void release(Buffer *buffers, int count) {
    for (int i = 0; i < count; i++)
        if (buffers[i].held) {
            PyBuffer_Release(&buffers[i].view);
            buffers[i].held = 0;
        }
}

/* `object` as a C-contiguous buffer of `itemsize`-byte items (writable with `writable`); None is
 * allowed (an empty, unheld buffer) with `optional`. */
static int take(PyObject *object, Buffer *buffer, Py_ssize_t itemsize, int writable, int optional, const char *name) {
    buffer->held = 0;
    if (object == Py_None && optional) {
        memset(&buffer->view, 0, sizeof(buffer->view));
        return 0;
    }
    if (PyObject_GetBuffer(object, &buffer->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) != 0)
        return -1;
    buffer->held = 1;
    if (buffer->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes, not %zd", name, buffer->view.itemsize, itemsize);
        return -1;
    }
    return 0;
}

static Py_ssize_t items(const Buffer *buffer) { return buffer->view.itemsize ? buffer->view.len / buffer->view.itemsize : 0; }

/* ---- building ------------------------------------------------------------------------------- */

/* One field's words as the text index numbered them: each row's word numbers back to back, in file
 * order (`lengths`: words a row), and each word number's term (-1: a stop word). */
typedef struct {
    const int32_t *words;
    const int32_t *map;
    int64_t *starts; /* where each row's words start (rows + 1) */
    Py_ssize_t vocabulary;
} Field;

enum { FIELDS = 2 };

typedef struct {
    Field fields[FIELDS];
    const uint16_t *tags; /* each row's tag */
    Py_ssize_t rows, terms, tag_count;
} Build;

/* Checks (words, lengths, map) twice and tags; fills `build`; -1 with an exception set when something
 * does not fit. `buffers` holds 7. */
static int read_build(PyObject *const *objects, Py_ssize_t tag_count, Py_ssize_t terms, Buffer *buffers, Build *build) {
    static const char *const names[] = {"words", "lengths", "map", "title_words", "title_lengths", "title_map", "tags"};
    static const Py_ssize_t sizes[] = {4, 8, 4, 4, 8, 4, 2};
    memset(build, 0, sizeof(*build));
    for (int i = 0; i < 7; i++)
        if (take(objects[i], &buffers[i], sizes[i], 0, 0, names[i]) != 0)
            return -1;
    build->rows = items(&buffers[6]);
    build->terms = terms;
    build->tag_count = tag_count;
    build->tags = buffers[6].view.buf;
    if (terms < 0 || tag_count < 1 || tag_count > 65536 || build->rows > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "postings: terms, tags or rows out of range");
        return -1;
    }
    for (Py_ssize_t row = 0; row < build->rows; row++)
        if (build->tags[row] >= tag_count) {
            PyErr_SetString(PyExc_ValueError, "postings: a tag is out of range");
            return -1;
        }
    for (int f = 0; f < FIELDS; f++) {
        Field *field = &build->fields[f];
        const Buffer *words = &buffers[3 * f], *lengths = &buffers[3 * f + 1], *map = &buffers[3 * f + 2];
        field->words = words->view.buf;
        field->map = map->view.buf;
        field->vocabulary = items(map);
        if (items(lengths) != build->rows) {
            PyErr_SetString(PyExc_ValueError, "postings: a field's lengths do not have a row each");
            return -1;
        }
        for (Py_ssize_t word = 0; word < field->vocabulary; word++)
            if (field->map[word] < -1 || field->map[word] >= terms) {
                PyErr_SetString(PyExc_ValueError, "postings: a word's term is out of range");
                return -1;
            }
        field->starts = PyMem_Malloc((size_t)(build->rows + 1) * sizeof(int64_t));
        if (!field->starts) {
            PyErr_NoMemory();
            return -1;
        }
        const int64_t *length = lengths->view.buf;
        Py_ssize_t total = items(words);
        field->starts[0] = 0;
        for (Py_ssize_t row = 0; row < build->rows; row++) {
            if (length[row] < 0 || length[row] > total - field->starts[row]) {
                PyErr_SetString(PyExc_ValueError, "postings: the lengths do not add up to the words");
                return -1;
            }
            field->starts[row + 1] = field->starts[row] + length[row];
        }
        for (Py_ssize_t word = 0; word < field->starts[build->rows]; word++)
            if (field->words[word] < 0 || field->words[word] >= field->vocabulary) {
                PyErr_SetString(PyExc_ValueError, "postings: a word number is out of range");
                return -1;
            }
    }
    return 0;
}

static void free_build(Build *build) {
    for (int f = 0; f < FIELDS; f++) {
        PyMem_Free(build->fields[f].starts);
        build->fields[f].starts = NULL;
    }
}

PyDoc_STRVAR(count_doc,
"count(words, lengths, map, title_words, title_lengths, title_map, tags, tag_count, rows_of_term,\n"
"      tag_rows_of_term, row_lengths)\n\n"
"First pass over a library's words, row after row: for each term, the rows holding it (rows_of_term,\n"
"int64) and those of each tag (tag_rows_of_term, int32, terms x tag_count); each row's number of terms\n"
"(row_lengths, int32). words: int32 word numbers, rows back to back; lengths: int64 words a row; map:\n"
"int32 term of each word number (-1: none); tags: uint16, each row's tag.");

static PyObject *count(PyObject *module, PyObject *args) {
    PyObject *objects[7], *outputs[3];
    Py_ssize_t tag_count;
    if (!PyArg_ParseTuple(args, "OOOOOOOnOOO:count", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &tag_count, &outputs[0], &outputs[1], &outputs[2]))
        return NULL;
    Buffer buffers[10] = {0};
    Build build = {0};
    int32_t *last = NULL;
    PyObject *result = NULL;
    if (take(outputs[0], &buffers[7], 8, 1, 0, "rows_of_term") != 0)
        goto done;
    if (read_build(objects, tag_count, items(&buffers[7]), buffers, &build) != 0)
        goto done;
    if (take(outputs[1], &buffers[8], 4, 1, 0, "tag_rows_of_term") != 0 || take(outputs[2], &buffers[9], 4, 1, 0, "row_lengths") != 0)
        goto done;
    if (items(&buffers[8]) != build.terms * tag_count || items(&buffers[9]) != build.rows) {
        PyErr_SetString(PyExc_ValueError, "count: the outputs do not fit");
        goto done;
    }
    int64_t *rows_of_term = buffers[7].view.buf;
    int32_t *tag_rows = buffers[8].view.buf, *row_lengths = buffers[9].view.buf;
    last = PyMem_Malloc((size_t)(build.terms + 1) * sizeof(int32_t));
    if (!last) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    memset(rows_of_term, 0, (size_t)build.terms * sizeof(int64_t));
    memset(tag_rows, 0, (size_t)(build.terms * tag_count) * sizeof(int32_t));
    memset(last, 0xff, (size_t)(build.terms + 1) * sizeof(int32_t));
    for (Py_ssize_t row = 0; row < build.rows; row++) {
        int64_t length = 0;
        Py_ssize_t tag = tag_count == 1 ? 0 : build.tags[row];
        for (int f = 0; f < FIELDS; f++) {
            const Field *field = &build.fields[f];
            for (int64_t at = field->starts[row]; at < field->starts[row + 1]; at++) {
                int32_t term = field->map[field->words[at]];
                if (term < 0)
                    continue;
                length++;
                if (last[term] != (int32_t)row) {
                    last[term] = (int32_t)row;
                    rows_of_term[term]++;
                    tag_rows[(Py_ssize_t)term * tag_count + tag]++;
                }
            }
        }
        row_lengths[row] = length > INT32_MAX ? INT32_MAX : (int32_t)length;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(last);
    free_build(&build);
    release(buffers, 10);
    return result;
}

PyDoc_STRVAR(place_doc,
"place(words, lengths, map, title_words, title_lengths, title_map, tags, tag_count, row_lengths, k1, b,\n"
"      average, block, term_offsets, rows, frequencies, block_offsets, block_last, block_bound)\n\n"
"Second pass: each term's rows, ascending, at rows[term_offsets[t]:term_offsets[t + 1]] (int32), how\n"
"often each holds it (frequencies, uint16, saturating at 65535), and for each block of `block`\n"
"postings its last row (int32) and the highest f / (f + k1 (1 - b + b length / average)) in it,\n"
"rounded up to float32 (block_bound). Arguments as count's, and its outputs.");

static PyObject *place(PyObject *module, PyObject *args) {
    PyObject *objects[7], *outputs[7];
    Py_ssize_t tag_count, block;
    double k1, b, average;
    if (!PyArg_ParseTuple(args, "OOOOOOOnOdddnOOOOOO:place", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &objects[5], &objects[6], &tag_count, &outputs[0], &k1, &b, &average, &block,
                          &outputs[1], &outputs[2], &outputs[3], &outputs[4], &outputs[5], &outputs[6]))
        return NULL;
    Buffer buffers[14] = {0};
    Build build = {0};
    int64_t *next = NULL;
    PyObject *result = NULL;
    if (take(outputs[1], &buffers[7], 8, 0, 0, "term_offsets") != 0)
        goto done;
    if (items(&buffers[7]) < 1) {
        PyErr_SetString(PyExc_ValueError, "place: term_offsets is empty");
        goto done;
    }
    if (read_build(objects, tag_count, items(&buffers[7]) - 1, buffers, &build) != 0)
        goto done;
    static const Py_ssize_t sizes[] = {4, 4, 2, 8, 4, 4};
    static const int writable[] = {0, 1, 1, 0, 1, 1};
    static const char *const names[] = {"row_lengths", "rows", "frequencies", "block_offsets", "block_last", "block_bound"};
    PyObject *rest[] = {outputs[0], outputs[2], outputs[3], outputs[4], outputs[5], outputs[6]};
    for (int i = 0; i < 6; i++)
        if (take(rest[i], &buffers[8 + i], sizes[i], writable[i], 0, names[i]) != 0)
            goto done;
    const int64_t *offsets = buffers[7].view.buf, *block_offsets = buffers[11].view.buf;
    const int32_t *lengths = buffers[8].view.buf;
    int32_t *rows = buffers[9].view.buf, *block_last = buffers[12].view.buf;
    uint16_t *frequencies = buffers[10].view.buf;
    float *block_bound = buffers[13].view.buf;
    Py_ssize_t postings = items(&buffers[9]), blocks = items(&buffers[12]);
    int fits = items(&buffers[8]) == build.rows && items(&buffers[10]) == postings && items(&buffers[11]) == build.terms + 1 &&
               items(&buffers[13]) == blocks && block >= 1 && average > 0 && offsets[0] == 0 && block_offsets[0] == 0 &&
               offsets[build.terms] == postings && block_offsets[build.terms] == blocks;
    for (Py_ssize_t term = 0; fits && term < build.terms; term++) {
        int64_t count = offsets[term + 1] - offsets[term];
        fits = count >= 0 && block_offsets[term + 1] - block_offsets[term] == (count + block - 1) / block;
    }
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "place: the outputs do not fit count's figures");
        goto done;
    }
    next = PyMem_Malloc((size_t)(build.terms + 1) * sizeof(int64_t));
    if (!next) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    memcpy(next, offsets, (size_t)build.terms * sizeof(int64_t));
    for (Py_ssize_t row = 0; fits && row < build.rows; row++) {
        for (int f = 0; f < FIELDS; f++) {
            const Field *field = &build.fields[f];
            for (int64_t at = field->starts[row]; at < field->starts[row + 1]; at++) {
                int32_t term = field->map[field->words[at]];
                if (term < 0)
                    continue;
                int64_t slot = next[term] - 1;
                if (slot >= offsets[term] && rows[slot] == (int32_t)row) {
                    if (frequencies[slot] < UINT16_MAX)
                        frequencies[slot]++;
                } else if (next[term] < offsets[term + 1]) {
                    rows[next[term]] = (int32_t)row;
                    frequencies[next[term]] = 1;
                    next[term]++;
                } else {
                    fits = 0; /* more rows than count found: the words changed between the passes */
                }
            }
        }
    }
    for (Py_ssize_t term = 0; fits && term < build.terms; term++) {
        fits = next[term] == offsets[term + 1];
        for (int64_t first = offsets[term], number = block_offsets[term]; fits && first < offsets[term + 1];
             first += block, number++) {
            int64_t end = first + block < offsets[term + 1] ? first + block : offsets[term + 1];
            double most = 0.0;
            for (int64_t posting = first; posting < end; posting++) {
                double f = (double)frequencies[posting];
                double saturation = f / (f + k1 * (1.0 - b + b * (double)lengths[rows[posting]] / average));
                if (saturation > most)
                    most = saturation;
            }
            float rounded = (float)most;
            block_bound[number] = (double)rounded < most ? nextafterf(rounded, INFINITY) : rounded;
            block_last[number] = rows[end - 1];
        }
    }
    Py_END_ALLOW_THREADS
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "place: the rows do not match count's");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(next);
    free_build(&build);
    release(buffers, 14);
    return result;
}

/* ---- searching ------------------------------------------------------------------------------ */

typedef struct {
    double score;
    int64_t key; /* ties: the lower key wins (file order) */
    int32_t row;
} Hit;

/* Whether a ranks before b. */
static inline int better(const Hit *a, const Hit *b) { return a->score > b->score || (a->score == b->score && a->key < b->key); }

/* A bounded heap of the k best hits so far; its root is the worst of them. */
typedef struct {
    Hit *hits;
    Py_ssize_t size, capacity;
} Best;

static void sift_down(Best *best, Py_ssize_t at) {
    for (;;) {
        Py_ssize_t left = 2 * at + 1, right = left + 1, worst = at;
        if (left < best->size && better(&best->hits[worst], &best->hits[left]))
            worst = left;
        if (right < best->size && better(&best->hits[worst], &best->hits[right]))
            worst = right;
        if (worst == at)
            return;
        Hit swap = best->hits[at];
        best->hits[at] = best->hits[worst];
        best->hits[worst] = swap;
        at = worst;
    }
}

static void offer(Best *best, Hit hit) {
    if (best->size < best->capacity) {
        Py_ssize_t at = best->size++;
        best->hits[at] = hit;
        while (at > 0) {
            Py_ssize_t parent = (at - 1) / 2;
            if (!better(&best->hits[parent], &best->hits[at]))
                break;
            Hit swap = best->hits[at];
            best->hits[at] = best->hits[parent];
            best->hits[parent] = swap;
            at = parent;
        }
    } else if (better(&hit, &best->hits[0])) {
        best->hits[0] = hit;
        sift_down(best, 0);
    }
}

/* The score a hit must beat to enter (-inf until the heap is full). A candidate whose bound is below
 * it can be skipped: equal scores may still enter on their key, so only a strictly lower bound is. */
static inline double threshold(const Best *best) { return best->size < best->capacity ? -INFINITY : best->hits[0].score; }

/* Bounds are computed in the same arithmetic as scores, then widened by this relative margin: a
 * score rounds differently from its bound, and a wrongly skipped row would change the answer. */
#define MARGIN (1.0 + 1e-9)

typedef struct {
    const int32_t *rows;
    const uint16_t *frequencies;
    const int32_t *block_last; /* last row of each block */
    const float *block_bound;  /* the most a posting of each block scores, per unit of weight */
    Py_ssize_t count, blocks, block;
    double weight, bound; /* bound: the most one posting of this term can score */
    Py_ssize_t at;        /* cursor: the posting now looked at */
    Py_ssize_t shown;     /* block cursor: the block that may hold the row now looked at */
    int position;         /* the term's place in the query: scores are summed in that order */
} Term;

typedef struct {
    double k1, b, average, scale; /* scale: how much the caller's average may raise a block bound */
    Py_ssize_t rows;        /* rows of the library: a row outside them (a damaged file) is never read */
    const int32_t *lengths;
    const uint8_t *allowed; /* per stored row, or NULL for all */
    const int32_t *stored;  /* each (file order) row's stored row, or NULL: the same */
} Scoring;

static inline double part(const Scoring *s, double weight, double frequency, int32_t length) {
    double norm = s->k1 * (1.0 - s->b + s->b * (double)length / s->average);
    return weight * frequency / (frequency + norm);
}

static inline double block_bound(const Scoring *s, const Term *t, Py_ssize_t block) {
    return t->weight * (double)t->block_bound[block] * s->scale * MARGIN;
}

/* Moves the term's block cursor to its first block whose last row is at least `row` (galloping,
 * then a binary search): the block that holds `row` if the term does. */
static inline void reach(Term *t, int32_t row) {
    Py_ssize_t low = t->shown;
    if (low >= t->blocks || t->block_last[low] >= row)
        return;
    Py_ssize_t step = 1, high = low + 1;
    while (high < t->blocks && t->block_last[high] < row) {
        low = high;
        step *= 2;
        high = low + step;
    }
    if (high > t->blocks)
        high = t->blocks;
    low++; /* block_last[low - 1] < row; the answer lies in [low, high] */
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (t->block_last[middle] < row)
            low = middle + 1;
        else
            high = middle;
    }
    t->shown = low;
}

/* Moves the term's posting cursor to its first posting at or after `row`. */
static inline void seek(Term *t, int32_t row) {
    if (t->at >= t->count || t->rows[t->at] >= row)
        return;
    reach(t, row);
    if (t->shown >= t->blocks) {
        t->at = t->count;
        return;
    }
    if (t->at < t->shown * t->block)
        t->at = t->shown * t->block;
    while (t->at < t->count && t->rows[t->at] < row) /* within the block: its last row is >= row */
        t->at++;
}

static inline int32_t current(const Term *t) { return t->at < t->count ? t->rows[t->at] : INT32_MAX; }

/* The bound of the term's block that may hold `row` (after reach), or 0 when no block can. */
static inline double bound_at(const Scoring *s, const Term *t, int32_t row) {
    if (t->shown >= t->blocks || t->rows[t->shown * t->block] > row)
        return 0.0;
    return block_bound(s, t, t->shown);
}

static int by_bound(const void *a, const void *b) {
    const Term *x = a, *y = b;
    return x->bound < y->bound ? -1 : x->bound > y->bound ? 1 : x->position - y->position;
}

enum { MOST_TERMS = 1024 };

/* Block-max MaxScore. Terms sorted by bound, ascending: the first `passive` of them (whose bounds sum
 * below the threshold) cannot make a row enter alone, so rows are drawn only from the others (the
 * active terms), and the passive terms are looked up for a row only while it can still enter. Every
 * bound is first taken over blocks: a stretch of rows whose blocks together cannot reach the
 * threshold is passed over whole, and so is a row whose blocks cannot. */
static void search(Term *terms, int count, const Scoring *s, Best *best) {
    qsort(terms, (size_t)count, sizeof(Term), by_bound);
    double prefix[MOST_TERMS + 1];
    prefix[0] = 0.0;
    for (int i = 0; i < count; i++)
        prefix[i + 1] = prefix[i] + terms[i].bound;
    double parts[MOST_TERMS], passive_bounds[MOST_TERMS];
    int passive = 0;
    for (;;) {
        double limit = threshold(best);
        while (passive < count && prefix[passive + 1] < limit)
            passive++;
        if (passive == count)
            return;
        int32_t row = INT32_MAX;
        for (int i = passive; i < count; i++) {
            int32_t at = current(&terms[i]);
            if (at < row)
                row = at;
        }
        if (row == INT32_MAX)
            return;
        /* Rows from `row` to `end` lie in one block of each term: if those blocks together cannot
         * reach the threshold, every such row is passed over at once. */
        int32_t end = INT32_MAX;
        double blocks = 0.0;
        for (int i = 0; i < count; i++) {
            Term *t = &terms[i];
            if (i >= passive) {
                if (t->at >= t->count)
                    continue;
                t->shown = t->at / t->block;
            } else {
                reach(t, row);
                if (t->shown >= t->blocks)
                    continue;
            }
            if (t->block_last[t->shown] < end)
                end = t->block_last[t->shown];
            blocks += block_bound(s, t, t->shown);
        }
        if (blocks < limit) {
            if (end == INT32_MAX)
                return;
            for (int i = passive; i < count; i++)
                seek(&terms[i], end + 1);
            continue;
        }
        /* This row's bound: the blocks of the active terms that hold it, and the passive terms' blocks. */
        double rest = 0.0, bound = 0.0;
        for (int i = 0; i < passive; i++) {
            passive_bounds[i] = bound_at(s, &terms[i], row);
            rest += passive_bounds[i];
        }
        bound = rest;
        for (int i = passive; i < count; i++)
            if (current(&terms[i]) == row)
                bound += block_bound(s, &terms[i], terms[i].shown);
        int32_t stored = row >= 0 && row < s->rows ? (s->stored ? s->stored[row] : row) : -1;
        int allowed = stored >= 0 && stored < s->rows && (!s->allowed || s->allowed[stored]);
        if (!allowed || bound < limit) {
            for (int i = passive; i < count; i++)
                if (current(&terms[i]) == row)
                    terms[i].at++;
            continue;
        }
        for (int i = 0; i < count; i++)
            parts[terms[i].position] = 0.0;
        double sure = 0.0; /* the parts found so far */
        int32_t length = s->lengths[row];
        for (int i = passive; i < count; i++)
            if (current(&terms[i]) == row) {
                Term *t = &terms[i];
                double p = part(s, t->weight, (double)t->frequencies[t->at], length);
                parts[t->position] = p;
                sure += p;
                t->at++;
            }
        int skipped = 0;
        for (int i = passive - 1; i >= 0; i--) { /* the passive terms, the strongest first */
            if ((sure + rest) * MARGIN < limit) {
                skipped = 1;
                break;
            }
            Term *t = &terms[i];
            rest -= passive_bounds[i];
            if (passive_bounds[i] == 0.0)
                continue;
            seek(t, row);
            if (current(t) == row) {
                double p = part(s, t->weight, (double)t->frequencies[t->at], length);
                parts[t->position] = p;
                sure += p;
            }
        }
        if (skipped)
            continue;
        double score = 0.0;
        for (int position = 0; position < count; position++)
            score += parts[position];
        Hit hit = {score, row, stored}; /* ties: the earlier row in file order */
        offer(best, hit);
    }
}

PyDoc_STRVAR(top_doc,
"top(postings, weights, lengths, k1, b, average, scale, allowed, stored, k, out_rows, out_scores) -> int\n\n"
"The k best rows by BM25, best first (ties: the lower key). postings: a list of one tuple per query\n"
"term, (rows int32, frequencies uint16, block_last int32, block_bound float32, block); weights:\n"
"float64, one per term (idf times how often the query says it); lengths: int32 terms of each row;\n"
"scale: what the block bounds are multiplied by (>= 1); stored: int32, each row's stored row (rows are\n"
"in file order), or None; allowed: uint8 per stored row or None. Writes the stored rows (int64) and\n"
"scores (float64), best first (ties: the earlier in file order), and returns how many.");

static PyObject *top(PyObject *module, PyObject *args) {
    PyObject *postings, *objects[4], *outputs[2];
    double k1, b, average, scale;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "O!OOddddOOnOO:top", &PyList_Type, &postings, &objects[0], &objects[1], &k1, &b,
                          &average, &scale, &objects[2], &objects[3], &k, &outputs[0], &outputs[1]))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(postings);
    if (count > MOST_TERMS) {
        PyErr_Format(PyExc_ValueError, "top: at most %d terms", MOST_TERMS);
        return NULL;
    }
    Buffer buffers[6] = {0};
    Buffer *lists = PyMem_Calloc((size_t)(4 * count + 1), sizeof(Buffer));
    Term *terms = PyMem_Calloc((size_t)count + 1, sizeof(Term));
    Hit *hits = NULL;
    PyObject *result = NULL;
    int lists_held = 0;
    if (!lists || !terms) {
        PyErr_NoMemory();
        goto done;
    }
    if (take(objects[0], &buffers[0], 8, 0, 0, "weights") != 0 || take(objects[1], &buffers[1], 4, 0, 0, "lengths") != 0 ||
        take(objects[2], &buffers[2], 1, 0, 1, "allowed") != 0 || take(objects[3], &buffers[3], 4, 0, 1, "stored") != 0 ||
        take(outputs[0], &buffers[4], 8, 1, 0, "out_rows") != 0 || take(outputs[1], &buffers[5], 8, 1, 0, "out_scores") != 0)
        goto done;
    Py_ssize_t rows = items(&buffers[1]);
    if (items(&buffers[0]) != count || (buffers[2].held && items(&buffers[2]) != rows) ||
        (buffers[3].held && items(&buffers[3]) != rows) || k < 0 || items(&buffers[4]) < k || items(&buffers[5]) < k ||
        !(average > 0) || !(scale >= 1) || !(k1 >= 0) || !(b >= 0 && b <= 1) || rows > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "top: the arguments do not fit together");
        goto done;
    }
    const double *weights = buffers[0].view.buf;
    const int32_t *lengths = buffers[1].view.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = PyList_GET_ITEM(postings, i);
        PyObject *parts[4];
        Py_ssize_t block;
        if (!PyArg_ParseTuple(entry, "OOOOn:a term's postings", &parts[0], &parts[1], &parts[2], &parts[3], &block))
            goto done;
        static const Py_ssize_t sizes[] = {4, 2, 4, 4};
        static const char *const names[] = {"rows", "frequencies", "block_last", "block_bound"};
        for (int j = 0; j < 4; j++) {
            if (take(parts[j], &lists[4 * i + j], sizes[j], 0, 0, names[j]) != 0) {
                lists_held = (int)(4 * i + j + 1);
                goto done;
            }
        }
        lists_held = (int)(4 * i + 4);
        Term *t = &terms[i];
        t->rows = lists[4 * i].view.buf;
        t->frequencies = lists[4 * i + 1].view.buf;
        t->block_last = lists[4 * i + 2].view.buf;
        t->block_bound = lists[4 * i + 3].view.buf;
        t->count = items(&lists[4 * i]);
        t->blocks = items(&lists[4 * i + 2]);
        t->block = block;
        t->weight = weights[i];
        t->position = (int)i;
        if (block < 1 || items(&lists[4 * i + 1]) != t->count || items(&lists[4 * i + 3]) != t->blocks ||
            t->blocks != (t->count + block - 1) / block || !(t->weight >= 0)) {
            PyErr_SetString(PyExc_ValueError, "top: a term's postings and blocks do not fit together");
            goto done;
        }
    }
    hits = PyMem_Malloc((size_t)(k + 1) * sizeof(Hit));
    if (!hits) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t found = 0;
    Scoring scoring = {k1, b, average, scale, rows, lengths, buffers[2].held ? buffers[2].view.buf : NULL,
                       buffers[3].held ? buffers[3].view.buf : NULL};
    Best best = {hits, 0, k};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) { /* the most a posting of each term scores */
        Term *t = &terms[i];
        double most = 0.0;
        for (Py_ssize_t j = 0; j < t->blocks; j++) {
            double bound = block_bound(&scoring, t, j);
            if (bound > most)
                most = bound;
        }
        t->bound = most;
    }
    if (k > 0)
        search(terms, (int)count, &scoring, &best);
    /* Best first: pop the heap from the back. */
    found = best.size;
    int64_t *out_rows = buffers[4].view.buf;
    double *out_scores = buffers[5].view.buf;
    for (Py_ssize_t at = best.size - 1; at >= 0; at--) {
        out_rows[at] = best.hits[0].row;
        out_scores[at] = best.hits[0].score;
        best.hits[0] = best.hits[best.size - 1];
        best.size--;
        sift_down(&best, 0);
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(found);
done:
    release(buffers, 6);
    if (lists)
        release(lists, lists_held);
    PyMem_Free(lists);
    PyMem_Free(terms);
    PyMem_Free(hits);
    return result;
}

PyDoc_STRVAR(scores_doc,
"scores(postings, weights, lengths, k1, b, average, rows, out)\n\n"
"The BM25 score of each of `rows` (int32 file rows, any order) into `out` (float64): the parts of the\n"
"terms it holds summed in the terms' order, the value `top` gives it, bit for bit; 0 where it holds\n"
"none. postings, weights and lengths as top's.");

static PyObject *scores(PyObject *module, PyObject *args) {
    PyObject *postings, *weights_object, *lengths_object, *rows_object, *out_object;
    double k1, b, average;
    if (!PyArg_ParseTuple(args, "O!OOdddOO:scores", &PyList_Type, &postings, &weights_object, &lengths_object, &k1,
                          &b, &average, &rows_object, &out_object))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(postings);
    Buffer buffers[4] = {0};
    Buffer *lists = PyMem_Calloc((size_t)(2 * count + 1), sizeof(Buffer));
    int lists_held = 0;
    PyObject *result = NULL;
    if (!lists) {
        PyErr_NoMemory();
        goto done;
    }
    if (take(weights_object, &buffers[0], 8, 0, 0, "weights") != 0 || take(lengths_object, &buffers[1], 4, 0, 0, "lengths") != 0 ||
        take(rows_object, &buffers[2], 4, 0, 0, "rows") != 0 || take(out_object, &buffers[3], 8, 1, 0, "out") != 0)
        goto done;
    Py_ssize_t rows = items(&buffers[1]), asked = items(&buffers[2]);
    if (items(&buffers[0]) != count || items(&buffers[3]) != asked || !(average > 0)) {
        PyErr_SetString(PyExc_ValueError, "scores: the arguments do not fit together");
        goto done;
    }
    const double *weights = buffers[0].view.buf;
    const int32_t *lengths = buffers[1].view.buf, *wanted = buffers[2].view.buf;
    double *out = buffers[3].view.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *parts[4];
        Py_ssize_t block;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(postings, i), "OOOOn:a term's postings", &parts[0], &parts[1], &parts[2],
                              &parts[3], &block))
            goto done;
        if (take(parts[0], &lists[2 * i], 4, 0, 0, "rows") != 0 || take(parts[1], &lists[2 * i + 1], 2, 0, 0, "frequencies") != 0) {
            lists_held = (int)(2 * i + 2);
            goto done;
        }
        lists_held = (int)(2 * i + 2);
        if (items(&lists[2 * i]) != items(&lists[2 * i + 1])) {
            PyErr_SetString(PyExc_ValueError, "scores: a term's rows and frequencies differ in length");
            goto done;
        }
    }
    for (Py_ssize_t at = 0; at < asked; at++)
        if (wanted[at] < 0 || wanted[at] >= rows) {
            PyErr_SetString(PyExc_ValueError, "scores: a row is out of range");
            goto done;
        }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t at = 0; at < asked; at++) {
        int32_t row = wanted[at];
        double total = 0.0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const int32_t *term_rows = lists[2 * i].view.buf;
            Py_ssize_t low = 0, high = items(&lists[2 * i]);
            while (low < high) {
                Py_ssize_t middle = low + (high - low) / 2;
                if (term_rows[middle] < row)
                    low = middle + 1;
                else
                    high = middle;
            }
            if (low < items(&lists[2 * i]) && term_rows[low] == row) {
                double f = (double)((const uint16_t *)lists[2 * i + 1].view.buf)[low];
                total += weights[i] * f / (f + k1 * (1.0 - b + b * (double)lengths[row] / average));
            }
        }
        out[at] = total;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release(buffers, 4);
    if (lists)
        release(lists, lists_held);
    PyMem_Free(lists);
    return result;
}

static PyMethodDef module_methods[] = {
    {"count", count, METH_VARARGS, count_doc},
    {"place", place, METH_VARARGS, place_doc},
    {"top", top, METH_VARARGS, top_doc},
    {"scores", scores, METH_VARARGS, scores_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_postings", "Keyword postings: built and searched (host/keywords/postings.py, top.py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__postings(void) { return PyModule_Create(&module_definition); }
