/* mpbroker.codec._fastscan: the plain-message loop of message_set.py, in C.
 *
 * Why C: validating a message set in Python costs ~350 ns per 200-byte message, about
 * half of it the interpreter (a header unpack, a slice, a crc32 call, the compares)
 * whatever the message's size; checksumming the whole 50-message set at once takes
 * 2.6 us. Every produced set, every replicated chunk and every recovered segment goes
 * through that loop, so here it is once more in C. (What is left is zlib's crc32 per
 * message, which is slower on 200 bytes than per byte of a long buffer.)
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
 * arithmetic, and the CRC is zlib's crc32 (the one Python's zlib.crc32 calls).
 * ``scan`` lets go of the GIL over large buffers; the exported buffer cannot be
 * resized or closed meanwhile. Sans-IO like the rest of the codec: nothing here
 * touches a file or imports a Python module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <zlib.h>

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
    if (crc32(0L, p + V1_OVERHEAD, (uInt)(length - V1_HEADER_SIZE)) != read_u32(p + 6))
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

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, scan_doc},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mpbroker.codec._fastscan",
    .m_doc = "The plain-message loop of mpbroker.codec.message_set in C; see _fastscan.c.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__fastscan(void)
{
    return PyModuleDef_Init(&module_def);
}
