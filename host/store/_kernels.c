/* The query core's compiled loops (host/store/kernels.py): 8-bit codes scored against integer
   weights (`integer_weights`, `code_scores`), exact similarities (`exact_dots`), the candidates
   within a margin of the k-th best score (`margin_candidates`) and the nearest clusters in order
   (`highest_first`). Each is one call where numpy takes several steps. For the compile: the 8-bit
   codes themselves (`encode_codes`), and scattered rows read with pread, the GIL let go of
   (`read_ranges`: what takes Python ~6 µs a row), or copied from memory (`copy_ranges`), and a
   block's records packed in msgpack at once (`pack_records`).

   host/store/codes.py stores each value of a clustered library as a code c (0..255); a query scores a
   row as base + sum_i w_i c_i. numpy has no fast integer matrix-vector product, so the Python path
   casts codes to float32 a block at a time and calls BLAS: more CPU than reading the floats. Here
   the weights are rounded to int16 (host/store/codes.py says how, and how far that moves a
   score) and each row's sum is taken in int32 lanes, which the compiler turns into pmaddwd-style
   multiply-adds: a quarter of the bytes of the floats, at several times the speed of a float scan.

   Built as an optional extension (pyproject.toml): without a C compiler the package installs and
   the numpy path runs, with the same answers (scores move, but only within the margin that sends
   candidates to exact re-scoring). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Sums of at most CHUNK products stay within int32: 256 x 255 x 32767 < 2^31. */
#define CHUNK 256
#define INTEGER_WEIGHT 32767.0 /* the largest weight, rounded (host/store/codes.py) */
#define LEVELS 255.0
#define MIDDLE_CODE (LEVELS / 2)
#define LET_GO_FROM (16 << 20) /* code values scanned (~1 ms) from which the GIL is released */

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define CLONED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONED
#endif

CLONED
static void score_rows(const uint8_t *codes, int64_t dimension, int64_t start, int64_t stop,
                       const int16_t *weights, double scale, double offset, float *out) {
    for (int64_t row = start; row < stop; row++) {
        const uint8_t *values = codes + row * dimension;
        int64_t total = 0;
        for (int64_t first = 0; first < dimension; first += CHUNK) {
            int64_t last = first + CHUNK < dimension ? first + CHUNK : dimension;
            int32_t sum = 0;
            for (int64_t i = first; i < last; i++)
                sum += (int32_t)values[i] * (int32_t)weights[i];
            total += sum;
        }
        *out++ = (float)((double)total * scale + offset);
    }
}

static int get_buffer(PyObject *object, Py_buffer *view, int writable, Py_ssize_t item, const char *name) {
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0)
        return -1;
    if (view->itemsize != item) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes, not %zd", name, view->itemsize, item);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void release(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

/* The first `count` of `objects` as C-contiguous buffers of items[i]-byte items, writable where
   bit i of `writable` is set; -1 (and none held) if one is not. */
static int get_buffers(PyObject *const *objects, Py_buffer *views, int count, const char *const *names,
                       const Py_ssize_t *items, unsigned writable) {
    for (int held = 0; held < count; held++)
        if (get_buffer(objects[held], &views[held], (writable >> held) & 1, items[held], names[held]) != 0) {
            release(views, held);
            return -1;
        }
    return 0;
}

/* The three arguments of a call f(a, b, c), parsed by `format` ("OOO:name"), as buffers. */
static int three_buffers(PyObject *args, const char *format, Py_buffer *views, const char *const *names,
                         const Py_ssize_t *items, unsigned writable) {
    PyObject *objects[3];
    if (!PyArg_ParseTuple(args, format, &objects[0], &objects[1], &objects[2]))
        return -1;
    return get_buffers(objects, views, 3, names, items, writable);
}

PyDoc_STRVAR(code_scores_doc,
"code_scores(codes, dimension, ranges, weights, scale, offset, out, rows=None, first_row=0)\n\n"
"For each [start, stop) row range of `ranges` (int64 pairs) in turn, the scores of those rows of\n"
"`codes` (uint8, rows x dimension, C order) into `out` (float32, back to back):\n"
"sum(weights * codes[row]) * scale + offset, the sum exact in integers (`weights`: int16).\n"
"`rows` (int64), if given, gets each row's number plus `first_row` beside its score.");

