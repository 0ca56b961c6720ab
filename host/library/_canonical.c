/* Canonical ids in one call (host/library/canonical.py): SHA-256 of `url.strip() + "\n" +
   text.strip()` for a whole block of bits.

   In Python each id is a strip, a join, an encode, a hashlib object and its digest, about a
   microsecond a bit on the thread every other step of reading a library file waits for. Here
   ASCII strings (nearly every url and text) are hashed where they lie, stripped by moving two
   pointers, with the CPU's SHA instructions (x86-64 SHA-NI: 2 rounds an instruction). A string
   that is not ASCII is stripped and encoded by Python itself, so Unicode whitespace and lone
   surrogates (UnicodeEncodeError, as `str.encode` raises) behave exactly as in the Python path.

   Built as an optional extension (pyproject.toml), for x86-64 only; on a CPU without SHA-NI it
   refuses to import, since portable C would be slower than hashlib (OpenSSL's vector code). Either
   way hashlib then does the same. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if !((defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__))
#error "x86-64 only (SHA-NI): elsewhere the package runs hashlib"
#endif
#include <cpuid.h>
#include <immintrin.h>

#define DIGEST 32

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t INITIAL[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* The SHA extensions keep the state as two registers, ABEF and CDGH, and take two rounds an
   instruction; the message schedule is four words an instruction pair (msg1, msg2). */
__attribute__((target("sha,sse4.1,ssse3")))
static void compress_sha_ni(uint32_t state[8], const uint8_t *blocks, size_t count) {
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&state[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&state[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    for (; count; count--, blocks += 64) {
        const __m128i abef_before = abef, cdgh_before = cdgh;
        __m128i words[4];
        for (int group = 0; group < 16; group++) {
            __m128i *w = &words[group % 4];
            if (group < 4) {
                *w = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 16 * group)), byte_swap);
            } else {  /* w[t] = w[t-16] + s0(w[t-15]) + w[t-7] + s1(w[t-2]), four at a time */
                __m128i previous = words[(group + 3) % 4];
                __m128i sum = _mm_sha256msg1_epu32(*w, words[(group + 1) % 4]);
                sum = _mm_add_epi32(sum, _mm_alignr_epi8(previous, words[(group + 2) % 4], 4));
                *w = _mm_sha256msg2_epu32(sum, previous);
            }
            __m128i message = _mm_add_epi32(*w, _mm_loadu_si128((const __m128i *)&K[4 * group]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, message);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(message, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef_before);
        cdgh = _mm_add_epi32(cdgh, cdgh_before);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

static int has_sha_ni(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_SSE4_1) || !(ecx & bit_SSSE3))
        return 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 29));
}

typedef struct {
    uint32_t state[8];
    uint8_t pending[64];
    size_t pending_bytes;
    uint64_t total_bytes;
} Hash;

static void hash_start(Hash *hash) {
    memcpy(hash->state, INITIAL, sizeof INITIAL);
    hash->pending_bytes = 0;
    hash->total_bytes = 0;
}

static void hash_add(Hash *hash, const uint8_t *data, size_t size) {
    hash->total_bytes += size;
    if (hash->pending_bytes) {
        size_t taken = 64 - hash->pending_bytes < size ? 64 - hash->pending_bytes : size;
        memcpy(hash->pending + hash->pending_bytes, data, taken);
        hash->pending_bytes += taken, data += taken, size -= taken;
        if (hash->pending_bytes < 64)
            return;
        compress_sha_ni(hash->state, hash->pending, 1);
        hash->pending_bytes = 0;
    }
    if (size >= 64) {
        compress_sha_ni(hash->state, data, size / 64);
        data += size / 64 * 64, size %= 64;
    }
    memcpy(hash->pending, data, size);
    hash->pending_bytes = size;
}

