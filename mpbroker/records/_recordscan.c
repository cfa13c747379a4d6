/* mpbroker.records._recordscan: the record walk of batch.py (_walk), in C.
 *
 * Why C: batch.validate_batches checks every record of a produce's batches (magic 2)
 * with a Python loop over the varint-framed records, ~0.6 us per record whatever its
 * size; it was the largest cost of the broker's modern produce.
 *
 * What it does: ``walk(buffer, pos, end, count)`` checks that buffer[pos:end] is exactly
 * ``count`` well-formed records, with the checks of _walk and _walk_headers: a record
 * length that is a non-negative zigzag varint of at least 6 and within ``end``; the
 * attributes byte; a timestampDelta varlong; an offsetDelta equal to the record's index;
 * a key length (-1 null, written as the one byte 0x01) and a value length (-1 null, any
 * encoding of it), their bytes inside the record; a non-negative header count (a 0 byte,
 * or a varint), each header a non-null key and a value (-1 null); the fields ending
 * exactly at the record's length; no bytes after the last record. Varints as _uvarint
 * reads them: at most 5 bytes and 32 bits (zigzagged) for lengths and deltas, at most 10
 * bytes and 64 bits for the timestamp, longer (non-minimal) encodings accepted.
 *
 * What it answers: None when the records are valid; otherwise -1 when ``count`` is more
 * than the bytes could hold (_walk's first check), the index of the first bad record,
 * or ``max(count, 0)`` for bytes left over after the records. It does not say *why*:
 * batch.py then runs the Python _walk over the same records, which raises the exact
 * RecordBatchError (code and text). So the answers are the pure-Python ones by
 * construction (tests/records/test_recordscan.py compares both on damaged batches);
 * without this module (no compiler at install, or MPBROKER_PURE_PYTHON=1) the Python
 * loop runs alone.
 *
 * Reads: the Python loop reads a record's fields wherever its position takes it (past
 * the record, even past ``end`` inside the buffer), but every read moves the position
 * past the byte read, and a record whose position passes its end is refused (its
 * fields must end exactly there). So this walk refuses a record as soon as a read would
 * fall at or past the record's end, and the verdicts are the same.
 *
 * Any object with the buffer protocol is read in place; 0 <= pos <= end <= len(buffer)
 * or ValueError. Over 64 KiB the GIL is let go (the exported buffer cannot be resized
 * meanwhile). Sans-IO: nothing here touches a file or imports a Python module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MIN_RECORD_SIZE 7           /* varint length (1) + a 6-byte body */
#define MIN_BODY_ZIGZAG 12          /* a body of 6 bytes, zigzagged */
#define NOGIL_BYTES (64 * 1024)
#define VALID (-2)                  /* walk_records: no bad record */
#define TOO_MANY (-1)               /* walk_records: count > bytes / MIN_RECORD_SIZE */

/* A varint at b[*pos] of at most ``max_bytes`` bytes (5: 32 bits, 10: 64 bits, checked
 * on the last byte as _uvarint checks the value), every byte before ``stop``. 0 and the
 * (zigzagged) value in *out, *pos after it; -1 if it is too long, too wide or reaches
 * ``stop``. */
static inline int
uvarint(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t stop, int max_bytes, uint64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t value = 0;
    int k;

    for (k = 0; k < max_bytes; k++, p++) {
        unsigned int byte;
        if (p >= stop)
            return -1;
        byte = b[p];
        if (byte < 0x80) {
            if (k == max_bytes - 1 && byte > (max_bytes == 10 ? 0x01u : 0x0Fu))
                return -1;  /* wider than int64 / int32 */
            *out = value | (uint64_t)byte << (7 * k);
            *pos = p + 1;
            return 0;
        }
        value |= (uint64_t)(byte & 0x7F) << (7 * k);
    }
    return -1;
}

/* Advance *pos by n bytes (n >= 0), refused (-1) if that passes ``stop``: the Python
 * loop's position could never come back to the record's end. */
static inline int
skip(Py_ssize_t *pos, Py_ssize_t stop, uint64_t n)
{
    if (n > (uint64_t)(stop - *pos))
        return -1;
    *pos += (Py_ssize_t)n;
    return 0;
}