static PyObject *code_scores(PyObject *module, PyObject *args) {
    PyObject *objects[5], *rows_object = Py_None;
    Py_ssize_t dimension, first_row = 0;
    double scale, offset;
    if (!PyArg_ParseTuple(args, "OnOOddO|On:code_scores", &objects[0], &dimension, &objects[1], &objects[2], &scale,
                          &offset, &objects[3], &rows_object, &first_row))
        return NULL;
    objects[4] = rows_object;
    static const char *const names[] = {"codes", "ranges", "weights", "out", "rows"};
    static const Py_ssize_t items[] = {1, 8, 2, 4, 8};
    Py_buffer views[5];
    int wanted = rows_object == Py_None ? 4 : 5;
    if (get_buffers(objects, views, wanted, names, items, 0x18) != 0)
        return NULL;
    const uint8_t *codes = views[0].buf;
    const int64_t *pairs = views[1].buf;
    const int16_t *weights = views[2].buf;
    Py_ssize_t count = views[1].len / 16, rows = views[0].len / (dimension > 0 ? dimension : 1), needed = 0;
    const char *wrong = NULL;
    if (dimension <= 0 || views[2].len / 2 != dimension || views[1].len % 16)
        wrong = "the dimension, the weights and the ranges do not agree";
    for (Py_ssize_t i = 0; !wrong && i < count; i++) {
        if (pairs[2 * i] < 0 || pairs[2 * i] > pairs[2 * i + 1] || pairs[2 * i + 1] > rows)
            wrong = "a range is outside the codes";
        needed += pairs[2 * i + 1] - pairs[2 * i];
    }
    if (!wrong && (needed > views[3].len / 4 || (wanted == 5 && needed > views[4].len / 8)))
        wrong = "out or rows is shorter than the rows of the ranges";
    if (!wrong) {
        /* A long scan lets other threads run; a short one keeps the GIL, which another thread could
           otherwise hold for a whole switch interval (5 ms) before this one gets it back. */
        PyThreadState *saved = needed * dimension >= LET_GO_FROM ? PyEval_SaveThread() : NULL;
        float *into = views[3].buf;
        int64_t *numbers = wanted == 5 ? views[4].buf : NULL;
        for (Py_ssize_t i = 0; i < count; i++) {
            score_rows(codes, dimension, pairs[2 * i], pairs[2 * i + 1], weights, scale, offset, into);
            into += pairs[2 * i + 1] - pairs[2 * i];
            for (int64_t row = pairs[2 * i]; numbers && row < pairs[2 * i + 1]; row++)
                *numbers++ = row + first_row;
        }
        if (saved)
            PyEval_RestoreThread(saved);
    }
    release(views, wanted);
    if (wrong) {
        PyErr_SetString(PyExc_ValueError, wrong);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A min-heap of the k largest scores seen: its root is the k-th largest. */
static void sift_down(float *heap, Py_ssize_t size, Py_ssize_t at) {
    for (;;) {
        Py_ssize_t smallest = at, left = 2 * at + 1, right = left + 1;
        if (left < size && heap[left] < heap[smallest])
            smallest = left;
        if (right < size && heap[right] < heap[smallest])
            smallest = right;
        if (smallest == at)
            return;
        float swap = heap[at];
        heap[at] = heap[smallest];
        heap[smallest] = swap;
        at = smallest;
    }
}

/* The k-th highest of `scores` (0 < k <= size), found in `heap` (k values of scratch). */
static float kth_highest(const float *scores, Py_ssize_t size, Py_ssize_t k, float *heap) {
    for (Py_ssize_t i = 0; i < k; i++)
        heap[i] = scores[i];
    for (Py_ssize_t i = k / 2; i-- > 0;)
        sift_down(heap, k, i);
    for (Py_ssize_t i = k; i < size; i++)
        if (scores[i] > heap[0]) {
            heap[0] = scores[i];
            sift_down(heap, k, 0);
        }
    return heap[0];
}

/* The scores, a heap's scratch and positions out: what margin_candidates and highest_first read. */
static const char *const RANKING_NAMES[] = {"scores", "heap", "out"};
static const Py_ssize_t RANKING_ITEMS[] = {4, 4, 8};

PyDoc_STRVAR(margin_candidates_doc,
"margin_candidates(scores, k, margin, heap, out) -> count\n\n"
"The positions (ascending, int64, into `out`) of the `scores` (float32) at or above the k-th\n"
"largest minus `margin` (in float32, as numpy computes `kth - float32(margin)`), and how many.\n"
"`heap` is float32 scratch of k values; 0 < k <= len(scores).");

static PyObject *margin_candidates(PyObject *module, PyObject *args) {
    PyObject *objects[3];
    Py_ssize_t k;
    double margin;
    if (!PyArg_ParseTuple(args, "OndOO:margin_candidates", &objects[0], &k, &margin, &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    if (get_buffers(objects, views, 3, RANKING_NAMES, RANKING_ITEMS, 0x6) != 0)
        return NULL;
    const float *scores = views[0].buf;
    int64_t *out = views[2].buf;
    Py_ssize_t size = views[0].len / 4, found = 0;
    int fits = k > 0 && k <= size && views[1].len / 4 >= k && views[2].len / 8 >= size;
    if (fits) {
        float threshold = kth_highest(scores, size, k, views[1].buf) - (float)margin;
        for (Py_ssize_t i = 0; i < size; i++)
            if (scores[i] >= threshold)
                out[found++] = i;
    }
    release(views, 3);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "k must be within 1 and len(scores); heap and out large enough");
        return NULL;
    }
    return PyLong_FromSsize_t(found);
}

PyDoc_STRVAR(integer_weights_doc,
"integer_weights(query, scale, out) -> (base, integer_scale, offset, typical_error)\n\n"
"A query as one library's codes see it, in integers: `out` (int16) = the weights query * step\n"
"rounded so that the largest is +-32767; the rest as host/store/codes.py's CodedQuery describes them.\n"
"`query` is float32 (dimension), `scale` float32 (2, dimension): each dimension's low and step.\n"
"One call in place of a dozen numpy steps: each costs microseconds when the caches are cold.");

static PyObject *integer_weights(PyObject *module, PyObject *args) {
    static const char *const names[] = {"query", "scale", "out"};
    static const Py_ssize_t items[] = {4, 4, 2};
    Py_buffer views[3];
    if (three_buffers(args, "OOO:integer_weights", views, names, items, 0x4) != 0)
        return NULL;
    Py_ssize_t dimension = views[0].len / 4;
    int fits = views[1].len == 8 * dimension && views[2].len == 2 * dimension;
    double base = 0, squares = 0, peak = 0, error_sum = 0, error_squares = 0, factor = 1;
    if (fits) {
        const float *q = views[0].buf, *low = views[1].buf, *step = low + dimension;
        int16_t *weights = views[2].buf;
        for (Py_ssize_t i = 0; i < dimension; i++) {
            double weight = (double)q[i] * step[i];
            base += (double)q[i] * low[i];
            squares += weight * weight;
            peak = fabs(weight) > peak ? fabs(weight) : peak;
        }
        factor = peak > 0 ? INTEGER_WEIGHT / peak : 1.0;
        double unit = 1.0 / factor;
        for (Py_ssize_t i = 0; i < dimension; i++) {
            double weight = (double)q[i] * step[i], scaled = weight * factor;
            int32_t rounded = (int32_t)(scaled + (scaled >= 0 ? 0.5 : -0.5));  /* |scaled| <= 32767 */
            weights[i] = (int16_t)rounded;
            double error = rounded * unit - weight;
            error_sum += error;
            error_squares += error * error;
        }
    }
    release(views, 3);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "the query, the scale (2 x dimension) and out do not agree");
        return NULL;
    }
    double base32 = (double)(float)base;  /* the base as float32, as the numpy path adds it */
    /* The codes' own error (sum of squares / 12) and the weights' rounding, as spread as a code
       can be from the middle one (host/store/codes.py). */
    double typical = sqrt(squares / 12 + MIDDLE_CODE * MIDDLE_CODE * error_squares);
    return Py_BuildValue("dddd", base32, 1.0 / factor, base32 - MIDDLE_CODE * error_sum, typical);
}

