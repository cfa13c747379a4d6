/* mpbroker.codec._fastscan: the plain-message loop of message_set.py, in C.
 *
 * Why C: validating a message set in Python costs ~350 ns per 200-byte message, about
 * half of it the interpreter (a header unpack, a slice, a crc32 call, the compares)
 * whatever the message's size; checksumming the whole 50-message set at once takes
 * 2.6 us. Every produced set, every replicated chunk and every recovered segment goes
 * through that loop, so here it is once more in C. What is left is the CRC of each
 * message, see below.
 *
 * What it does: from a start position, walk consecutive *plain* messages -- magic 1,
 * attributes 0 (no codec, no other bit), 6 <= length <= max_length, the message
 * inside the buffer, crc32 of the payload equal to the header's -- and stop at the
 * first message that is not plain or not valid, or at the end. It answers where it
 * stopped and how many messages it passed; ``decode`` also appends each payload
 * (bytes) and the offset after it to two lists.
 *
 * What it does not do: say *why* it stopped, or look at anything else (magic 0,
 * compressed wrappers, torn tails, bad CRCs). message_set.py checks the message at
 * the stop position with its exact Python code (_check_message: errors and their
 * texts, decompression, nesting, the inflate budget) and then calls the scan again
 * after it. So the answers are the pure-Python ones by construction; without this
 * module (no compiler at install, or MPBROKER_PURE_PYTHON=1) the Python loop runs.
 *
 * Any object with the buffer protocol is read in place (bytes, bytearray,
 * memoryview, mmap); positions are Py_ssize_t, bounds are checked in 64-bit
 * arithmetic. ``scan`` lets go of the GIL over large buffers; the exported buffer
 * cannot be resized or closed meanwhile. Sans-IO like the rest of the codec: nothing
 * here touches a file or imports a Python module.
 *
 * The CRC (crc32_ieee: the IEEE CRC-32 with zlib's crc32 semantics, the one Python's
 * zlib.crc32 computes). Once the interpreter was gone it was the largest cost per
 * message: Debian 12's zlib (1.2.13) has no SIMD CRC, ~125 ns for 200 bytes and ~4 GB/s
 * on long buffers, where folding 16 bytes at a time with carry-less multiplies
 * (PCLMULQDQ) passes 14 GB/s: validating 50 x 200 B went from 9.2 to 2.0 us
 * (python -m bench.log_bench --validation-only, the 2-core AMD EPYC development
 * machine). zlib-ng has such a CRC, but it is not a
 * system library on Debian 12 and its Python package offers no C API, so the folding
 * is written here: four 128-bit accumulators over 64-byte blocks, folded into one, then
 * a Barrett reduction to 32 bits, with the constants (powers of x modulo the
 * polynomial, bit-reflected) from Intel's white paper "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction". It is compiled only on x86-64 with
 * GCC/Clang, for that one function's target (the rest builds for any x86-64), and
 * chosen once at import if the CPU has pclmul and SSE4.1; otherwise, or with
 * -DMPBROKER_NO_PCLMUL, zlib's crc32 as before. Either way, fewer than 16 bytes (what
 * folding leaves) go a byte at a time through zlib's own table (get_crc_table), which
 * costs less than a call into zlib. ``CRC`` names the one in use,
 * ``crc32(buffer, value=0)`` exposes it for the tests (against zlib.crc32).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(MPBROKER_NO_PCLMUL)
#define HAVE_PCLMUL_CRC 1
#include <immintrin.h>
#endif

#define LENGTH_SIZE 4
#define V1_HEADER_SIZE 6            /* magic, attributes, crc */
#define V1_OVERHEAD (LENGTH_SIZE + V1_HEADER_SIZE)
#define MAGIC_V1 1
#define CODEC_NONE 0
#define NOGIL_BYTES (64 * 1024)     /* below this, releasing the GIL costs more than it frees */

static inline uint32_t
read_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* -- CRC-32 ------------------------------------------------------------------------- */