static void hash_end(Hash *hash, uint8_t out[DIGEST]) {
    uint64_t bits = hash->total_bytes * 8;
    uint8_t padding[72] = {0x80};
    size_t padding_bytes = (hash->pending_bytes < 56 ? 56 : 120) - hash->pending_bytes;
    for (int i = 0; i < 8; i++)
        padding[padding_bytes + i] = (uint8_t)(bits >> (56 - 8 * i));
    hash_add(hash, padding, padding_bytes + 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(hash->state[i] >> (24 - 8 * j));
}

/* Python's str.isspace() for an ASCII character (what str.strip() removes). */
static int ascii_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

/* The UTF-8 of `string.strip()`: a view of the string itself when it is ASCII; otherwise Python
   strips and encodes it, and `*owner` holds the bytes made (NULL and an exception set on failure). */
static const uint8_t *stripped(PyObject *string, Py_ssize_t *size, PyObject **owner) {
    *owner = NULL;
    if (!PyUnicode_Check(string)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.80s", Py_TYPE(string)->tp_name);
        return NULL;
    }
    if (PyUnicode_IS_COMPACT_ASCII(string)) {
        const uint8_t *start = PyUnicode_1BYTE_DATA(string), *end = start + PyUnicode_GET_LENGTH(string);
        while (start < end && ascii_space(*start))
            start++;
        while (end > start && ascii_space(end[-1]))
            end--;
        *size = end - start;
        return start;
    }
    PyObject *strip = PyObject_CallMethod(string, "strip", NULL);
    if (strip == NULL)
        return NULL;
    *owner = PyUnicode_AsUTF8String(strip);
    Py_DECREF(strip);
    if (*owner == NULL)
        return NULL;
    *size = PyBytes_GET_SIZE(*owner);
    return (const uint8_t *)PyBytes_AS_STRING(*owner);
}

PyDoc_STRVAR(canonical_digests_doc,
             "canonical_digests(urls, texts) -> list of 32-byte SHA-256 digests of url.strip() + '\\n' + text.strip()");

static PyObject *canonical_digests(PyObject *self, PyObject *args) {
    PyObject *urls, *texts;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &urls, &PyList_Type, &texts))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(urls);
    if (PyList_GET_SIZE(texts) != count)
        return PyErr_Format(PyExc_ValueError, "%zd urls and %zd texts", count, PyList_GET_SIZE(texts));
    PyObject *digests = PyList_New(count);
    if (digests == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t url_size, text_size;
        PyObject *url_owner, *text_owner = NULL;
        const uint8_t *url = stripped(PyList_GET_ITEM(urls, i), &url_size, &url_owner);
        const uint8_t *text = url ? stripped(PyList_GET_ITEM(texts, i), &text_size, &text_owner) : NULL;
        PyObject *digest = text ? PyBytes_FromStringAndSize(NULL, DIGEST) : NULL;
        if (digest != NULL) {
            Hash hash;
            hash_start(&hash);
            hash_add(&hash, url, (size_t)url_size);
            hash_add(&hash, (const uint8_t *)"\n", 1);
            hash_add(&hash, text, (size_t)text_size);
            hash_end(&hash, (uint8_t *)PyBytes_AS_STRING(digest));
            PyList_SET_ITEM(digests, i, digest);
        }
        Py_XDECREF(url_owner);
        Py_XDECREF(text_owner);
        if (digest == NULL) {
            Py_DECREF(digests);
            return NULL;
        }
    }
    return digests;
}

static PyMethodDef methods[] = {
    {"canonical_digests", canonical_digests, METH_VARARGS, canonical_digests_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_canonical", "Canonical ids of a block of bits (host/library/canonical.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__canonical(void) {
    if (!has_sha_ni()) {  /* hashlib's own SHA-256 is then faster than anything written here */
        PyErr_SetString(PyExc_ImportError, "this CPU has no SHA instructions: hashlib computes canonical ids");
        return NULL;
    }
    return PyModule_Create(&module_definition);
}