/* Eight float64 sums side by side, each over every eighth value, added in a fixed order: the same
   result whichever clone runs (a float32 product is exact in float64, so fused multiply-adds change
   nothing), and a sum the compiler can keep in vector registers without reordering it. */
CLONED
static double exact_dot(const float *row, const float *query, Py_ssize_t dimension) {
    double sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    Py_ssize_t i = 0;
    for (; i + 8 <= dimension; i += 8)
        for (int lane = 0; lane < 8; lane++)
            sums[lane] += (double)row[i + lane] * (double)query[i + lane];
    for (; i < dimension; i++)
        sums[i % 8] += (double)row[i] * (double)query[i];
    return ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
}

PyDoc_STRVAR(exact_dots_doc,
"exact_dots(vectors, query, out, rows=None)\n\n"
"out[i] = the dot product of row i of `vectors` (float32, rows x dimension, C order), or with\n"
"`rows` (int64) of row rows[i], with `query` (float32), accumulated in float64 and rounded to\n"
"float32: the similarity clients see. Rows are read where they are: nothing is gathered.");

static PyObject *exact_dots(PyObject *module, PyObject *args) {
    PyObject *objects[4] = {NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTuple(args, "OOO|O:exact_dots", &objects[0], &objects[1], &objects[2], &objects[3]))
        return NULL;
    static const char *const names[] = {"vectors", "query", "out", "rows"};
    static const Py_ssize_t items[] = {4, 4, 4, 8};
    Py_buffer views[4];
    int wanted = objects[3] == Py_None ? 3 : 4;
    if (get_buffers(objects, views, wanted, names, items, 0x4) != 0)
        return NULL;
    Py_ssize_t dimension = views[1].len / 4, count = views[2].len / 4;
    Py_ssize_t stored = dimension > 0 ? views[0].len / 4 / dimension : 0;
    const int64_t *rows = wanted == 4 ? views[3].buf : NULL;
    int fits = dimension > 0 && views[0].len % (4 * dimension) == 0 &&
               (rows ? views[3].len / 8 == count : stored == count);
    for (Py_ssize_t i = 0; fits && rows && i < count; i++)
        fits = rows[i] >= 0 && rows[i] < stored;
    if (fits) {
        const float *vectors = views[0].buf, *query = views[1].buf;
        float *out = views[2].buf;
        for (Py_ssize_t i = 0; i < count; i++)
            out[i] = (float)exact_dot(vectors + (rows ? rows[i] : i) * dimension, query, dimension);
    }
    release(views, wanted);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "vectors must hold len(out) rows of len(query) values, "
                                          "or every one of `rows` (as many as out)");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(highest_first_doc,
"highest_first(scores, needed, heap, out) -> count\n\n"
"The positions of the `scores` (float32) at or above the (needed + 1)-th highest, highest first,\n"
"equal scores in position order, into `out` (int64, as long as scores), and how many: at least\n"
"needed + 1, more when scores tie with the last. `heap`: float32 scratch of needed + 1 values.");