/* zlib's crc32 over any length (its own takes an unsigned int). */
static uint32_t
crc32_zlib(uint32_t crc, const unsigned char *p, size_t len)
{
    const size_t chunk = (size_t)1 << 30;
    while (len > chunk) {
        crc = (uint32_t)crc32(crc, p, (uInt)chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)crc32(crc, p, (uInt)len);
}

#ifdef HAVE_PCLMUL_CRC
/* Folding constants for the reflected polynomial 0x04C11DB7 (Intel's paper), each
 * K = reflect64((x^e mod P) << 32) << 1 for the e noted; each pair sits in one
 * register, the low qword multiplying an accumulator's low qword. */
#define K1 0x154442bd4ULL   /* fold by 512 bits: e = 4*128+32 */
#define K2 0x1c6e41596ULL   /*                   e = 4*128-32 */
#define K3 0x1751997d0ULL   /* fold by 128 bits: e = 128+32 */
#define K4 0x0ccaa009eULL   /*                   e = 128-32 */
#define K5 0x163cd6124ULL   /* 64 -> 32 bits:    e = 64 */
#define P_PRIME 0x1DB710641ULL  /* P itself, 33 bits reflected */
#define U_PRIME 0x1F7011641ULL  /* floor(x^64 / P), 33 bits reflected (Barrett's mu) */

/* x's low qword times k's low one, x's high qword times k's high one, plus data. */
__attribute__((target("pclmul,sse4.1")))
static inline __m128i
fold16(__m128i x, __m128i k, __m128i data)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)),
                         data);
}

/* The raw (not inverted) CRC register after ``len`` bytes; len >= 64, a multiple of 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t
crc32_fold(uint32_t reg, const unsigned char *p, size_t len)
{
    const __m128i k12 = _mm_set_epi64x((long long)K2, (long long)K1);
    const __m128i k34 = _mm_set_epi64x((long long)K4, (long long)K3);
    const __m128i k5 = _mm_set_epi64x(0, (long long)K5);
    const __m128i pu = _mm_set_epi64x((long long)U_PRIME, (long long)P_PRIME);
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x1, x2, x3, x4, t;

    x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)reg));
    x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    len -= 64;
    for (; len >= 64; p += 64, len -= 64) {
        x1 = fold16(x1, k12, _mm_loadu_si128((const __m128i *)p));
        x2 = fold16(x2, k12, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold16(x3, k12, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold16(x4, k12, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x1 = fold16(x1, k34, x2);
    x1 = fold16(x1, k34, x3);
    x1 = fold16(x1, k34, x4);
    for (; len >= 16; p += 16, len -= 16)
        x1 = fold16(x1, k34, _mm_loadu_si128((const __m128i *)p));

    /* 128 -> 64 bits: the high qword plus the low one times K4. */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k34, 0x10));
    /* 64 -> 32 (+32 zero bits): the high part plus the low 32 bits times K5. */
    t = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), t);
    /* Barrett: subtract floor(x1 * mu / x^64) * P; the remainder is the second lane. */
    t = x1;
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), pu, 0x10);
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), pu, 0x00);
    x1 = _mm_xor_si128(x1, t);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int use_pclmul;  /* set once at import: the CPU has pclmul and SSE4.1 */
static const z_crc_t *byte_table;  /* zlib's own table (get_crc_table), for short tails */

#define SHORT_CRC_BYTES 16  /* below this, a byte at a time beats a call into zlib */

/* What zlib's crc32(crc, p, len) returns. */
static inline uint32_t
crc32_ieee(uint32_t crc, const unsigned char *p, size_t len)
{
#ifdef HAVE_PCLMUL_CRC
    if (use_pclmul && len >= 64) {
        size_t folded = len & ~(size_t)15;
        crc = ~crc32_fold(~crc, p, folded);  /* zlib inverts on entry and exit */
        p += folded;
        len -= folded;
    }
#endif
    if (len < SHORT_CRC_BYTES) {  /* the tail after folding (a 200-byte message leaves 2) */
        crc = ~crc;
        while (len--)
            crc = (uint32_t)byte_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
        return ~crc;
    }
    return crc32_zlib(crc, p, len);
}