/* One record's fields, b[pos:stop]; 0 if valid. */
static inline int
record_fields(const unsigned char *b, Py_ssize_t pos, Py_ssize_t stop, uint64_t expected)
{
    uint64_t v, headers, h;

    pos += 1;  /* attributes (unused by Kafka); the body has at least 6 bytes */
    if (uvarint(b, &pos, stop, 10, &v) < 0)  /* timestampDelta: any varlong */
        return -1;
    if (uvarint(b, &pos, stop, 5, &v) < 0 || v != expected)  /* offsetDelta */
        return -1;
    if (pos >= stop)
        return -1;
    if (b[pos] == 0x01)  /* a null key: only as this one byte (a longer -1 is refused) */
        pos += 1;
    else if (uvarint(b, &pos, stop, 5, &v) < 0 || v & 1 || skip(&pos, stop, v >> 1) < 0)
        return -1;
    if (uvarint(b, &pos, stop, 5, &v) < 0)  /* valueLength */
        return -1;
    if (v & 1) {
        if (v != 1)
            return -1;
    }
    else if (skip(&pos, stop, v >> 1) < 0)
        return -1;
    if (pos >= stop)
        return -1;
    if (b[pos] == 0)
        pos += 1;
    else {
        if (uvarint(b, &pos, stop, 5, &headers) < 0 || headers & 1)
            return -1;
        for (h = headers >> 1; h > 0; h--) {
            if (pos >= stop)
                return -1;
            if (uvarint(b, &pos, stop, 5, &v) < 0 || v & 1 || skip(&pos, stop, v >> 1) < 0)
                return -1;  /* the key: a string, never null */
            if (uvarint(b, &pos, stop, 5, &v) < 0)
                return -1;
            if (v & 1) {
                if (v != 1)
                    return -1;
            }
            else if (skip(&pos, stop, v >> 1) < 0)
                return -1;
        }
    }
    return pos == stop ? 0 : -1;
}

/* VALID, TOO_MANY, the index of the first bad record, or max(count, 0) for bytes left. */
static Py_ssize_t
walk_records(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count)
{
    Py_ssize_t i, stop;
    uint64_t v;

    if (count > (end - pos) / MIN_RECORD_SIZE)
        return TOO_MANY;
    for (i = 0; i < count; i++) {
        if (uvarint(b, &pos, end, 5, &v) < 0 || v & 1 || v < MIN_BODY_ZIGZAG)
            return i;
        if ((v >> 1) > (uint64_t)(end - pos))
            return i;  /* runs past the end of the batch */
        stop = pos + (Py_ssize_t)(v >> 1);
        if (record_fields(b, pos, stop, 2 * (uint64_t)i) < 0)
            return i;
        pos = stop;
    }
    return pos == end ? VALID : (count > 0 ? count : 0);
}

PyDoc_STRVAR(walk_doc,
"walk(buffer, pos, end, count, /) -> None | int\n\n"
"None if buffer[pos:end] is exactly count valid records (batch._walk's checks); else -1\n"
"(more records claimed than the bytes can hold), the index of the first bad record, or\n"
"max(count, 0) for bytes after the records. batch._walk gives the error itself.");

static PyObject *
walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t pos, end, count, result;

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "walk() takes exactly 4 arguments (buffer, pos, end, count)");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred())
        return NULL;
    count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || pos > end || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "walk() needs 0 <= pos <= end <= len(buffer), not pos %zd, end %zd, len %zd",
                     pos, end, view.len);
        return NULL;
    }
    if (end - pos >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        result = walk_records((const unsigned char *)view.buf, pos, end, count);
        Py_END_ALLOW_THREADS
    }
    else
        result = walk_records((const unsigned char *)view.buf, pos, end, count);
    PyBuffer_Release(&view);
    if (result == VALID)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(result);
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mpbroker.records._recordscan",
    .m_doc = "The record walk of mpbroker.records.batch (_walk) in C; see _recordscan.c.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__recordscan(void)
{
    return PyModule_Create(&module_def);
}