static PyObject *highest_first(PyObject *module, PyObject *args) {
    PyObject *objects[3];
    Py_ssize_t needed;
    if (!PyArg_ParseTuple(args, "OnOO:highest_first", &objects[0], &needed, &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    if (get_buffers(objects, views, 3, RANKING_NAMES, RANKING_ITEMS, 0x6) != 0)
        return NULL;
    const float *scores = views[0].buf;
    int64_t *out = views[2].buf;
    Py_ssize_t size = views[0].len / 4, kept = needed + 1, found = 0;
    int fits = needed >= 0 && kept <= size && views[1].len / 4 >= kept && views[2].len / 8 >= size;
    if (fits) {
        float last = kth_highest(scores, size, kept, views[1].buf);
        for (Py_ssize_t i = 0; i < size; i++)
            if (scores[i] >= last)
                out[found++] = i;
        /* Insertion sort, moving only past strictly lower scores: equal ones keep position order,
           and since all but `needed` of them tie with the last, it moves little. */
        for (Py_ssize_t i = 1; i < found; i++) {
            int64_t position = out[i];
            Py_ssize_t j = i;
            for (; j > 0 && scores[out[j - 1]] < scores[position]; j--)
                out[j] = out[j - 1];
            out[j] = position;
        }
    }
    release(views, 3);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "needed + 1 must be within len(scores); heap and out large enough");
        return NULL;
    }
    return PyLong_FromSsize_t(found);
}

