/* The text index's word numbering in C (host/constraints/numbering.py says what it does and why).

   A `Numbering` numbers distinct strings (kept as UTF-8 bytes) in order of first sight, in an
   open-addressing hash table over one arena of bytes: no Python object per word. It splits ASCII
   text into words itself (`number_ascii_words`: runs of [A-Za-z0-9_], lowered, each NUL a token of
   its own, exactly what host/constraints/words.py's ASCII path gives), numbers given strings
   (`number_strings`), and hands back its keys sorted by bytes (`sorted_keys`), which for UTF-8 is
   code point order, Python's order of str.

   Built as an optional extension (pyproject.toml): without a C compiler numbering.py does the same
   in Python, with the same arrays as a result. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    char *arena;         /* every key's bytes, back to back, in number order */
    Py_ssize_t arena_used, arena_size;
    Py_ssize_t *starts;  /* key n is arena[starts[n] : starts[n + 1]] */
    uint64_t *hashes;    /* key n's hash */
    Py_ssize_t count, capacity;
    int32_t *slots;      /* the hash table: key number + 1, 0 where empty */
    Py_ssize_t slot_mask;
} Numbering;

static uint64_t hash_bytes(const char *bytes, Py_ssize_t length) {
    uint64_t hash = 0x9E3779B97F4A7C15ull ^ (uint64_t)length;
    Py_ssize_t at = 0;
    for (; at + 8 <= length; at += 8) {
        uint64_t word;
        memcpy(&word, bytes + at, 8);
        hash = (hash ^ word) * 0xFF51AFD7ED558CCDull;
        hash ^= hash >> 32;
    }
    uint64_t tail = 0;
    memcpy(&tail, bytes + at, (size_t)(length - at));
    hash = (hash ^ tail) * 0xC4CEB9FE1A85EC53ull;
    hash ^= hash >> 29;
    hash *= 0xFF51AFD7ED558CCDull;
    return hash ^ (hash >> 32);
}

static int grow_slots(Numbering *self) {
    Py_ssize_t size = self->slots ? 2 * (self->slot_mask + 1) : 1024;
    int32_t *slots = PyMem_Calloc((size_t)size, sizeof(int32_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t number = 0; number < self->count; number++) {
        Py_ssize_t slot = (Py_ssize_t)(self->hashes[number] & (uint64_t)(size - 1));
        while (slots[slot])
            slot = (slot + 1) & (size - 1);
        slots[slot] = (int32_t)(number + 1);
    }
    PyMem_Free(self->slots);
    self->slots = slots;
    self->slot_mask = size - 1;
    return 0;
}

/* The number of `key` (`length` bytes), given it a new one if it has none; -1 on a memory error. */
static int64_t number_of(Numbering *self, const char *key, Py_ssize_t length) {
    uint64_t hash = hash_bytes(key, length);
    Py_ssize_t slot = (Py_ssize_t)(hash & (uint64_t)self->slot_mask);
    for (int32_t found; (found = self->slots[slot]) != 0; slot = (slot + 1) & self->slot_mask) {
        Py_ssize_t number = found - 1, start = self->starts[number];
        if (self->hashes[number] == hash && self->starts[number + 1] - start == length &&
            memcmp(self->arena + start, key, (size_t)length) == 0)
            return number;
    }
    if (self->count >= INT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "more than 2^31 distinct words");
        return -1;
    }
    if (self->count + 1 >= self->capacity) {
        Py_ssize_t capacity = 2 * self->capacity;
        Py_ssize_t *starts = PyMem_Realloc(self->starts, (size_t)(capacity + 1) * sizeof(Py_ssize_t));
        if (starts)
            self->starts = starts;
        uint64_t *hashes = starts ? PyMem_Realloc(self->hashes, (size_t)capacity * sizeof(uint64_t)) : NULL;
        if (!hashes) {
            PyErr_NoMemory();
            return -1;
        }
        self->hashes = hashes;
        self->capacity = capacity;
    }
    if (self->arena_used + length > self->arena_size) {
        Py_ssize_t size = 2 * self->arena_size + length;
        char *arena = PyMem_Realloc(self->arena, (size_t)size);
        if (!arena) {
            PyErr_NoMemory();
            return -1;
        }
        self->arena = arena;
        self->arena_size = size;
    }
    int64_t number = self->count++;
    memcpy(self->arena + self->arena_used, key, (size_t)length);
    self->arena_used += length;
    self->starts[number + 1] = self->arena_used;
    self->hashes[number] = hash;
    self->slots[slot] = (int32_t)(number + 1);
    if (2 * self->count > self->slot_mask && grow_slots(self) != 0) /* at most half full */
        return -1;
    return number;
}