static void
choose_crc(void)
{
    byte_table = get_crc_table();
#ifdef HAVE_PCLMUL_CRC
    __builtin_cpu_init();
    use_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

/* -- messages ------------------------------------------------------------------------ */

/* The position after the plain, valid message at ``pos``, or -1 if that message is
 * anything else (the caller's exact check then says what). */
static inline Py_ssize_t
next_plain(const unsigned char *data, Py_ssize_t pos, Py_ssize_t end, int64_t max_length)
{
    const unsigned char *p = data + pos;
    int64_t length;
    if (end - pos < V1_OVERHEAD || p[4] != MAGIC_V1 || p[5] != CODEC_NONE)
        return -1;
    length = (int32_t)read_u32(p);  /* signed, as Kafka writes it */
    if (length < V1_HEADER_SIZE || length > max_length || length > (int64_t)(end - pos) - LENGTH_SIZE)
        return -1;
    if (crc32_ieee(0, p + V1_OVERHEAD, (size_t)(length - V1_HEADER_SIZE)) != read_u32(p + 6))
        return -1;
    return pos + LENGTH_SIZE + (Py_ssize_t)length;
}

/* Read the buffer and a start position in [0, len]; 0 on success, -1 with an error
 * set (and nothing to release) otherwise. */
static int
get_buffer(PyObject *const *args, Py_buffer *view, Py_ssize_t *start)
{
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return -1;
    *start = PyLong_AsSsize_t(args[1]);
    if (*start == -1 && PyErr_Occurred()) {
        PyBuffer_Release(view);
        return -1;
    }
    if (*start < 0 || *start > view->len) {
        PyErr_Format(PyExc_ValueError, "start %zd is outside the buffer (%zd bytes)", *start, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(buffer, start, max_length) -> (stop, count)\n\n"
"Walk the plain messages (magic 1, no codec, 6 <= length <= max_length, whole, CRC\n"
"right) of ``buffer`` from ``start``; ``stop`` is the position of the first message\n"
"that is not one (or the end), ``count`` how many were passed.");

static PyObject *
scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t start, pos, next, count = 0;
    long long max_length;
    const unsigned char *data;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "scan() takes exactly 3 arguments (buffer, start, max_length)");
        return NULL;
    }
    max_length = PyLong_AsLongLong(args[2]);
    if (max_length == -1 && PyErr_Occurred())
        return NULL;
    if (get_buffer(args, &view, &start) < 0)
        return NULL;
    data = (const unsigned char *)view.buf;
    pos = start;
    if (view.len - start >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        while ((next = next_plain(data, pos, view.len, max_length)) >= 0) {
            pos = next;
            count++;
        }
        Py_END_ALLOW_THREADS
    }
    else {
        while ((next = next_plain(data, pos, view.len, max_length)) >= 0) {
            pos = next;
            count++;
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", pos, count);
}

PyDoc_STRVAR(decode_doc,
"decode(buffer, start, base_offset, payloads, next_offsets) -> stop\n\n"
"Like scan() without a length bound, appending each plain message's payload (bytes)\n"
"to ``payloads`` and ``base_offset`` + the position after it to ``next_offsets``.");

static PyObject *
decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t start, pos, next;
    long long base_offset;
    PyObject *payloads, *next_offsets, *item;
    const unsigned char *data;

    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "decode() takes exactly 5 arguments (buffer, start, base_offset, payloads, next_offsets)");
        return NULL;
    }
    base_offset = PyLong_AsLongLong(args[2]);
    if (base_offset == -1 && PyErr_Occurred())
        return NULL;
    payloads = args[3];
    next_offsets = args[4];
    if (!PyList_Check(payloads) || !PyList_Check(next_offsets)) {
        PyErr_SetString(PyExc_TypeError, "decode() needs two lists");
        return NULL;
    }
    if (get_buffer(args, &view, &start) < 0)
        return NULL;
    data = (const unsigned char *)view.buf;
    for (pos = start; (next = next_plain(data, pos, view.len, INT32_MAX)) >= 0; pos = next) {
        if (base_offset > LLONG_MAX - next) {
            PyErr_SetString(PyExc_OverflowError, "offset past 2**63");
            goto fail;
        }
        item = PyBytes_FromStringAndSize((const char *)data + pos + V1_OVERHEAD, next - pos - V1_OVERHEAD);
        if (item == NULL || PyList_Append(payloads, item) < 0)
            goto fail_item;
        Py_DECREF(item);
        item = PyLong_FromLongLong(base_offset + next);
        if (item == NULL || PyList_Append(next_offsets, item) < 0)
            goto fail_item;
        Py_DECREF(item);
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);

fail_item:
    Py_XDECREF(item);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

PyDoc_STRVAR(crc32_doc,
"crc32(buffer, value=0, /) -> int\n\n"
"zlib.crc32(buffer, value), computed by the implementation named in CRC.");

static PyObject *
crc32_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    uint32_t crc = 0;

    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32() takes 1 or 2 arguments (buffer, value=0)");
        return NULL;
    }
    if (nargs == 2) {  /* any int, taken modulo 2**32, as zlib.crc32 does */
        unsigned long value = PyLong_AsUnsignedLongMask(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        crc = (uint32_t)value;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_ieee(crc, (const unsigned char *)view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    }
    else
        crc = crc32_ieee(crc, (const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, scan_doc},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL, decode_doc},
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL, crc32_doc},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    return PyModule_AddStringConstant(module, "CRC", use_pclmul ? "pclmul" : "zlib");
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mpbroker.codec._fastscan",
    .m_doc = "The plain-message loop of mpbroker.codec.message_set in C; see _fastscan.c.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__fastscan(void)
{
    choose_crc();
    return PyModuleDef_Init(&module_def);
}