/* The same float32 steps as numpy's (subtract, divide, round half to even, clip), so the codes are
   the same bytes either way; the compiler keeps them in vector registers, one pass in place of five. */
CLONED
static void encode_rows(const float *rows, Py_ssize_t count, Py_ssize_t dimension, const float *low,
                        const float *step, uint8_t *out) {
    for (Py_ssize_t row = 0; row < count; row++, rows += dimension, out += dimension)
        for (Py_ssize_t i = 0; i < dimension; i++) {
            float level = rintf((rows[i] - low[i]) / step[i]);
            out[i] = (uint8_t)(level < 0.0f ? 0.0f : level > (float)LEVELS ? (float)LEVELS : level);
        }
}

PyDoc_STRVAR(encode_codes_doc,
"encode_codes(rows, scale, out)\n\n"
"`out` (uint8, rows x dimension) = the nearest of 256 levels of each value of `rows` (float32,\n"
"rows x dimension): rint((x - low) / step) clipped to 0..255, `scale` (float32, 2 x dimension)\n"
"giving each dimension's low and step (host/store/codes.py's encode, byte for byte).");

static PyObject *encode_codes(PyObject *module, PyObject *args) {
    static const char *const names[] = {"rows", "scale", "out"};
    static const Py_ssize_t items[] = {4, 4, 1};
    Py_buffer views[3];
    if (three_buffers(args, "OOO:encode_codes", views, names, items, 0x4) != 0)
        return NULL;
    Py_ssize_t dimension = views[1].len / 8, count = dimension > 0 ? views[2].len / dimension : 0;
    int fits = dimension > 0 && views[1].len == 8 * dimension && views[2].len == count * dimension &&
               views[0].len == 4 * views[2].len;
    if (fits) {
        const float *low = views[1].buf;
        PyThreadState *saved = views[2].len >= LET_GO_FROM ? PyEval_SaveThread() : NULL;
        encode_rows(views[0].buf, count, dimension, low, low + dimension, views[2].buf);
        if (saved)
            PyEval_RestoreThread(saved);
    }
    release(views, 3);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "rows, scale (2 x dimension) and out (rows x dimension) do not agree");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Whether `count` ranges [starts[i], starts[i] + lengths[i]) lie within a source of `source_length`
   bytes (a file: any length) and fill `out_length` bytes exactly, back to back. */
static int ranges_fill(const int64_t *starts, const int64_t *lengths, Py_ssize_t count, Py_ssize_t source_length,
                       Py_ssize_t out_length) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (starts[i] < 0 || lengths[i] < 0 || starts[i] > source_length - lengths[i] || lengths[i] > out_length - total)
            return 0;
        total += lengths[i];
    }
    return total == out_length;
}

PyDoc_STRVAR(read_ranges_doc,
"read_ranges(fd, starts, lengths, out)\n\n"
"Fill `out` (bytes, writable) with the file's bytes [starts[i], starts[i] + lengths[i]) for each i\n"
"in turn (int64 each), back to back; ranges that follow one another in the file are read at once.\n"
"The GIL is let go of while reading. OSError if the file ends before a range does.");