static int Numbering_init(Numbering *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Numbering", keywords))
        return -1;
    if (self->slots)
        return 0;
    self->capacity = 1024;
    self->arena_size = 1 << 16;
    self->starts = PyMem_Calloc((size_t)self->capacity + 1, sizeof(Py_ssize_t));
    self->hashes = PyMem_Calloc((size_t)self->capacity, sizeof(uint64_t));
    self->arena = PyMem_Malloc((size_t)self->arena_size);
    if (!self->starts || !self->hashes || !self->arena) {
        PyErr_NoMemory();
        return -1;
    }
    return grow_slots(self);
}

static void Numbering_dealloc(Numbering *self) {
    PyMem_Free(self->arena);
    PyMem_Free(self->starts);
    PyMem_Free(self->hashes);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t Numbering_length(Numbering *self) {
    return self->count;
}

static int ready(Numbering *self) {
    if (self->slots)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "Numbering.__init__ was not called");
    return -1;
}

/* A bytes object of `count` int32 numbers, taken over from `numbers` (freed either way). */
static PyObject *numbers_as_bytes(int32_t *numbers, Py_ssize_t count) {
    PyObject *result = PyBytes_FromStringAndSize((const char *)numbers, count * (Py_ssize_t)sizeof(int32_t));
    PyMem_Free(numbers);
    return result;
}

static const unsigned char *word_characters(void) {
    static unsigned char table[256];
    if (!table['a'])
        for (int c = 0; c < 128; c++)
            table[c] = (unsigned char)(((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') ? c
                                       : (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : 0);
    return table;
}

PyDoc_STRVAR(number_ascii_words_doc,
"number_ascii_words(text) -> bytes\n\n"
"The numbers (int32) of the words of `text` (an ASCII str), in order: a word is a run of\n"
"[A-Za-z0-9_], lowered; each NUL is a token of its own (numbered as the string \"\\0\").");

static PyObject *number_ascii_words(Numbering *self, PyObject *text) {
    if (ready(self) != 0)
        return NULL;
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_TypeError, "number_ascii_words takes an ASCII str");
        return NULL;
    }
    const char *characters = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), count = 0;
    int32_t *numbers = PyMem_Malloc((size_t)(length + 1) * sizeof(int32_t)); /* a token is a character at least */
    char *word = PyMem_Malloc((size_t)length + 1);
    if (!numbers || !word) {
        PyMem_Free(numbers);
        PyMem_Free(word);
        return PyErr_NoMemory();
    }
    const unsigned char *table = word_characters();
    for (Py_ssize_t at = 0; at < length;) {
        unsigned char c = (unsigned char)characters[at];
        Py_ssize_t size = 0;
        if (c == 0) {
            word[size++] = 0;
            at++;
        } else if (table[c]) {
            while (at < length && table[(unsigned char)characters[at]])
                word[size++] = (char)table[(unsigned char)characters[at++]];
        } else {
            at++;
            continue;
        }
        int64_t number = number_of(self, word, size);
        if (number < 0) {
            PyMem_Free(numbers);
            PyMem_Free(word);
            return NULL;
        }
        numbers[count++] = (int32_t)number;
    }
    PyMem_Free(word);
    return numbers_as_bytes(numbers, count);
}

PyDoc_STRVAR(number_strings_doc,
"number_strings(strings) -> bytes\n\n"
"The numbers (int32) of each str of the list `strings`, each keyed by its UTF-8 (lone surrogates\n"
"as 'surrogatepass' writes them).");

static PyObject *number_strings(Numbering *self, PyObject *strings) {
    if (ready(self) != 0)
        return NULL;
    if (!PyList_Check(strings)) {
        PyErr_SetString(PyExc_TypeError, "number_strings takes a list of str");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(strings);
    int32_t *numbers = PyMem_Malloc((size_t)(count + 1) * sizeof(int32_t));
    if (!numbers)
        return PyErr_NoMemory();
    for (Py_ssize_t index = 0; index < count; index++) {
        PyObject *string = PyList_GET_ITEM(strings, index), *encoded = NULL;
        if (!PyUnicode_Check(string)) {
            PyMem_Free(numbers);
            PyErr_Format(PyExc_TypeError, "strings[%zd] is not a str", index);
            return NULL;
        }
        Py_ssize_t size;
        const char *bytes = PyUnicode_AsUTF8AndSize(string, &size);
        if (!bytes) { /* a lone surrogate */
            PyErr_Clear();
            encoded = PyUnicode_AsEncodedString(string, "utf-8", "surrogatepass");
            if (!encoded) {
                PyMem_Free(numbers);
                return NULL;
            }
            bytes = PyBytes_AS_STRING(encoded);
            size = PyBytes_GET_SIZE(encoded);
        }
        int64_t number = number_of(self, bytes, size);
        Py_XDECREF(encoded);
        if (number < 0) {
            PyMem_Free(numbers);
            return NULL;
        }
        numbers[index] = (int32_t)number;
    }
    return numbers_as_bytes(numbers, count);
}

/* A key to sort: its 8 bytes after the beginning all keys share (`shared`: "https://site/" for a
   field of URLs) as a big-endian number (zero-padded), which orders most keys without reading the
   arena, and its number. */
typedef struct {
    uint64_t prefix;
    int64_t number;
} SortKey;

static const Numbering *sorting; /* qsort has no context argument; the GIL is held throughout */
static Py_ssize_t shared;        /* bytes every key begins with */

static int compare_keys(const void *left, const void *right) {
    const SortKey *a = left, *b = right;
    if (a->prefix != b->prefix)
        return a->prefix < b->prefix ? -1 : 1;
    Py_ssize_t a_start = sorting->starts[a->number], a_length = sorting->starts[a->number + 1] - a_start;
    Py_ssize_t b_start = sorting->starts[b->number], b_length = sorting->starts[b->number + 1] - b_start;
    Py_ssize_t shorter = a_length < b_length ? a_length : b_length, known = shared + 8; /* the same so far */
    if (shorter > known) {
        int order = memcmp(sorting->arena + a_start + known, sorting->arena + b_start + known,
                           (size_t)(shorter - known));
        if (order)
            return order;
    }
    return (a_length > b_length) - (a_length < b_length);
}

static uint64_t prefix_of(const char *bytes, Py_ssize_t length) {
    uint64_t prefix = 0;
    for (int i = 0; i < 8; i++)
        prefix = (prefix << 8) | (i < length ? (unsigned char)bytes[i] : 0);
    return prefix;
}

PyDoc_STRVAR(sorted_keys_doc,
"sorted_keys(skip_first) -> (data, offsets, renumber)\n\n"
"The keys sorted by their bytes: `data` (bytes, concatenated), `offsets` (bytes of int64: key i\n"
"is data[offsets[i]:offsets[i + 1]]) and `renumber` (bytes of int64: number -> place among the\n"
"sorted keys). With `skip_first`, key 0 (which must sort first) is left out and keeps place 0.");

static PyObject *sorted_keys(Numbering *self, PyObject *skip_object) {
    if (ready(self) != 0)
        return NULL;
    int skip_first = PyObject_IsTrue(skip_object);
    if (skip_first < 0)
        return NULL;
    Py_ssize_t count = self->count;
    SortKey *order = PyMem_Malloc((size_t)(count + 1) * sizeof(SortKey));
    if (!order)
        return PyErr_NoMemory();
    Py_ssize_t common = count ? self->starts[1] : 0; /* the beginning every key shares with key 0 */
    for (Py_ssize_t number = 1; number < count && common > 0; number++) {
        Py_ssize_t start = self->starts[number], length = self->starts[number + 1] - start, same = 0;
        while (same < common && same < length && self->arena[start + same] == self->arena[same])
            same++;
        common = same;
    }
    for (Py_ssize_t number = 0; number < count; number++) {
        Py_ssize_t start = self->starts[number] + common;
        order[number].prefix = prefix_of(self->arena + start, self->starts[number + 1] - start);
        order[number].number = number;
    }
    sorting = self;
    shared = common;
    qsort(order, (size_t)count, sizeof(SortKey), compare_keys);
    sorting = NULL;
    Py_ssize_t first = skip_first ? 1 : 0;
    if (skip_first && (count == 0 || order[0].number != 0)) {
        PyMem_Free(order);
        PyErr_SetString(PyExc_ValueError, "key 0 does not sort first");
        return NULL;
    }
    Py_ssize_t kept = count - first, total = self->arena_used - (first ? self->starts[1] : 0);
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (kept + 1) * (Py_ssize_t)sizeof(int64_t));
    PyObject *renumber = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (!data || !offsets || !renumber) {
        PyMem_Free(order);
        Py_XDECREF(data);
        Py_XDECREF(offsets);
        Py_XDECREF(renumber);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(data);
    int64_t *out_offsets = (int64_t *)PyBytes_AS_STRING(offsets), *places = (int64_t *)PyBytes_AS_STRING(renumber);
    int64_t written = 0;
    out_offsets[0] = 0;
    if (count)
        places[0] = 0;
    for (Py_ssize_t place = 0; place < kept; place++) {
        Py_ssize_t number = order[place + first].number, start = self->starts[number];
        Py_ssize_t length = self->starts[number + 1] - start;
        memcpy(out + written, self->arena + start, (size_t)length);
        written += length;
        out_offsets[place + 1] = written;
        places[number] = place;
    }
    PyMem_Free(order);
    return Py_BuildValue("(NNN)", data, offsets, renumber);
}

static PyMethodDef Numbering_methods[] = {
    {"number_ascii_words", (PyCFunction)number_ascii_words, METH_O, number_ascii_words_doc},
    {"number_strings", (PyCFunction)number_strings, METH_O, number_strings_doc},
    {"sorted_keys", (PyCFunction)sorted_keys, METH_O, sorted_keys_doc},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Numbering_as_sequence = {
    .sq_length = (lenfunc)Numbering_length,
};

static PyTypeObject NumberingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "host.constraints._numbering.Numbering",
    .tp_doc = PyDoc_STR("Distinct strings numbered in order of first sight (host/constraints/numbering.py)."),
    .tp_basicsize = sizeof(Numbering),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Numbering_init,
    .tp_dealloc = (destructor)Numbering_dealloc,
    .tp_methods = Numbering_methods,
    .tp_as_sequence = &Numbering_as_sequence,
};

PyDoc_STRVAR(positions_by_word_doc,
"positions_by_word(term_ids, lengths, order, term_offsets, shift, out)\n\n"
"Every word's position, `row << shift | place in its row`, grouped by word (term_offsets[t]:\n"
"term_offsets[t + 1] of `out` for word t) and in order within each word: a counting sort. The\n"
"words are `term_ids` (int32, the rows' words back to back in the order they were fed, `lengths`\n"
"(int64) words a row); `order` (int64, stored row -> row fed, or None for the same) numbers the\n"
"rows as stored. `out` holds int32 or int64.");

static PyObject *positions_by_word(PyObject *module, PyObject *args) {
    PyObject *objects[5], *order_object;
    int shift;
    if (!PyArg_ParseTuple(args, "OOOOiO:positions_by_word", &objects[0], &objects[1], &order_object, &objects[2],
                          &shift, &objects[3]))
        return NULL;
    Py_buffer views[4], order_view;
    int order_held = 0;
    const Py_ssize_t items[] = {4, 8, 8};
    const char *const names[] = {"term_ids", "lengths", "term_offsets"};
    int held = 0;
    for (; held < 3; held++) {
        if (PyObject_GetBuffer(objects[held], &views[held], PyBUF_C_CONTIGUOUS) != 0)
            goto fail;
        if (views[held].itemsize != items[held]) {
            PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes, not %zd", names[held], views[held].itemsize,
                         items[held]);
            held++;
            goto fail;
        }
    }
    if (PyObject_GetBuffer(objects[3], &views[3], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0)
        goto fail;
    held++;
    if (views[3].itemsize != 4 && views[3].itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "out: int32 or int64");
        goto fail;
    }
    int has_order = order_object != Py_None;
    if (has_order) {
        if (PyObject_GetBuffer(order_object, &order_view, PyBUF_C_CONTIGUOUS) != 0)
            goto fail;
        order_held = 1;
        if (order_view.itemsize != 8) {
            PyErr_SetString(PyExc_TypeError, "order: items of 8 bytes");
            goto fail;
        }
    }
    const int32_t *terms = views[0].buf;
    const int64_t *lengths = views[1].buf, *term_offsets = views[2].buf, *order = has_order ? order_view.buf : NULL;
    Py_ssize_t words = views[0].len / 4, rows = views[1].len / 8, vocabulary = views[2].len / 8 - 1;
    Py_ssize_t wide = views[3].itemsize == 8, out_count = views[3].len / views[3].itemsize;
    int64_t *starts = NULL, *next = NULL;
    uint8_t *seen = NULL; /* the rows `order` has named: it must name each once */
    int fits = vocabulary >= 0 && out_count == words && (!has_order || order_view.len / 8 == rows) && shift >= 0 &&
               shift <= (wide ? 62 : 31) && term_offsets[0] == 0 && term_offsets[vocabulary] == words;
    if (fits) {
        starts = PyMem_Malloc((size_t)(rows + 1) * sizeof(int64_t));
        next = PyMem_Malloc((size_t)(vocabulary + 1) * sizeof(int64_t));
        seen = PyMem_Calloc((size_t)rows + 1, 1);
        if (!starts || !next || !seen) {
            PyErr_NoMemory();
            goto fail_arrays;
        }
        starts[0] = 0;
        for (Py_ssize_t row = 0; fits && row < rows; row++) {
            fits = lengths[row] >= 0 && lengths[row] <= words - starts[row] && lengths[row] <= ((int64_t)1 << shift);
            starts[row + 1] = starts[row] + (fits ? lengths[row] : 0);
        }
        fits = fits && starts[rows] == words && (rows == 0 || ((int64_t)(rows - 1) >> (wide ? 62 - shift : 31 - shift)) == 0);
        memcpy(next, term_offsets, (size_t)(vocabulary + 1) * sizeof(int64_t));
    }
    for (Py_ssize_t stored = 0; fits && stored < rows; stored++) {
        int64_t row = has_order ? order[stored] : stored;
        if (row < 0 || row >= rows || seen[row]) {
            fits = 0;
            break;
        }
        seen[row] = 1;
        const int32_t *row_terms = terms + starts[row];
        for (int64_t place = 0; place < lengths[row]; place++) {
            int32_t term = row_terms[place];
            if (term < 0 || term >= vocabulary || next[term] >= term_offsets[term + 1]) {
                fits = 0;
                break;
            }
            int64_t position = ((int64_t)stored << shift) | place;
            if (wide)
                ((int64_t *)views[3].buf)[next[term]++] = position;
            else
                ((int32_t *)views[3].buf)[next[term]++] = (int32_t)position;
        }
    }
    if (!fits)
        PyErr_SetString(PyExc_ValueError, "term_ids, lengths, order, term_offsets, shift and out do not agree");
fail_arrays:
    PyMem_Free(starts);
    PyMem_Free(next);
    PyMem_Free(seen);
    if (order_held)
        PyBuffer_Release(&order_view);
    for (int i = 0; i < 4; i++)
        PyBuffer_Release(&views[i]);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
fail:
    if (order_held)
        PyBuffer_Release(&order_view);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"positions_by_word", positions_by_word, METH_VARARGS, positions_by_word_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_numbering", "The text index's word numbering (host/constraints/numbering.py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__numbering(void) {
    if (PyType_Ready(&NumberingType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_definition);
    if (!module)
        return NULL;
    if (PyModule_AddObjectRef(module, "Numbering", (PyObject *)&NumberingType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