static PyObject *read_ranges(PyObject *module, PyObject *args) {
    static const char *const names[] = {"starts", "lengths", "out"};
    static const Py_ssize_t items[] = {8, 8, 1};
    PyObject *objects[3];
    int fd;
    if (!PyArg_ParseTuple(args, "iOOO:read_ranges", &fd, &objects[0], &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    if (get_buffers(objects, views, 3, names, items, 0x4) != 0)
        return NULL;
    const int64_t *starts = views[0].buf, *lengths = views[1].buf;
    Py_ssize_t count = views[0].len / 8;
    if (views[1].len != views[0].len || !ranges_fill(starts, lengths, count, PY_SSIZE_T_MAX, views[2].len)) {
        release(views, 3);
        PyErr_SetString(PyExc_ValueError, "starts and lengths (int64, as many) do not fill out exactly");
        return NULL;
    }
    char *out = views[2].buf;
    int failure = 0; /* an errno, or -1: the file ended first */
    int64_t failed_at = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !failure;) {
        int64_t start = starts[i], length = lengths[i];
        for (i++; i < count && starts[i] == start + length; i++) /* the next range follows: one read */
            length += lengths[i];
        for (int64_t done = 0; done < length;) {
            ssize_t got = pread(fd, out + done, (size_t)(length - done), (off_t)(start + done));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                failure = got < 0 ? errno : -1;
                failed_at = start + done;
                break;
            }
            done += got;
        }
        out += length;
    }
    Py_END_ALLOW_THREADS
    release(views, 3);
    if (failure > 0) {
        errno = failure;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (failure < 0)
        return PyErr_Format(PyExc_OSError, "unexpected end of file at byte %lld", (long long)failed_at);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(copy_ranges_doc,
"copy_ranges(source, starts, lengths, out)\n\n"
"`read_ranges` from memory: `out` (bytes, writable) = source[starts[i] : starts[i] + lengths[i]]\n"
"for each i in turn (int64 each), back to back.");

static PyObject *copy_ranges(PyObject *module, PyObject *args) {
    static const char *const names[] = {"source", "starts", "lengths", "out"};
    static const Py_ssize_t items[] = {1, 8, 8, 1};
    PyObject *objects[4];
    if (!PyArg_ParseTuple(args, "OOOO:copy_ranges", &objects[0], &objects[1], &objects[2], &objects[3]))
        return NULL;
    Py_buffer views[4];
    if (get_buffers(objects, views, 4, names, items, 0x8) != 0)
        return NULL;
    const int64_t *starts = views[1].buf, *lengths = views[2].buf;
    Py_ssize_t count = views[1].len / 8, total = views[3].len;
    int fits = views[2].len == views[1].len && ranges_fill(starts, lengths, count, views[0].len, total);
    if (fits) {
        const char *source = views[0].buf;
        char *out = views[3].buf;
        PyThreadState *saved = total >= LET_GO_FROM ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < count; out += lengths[i], i++)
            memcpy(out, source + starts[i], (size_t)lengths[i]);
        if (saved)
            PyEval_RestoreThread(saved);
    }
    release(views, 4);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths (int64, as many, within source) do not fill out exactly");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- records.bin: each record {"text": text, "info": info} in msgpack, the None values of info left out ---- */

/* The size of a msgpack str (or map) header for `size` bytes (or entries), as msgspec writes it. */
static Py_ssize_t str_header_size(Py_ssize_t size) { return size < 32 ? 1 : size < 256 ? 2 : size < 65536 ? 3 : 5; }
static Py_ssize_t map_header_size(Py_ssize_t size) { return size < 16 ? 1 : size < 65536 ? 3 : 5; }

static char *put_big_endian(char *out, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--)
        *out++ = (char)(value >> (8 * i));
    return out;
}

static char *put_str(char *out, const char *data, Py_ssize_t size) {
    if (size < 32)
        *out++ = (char)(0xa0 | size);
    else if (size < 256)
        *out++ = (char)0xd9, out = put_big_endian(out, (uint64_t)size, 1);
    else if (size < 65536)
        *out++ = (char)0xda, out = put_big_endian(out, (uint64_t)size, 2);
    else
        *out++ = (char)0xdb, out = put_big_endian(out, (uint64_t)size, 4);
    memcpy(out, data, (size_t)size);
    return out + size;
}

static char *put_map_header(char *out, Py_ssize_t entries) {
    if (entries < 16)
        *out++ = (char)(0x80 | entries);
    else if (entries < 65536)
        *out++ = (char)0xde, out = put_big_endian(out, (uint64_t)entries, 2);
    else
        *out++ = (char)0xdf, out = put_big_endian(out, (uint64_t)entries, 4);
    return out;
}

/* The UTF-8 of a str (Python keeps it with the str once asked; an ASCII str is its own), or NULL
   with an exception (not a str; a lone surrogate: UnicodeEncodeError, as msgspec raises). */
static const char *utf8_of(PyObject *string, Py_ssize_t *size) {
    if (!PyUnicode_Check(string)) {
        PyErr_Format(PyExc_TypeError, "a record holds strings, got %.80s", Py_TYPE(string)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(string, size);
}

/* The packed size of one record (and of its entries when `out` is not NULL: then written there). */
static Py_ssize_t pack_record(PyObject *text, PyObject *info, char *out) {
    if (!PyDict_Check(info)) {
        PyErr_Format(PyExc_TypeError, "a record's info is a dict, got %.80s", Py_TYPE(info)->tp_name);
        return -1;
    }
    Py_ssize_t text_size, entries = 0, place = 0, size;
    const char *text_data = utf8_of(text, &text_size);
    if (text_data == NULL)
        return -1;
    PyObject *key, *value;
    Py_ssize_t info_size = 0;
    while (PyDict_Next(info, &place, &key, &value)) {
        if (value == Py_None)
            continue;
        Py_ssize_t key_size, value_size;
        if (utf8_of(key, &key_size) == NULL || utf8_of(value, &value_size) == NULL)
            return -1;
        entries++;
        info_size += str_header_size(key_size) + key_size + str_header_size(value_size) + value_size;
    }
    size = 1 + 5 + str_header_size(text_size) + text_size + 5 + map_header_size(entries) + info_size;
    if (out == NULL)
        return size;
    *out++ = (char)0x82;
    out = put_str(out, "text", 4);
    out = put_str(out, text_data, text_size);
    out = put_str(out, "info", 4);
    out = put_map_header(out, entries);
    for (place = 0; PyDict_Next(info, &place, &key, &value);) {
        if (value == Py_None)
            continue;
        Py_ssize_t key_size, value_size;
        const char *key_data = PyUnicode_AsUTF8AndSize(key, &key_size);  /* known good: sized above */
        const char *value_data = PyUnicode_AsUTF8AndSize(value, &value_size);
        out = put_str(out, key_data, key_size);
        out = put_str(out, value_data, value_size);
    }
    return size;
}

PyDoc_STRVAR(pack_records_doc,
"pack_records(texts, infos) -> (records, lengths)\n\n"
"Each record {\"text\": texts[i], \"info\": infos[i]} packed as msgspec's msgpack encoder packs it, with\n"
"the None values of info left out: `records` the packed records back to back (bytes), `lengths`\n"
"each one's size (bytes of int64).");

static PyObject *pack_records(PyObject *module, PyObject *args) {
    PyObject *texts, *infos;
    if (!PyArg_ParseTuple(args, "O!O!:pack_records", &PyList_Type, &texts, &PyList_Type, &infos))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(infos) != count)
        return PyErr_Format(PyExc_ValueError, "%zd texts and %zd infos", count, PyList_GET_SIZE(infos));
    PyObject *lengths = PyBytes_FromStringAndSize(NULL, 8 * count);
    if (lengths == NULL)
        return NULL;
    int64_t *length = (int64_t *)PyBytes_AS_STRING(lengths);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        length[i] = pack_record(PyList_GET_ITEM(texts, i), PyList_GET_ITEM(infos, i), NULL);
        if (length[i] < 0) {
            Py_DECREF(lengths);
            return NULL;
        }
        total += length[i];
    }
    PyObject *records = PyBytes_FromStringAndSize(NULL, total);
    if (records == NULL) {
        Py_DECREF(lengths);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(records);
    for (Py_ssize_t i = 0; i < count; i++)  /* the dicts are as sized: nothing runs Python between */
        out += pack_record(PyList_GET_ITEM(texts, i), PyList_GET_ITEM(infos, i), out);
    return Py_BuildValue("(NN)", records, lengths);
}

static PyMethodDef methods[] = {
    {"copy_ranges", copy_ranges, METH_VARARGS, copy_ranges_doc},
    {"pack_records", pack_records, METH_VARARGS, pack_records_doc},
    {"read_ranges", read_ranges, METH_VARARGS, read_ranges_doc},
    {"encode_codes", encode_codes, METH_VARARGS, encode_codes_doc},
    {"highest_first", highest_first, METH_VARARGS, highest_first_doc},
    {"exact_dots", exact_dots, METH_VARARGS, exact_dots_doc},
    {"code_scores", code_scores, METH_VARARGS, code_scores_doc},
    {"integer_weights", integer_weights, METH_VARARGS, integer_weights_doc},
    {"margin_candidates", margin_candidates, METH_VARARGS, margin_candidates_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_kernels", "The query core's compiled loops (host/store/kernels.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    return PyModule_Create(&module_definition);
}
