/*
 * snakka.records._recordwalk: check that a v2 batch's records are what its header claims.
 *
 * One function, walk_records(), the C twin of snakka.records.walk.walk_records_py (same
 * arguments, same results; the Python version is the specification and the fallback when this
 * module cannot be built). It walks the (already decompressed) records section of ONE batch,
 * record by record, the way Kafka's DefaultRecord.readFrom reads them on the broker's produce
 * path (LogValidator), and checks:
 *
 *   - exactly `count` records, and not one byte more (Kafka: "Incorrect declared batch size");
 *   - each record's length varint is >= 0 and fits the section, and its fields use exactly that
 *     many bytes;
 *   - varints are at most 5 bytes (int32) and varlongs at most 10 bytes (Kafka's ByteUtils);
 *   - offset deltas are 0, 1, ..., count-1 (Kafka rewrites non-consecutive deltas of compressed
 *     batches and ignores them in uncompressed ones; no v2 client writes them, so we refuse);
 *   - key and value lengths are -1 (null) or fit; header count >= 0; header key lengths >= 0;
 *     header value lengths -1 or fit;
 *   - with bounds given, every record timestamp other than -1 lies within [ts_lo, ts_hi]
 *     (Kafka's message.timestamp.before/after.max.ms, CreateTime topics only);
 *   - with require_keys (a compacted topic), every record has a key (key length != -1): the
 *     cleaner keeps the latest record per key, so Kafka's LogValidator refuses keyless ones.
 *     As in Kafka, a record's key error takes precedence over its timestamp error.
 *
 * It returns (max_timestamp, bad_timestamp_indices, keyless_indices) where max_timestamp is
 * the largest record timestamp (-1 if none is larger: Kafka's NO_TIMESTAMP start value), the
 * first list holds the indices of records outside the bounds and the second those without a
 * key (each None when empty). A structural error raises ValueError with a message naming the
 * record index; nothing else is ever raised for any input.
 *
 * Work is linear in the section's size and never allocates per record; the GIL is held (the
 * walk is a few nanoseconds per record, cheaper than releasing it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* One unsigned varint of at most max_shift/7 + 1 bytes (Kafka's ByteUtils limits: 5 bytes for
 * a varint, 10 for a varlong); -1 when it runs past end or is too long. */
static inline int read_uvarint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int max_shift,
                               uint64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    for (;;) {
        if (i >= end)
            return -1;
        uint8_t b = p[i++];
        if (!(b & 0x80)) {
            value |= (uint64_t)b << shift;
            break;
        }
        value |= (uint64_t)(b & 0x7F) << shift;
        shift += 7;
        if (shift > max_shift)
            return -1;
    }
    *pos = i;
    *out = value;
    return 0;
}

/* Kafka's ByteUtils.readVarint: at most 5 bytes, 32-bit zigzag. */
static inline int read_varint32(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int32_t *out)
{
    uint64_t v;
    if (read_uvarint(p, end, pos, 28, &v) < 0)
        return -1;
    uint32_t value = (uint32_t)v;
    *out = (int32_t)((value >> 1) ^ (0u - (value & 1u)));
    return 0;
}

/* Kafka's ByteUtils.readVarlong: at most 10 bytes, 64-bit zigzag. */
static inline int read_varint64(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t value;
    if (read_uvarint(p, end, pos, 63, &value) < 0)
        return -1;
    *out = (int64_t)((value >> 1) ^ (0ull - (value & 1ull)));
    return 0;
}

#define FAIL(...) do { PyErr_Format(PyExc_ValueError, __VA_ARGS__); goto error; } while (0)
#define V32(var, what) do { if (read_varint32(p, rec_end, &pos, &(var)) < 0) \
    FAIL("record %zd: malformed or truncated %s varint", i, what); } while (0)

/* Append index i to *list, creating the list on first use; -1 on a memory error. */
static int append_index(PyObject **list, Py_ssize_t i)
{
    if (*list == NULL && (*list = PyList_New(0)) == NULL)
        return -1;
    PyObject *idx = PyLong_FromSsize_t(i);
    if (idx == NULL)
        return -1;
    int rc = PyList_Append(*list, idx);
    Py_DECREF(idx);
    return rc;
}

static PyObject *walk_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count;
    long long base_ts, ts_lo, ts_hi;
    int check_ts, require_keys = 0;
    PyObject *bad = NULL, *keyless = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnLpLL|p", &view, &start, &end, &count, &base_ts, &check_ts,
                          &ts_lo, &ts_hi, &require_keys))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    if (start < 0 || end > view.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "records section out of the buffer's bounds");
        goto error;
    }
    /* The smallest record is 7 bytes (length, attributes, timestamp delta, offset delta, key
       length, value length, header count): a claim of more records than that allows fails
       here, in O(1), whatever the count. */
    if (count < 0 || count > (end - start) / 7)
        FAIL("batch claims %zd records but its records section holds only %zd bytes",
             count, end - start);

    int64_t max_ts = -1;
    Py_ssize_t pos = start;
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        int32_t length, offset_delta, klen, vlen, nheaders;
        int64_t ts_delta;
        Py_ssize_t rec_end = end;
        if (read_varint32(p, end, &pos, &length) < 0)
            FAIL("record %zd: malformed or truncated length varint", i);
        if (length < 0 || length > end - pos)
            FAIL("record %zd: invalid record size %d with %zd bytes left in the batch",
                 i, (int)length, end - pos);
        rec_end = pos + length;
        if (pos >= rec_end)
            FAIL("record %zd: record of %d bytes has no attributes", i, (int)length);
        pos++; /* attributes: unused in v2 */
        if (read_varint64(p, rec_end, &pos, &ts_delta) < 0)
            FAIL("record %zd: malformed or truncated timestamp delta varlong", i);
        V32(offset_delta, "offset delta");
        if (offset_delta != i)
            FAIL("record %zd: offset delta %d, expected %zd (inner offsets must be consecutive)",
                 i, (int)offset_delta, i);
        V32(klen, "key length");
        if (klen < -1 || klen > rec_end - pos)
            FAIL("record %zd: invalid key length %d", i, (int)klen);
        if (klen > 0)
            pos += klen;
        V32(vlen, "value length");
        if (vlen < -1 || vlen > rec_end - pos)
            FAIL("record %zd: invalid value length %d", i, (int)vlen);
        if (vlen > 0)
            pos += vlen;
        V32(nheaders, "header count");
        if (nheaders < 0 || nheaders > rec_end - pos)
            FAIL("record %zd: invalid number of record headers %d", i, (int)nheaders);
        for (int32_t h = 0; h < nheaders; h++) {
            int32_t hk, hv;
            V32(hk, "header key length");
            if (hk < 0 || hk > rec_end - pos)
                FAIL("record %zd: invalid header key length %d", i, (int)hk);
            pos += hk;
            V32(hv, "header value length");
            if (hv < -1 || hv > rec_end - pos)
                FAIL("record %zd: invalid header value length %d", i, (int)hv);
            if (hv > 0)
                pos += hv;
        }
        if (pos != rec_end)
            FAIL("record %zd: record size %d but its fields use %zd bytes",
                 i, (int)length, (Py_ssize_t)length - (rec_end - pos));
        /* Java's long addition wraps; so does this (unsigned arithmetic, then back). */
        int64_t ts = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        if (ts > max_ts)
            max_ts = ts;
        /* One branch per record on the fast path (require_keys is 0 for a delete topic). */
        if (require_keys && klen == -1) {
            if (append_index(&keyless, i) < 0)
                goto error;
        } else if (check_ts && ts != -1 && (ts < ts_lo || ts > ts_hi)) {
            if (append_index(&bad, i) < 0)
                goto error;
        }
    }
    if (pos != end)
        FAIL("incorrect declared batch size: %zd bytes remain after %zd records",
             end - pos, count);
    PyBuffer_Release(&view);
    /* "N" steals the lists' references; None stands for an empty list. */
    if (bad == NULL) {
        Py_INCREF(Py_None);
        bad = Py_None;
    }
    if (keyless == NULL) {
        Py_INCREF(Py_None);
        keyless = Py_None;
    }
    return Py_BuildValue("(LNN)", (long long)max_ts, bad, keyless);

error:
    Py_XDECREF(bad);
    Py_XDECREF(keyless);
    PyBuffer_Release(&view);
    return NULL;
}

/*
 * record_spans(buf, start, end, count, last_offset_delta): the log cleaner's walk (issue 13;
 * snakka.records.spans.record_spans_py is its specification and fallback). For each of the
 * `count` records of one (decompressed) records section it returns
 *   (record_start, record_end, timestamp_delta, after_timestamp, offset_delta, key, has_value)
 * with key a bytes copy (None for a null key): the cleaner looks keys up and copies kept
 * records as slices, so values and headers are skipped by position, never read. It checks what
 * it relies on: every length inside its record and the section, offset deltas within
 * [0, last_offset_delta], and exactly `count` records filling the section; anything else
 * raises ValueError naming the record.
 */
static PyObject *record_spans(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count, last_delta;
    PyObject *out = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnn", &view, &start, &end, &count, &last_delta))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    if (start < 0 || end > view.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "records section out of the buffer's bounds");
        goto error;
    }
    if (count < 0 || count > (end - start) / 6)
        FAIL("batch claims %zd records but its records section holds only %zd bytes",
             count, end - start);
    if ((out = PyList_New(count)) == NULL)
        goto error;
    Py_ssize_t pos = start;
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        int32_t length, offset_delta, klen, vlen;
        int64_t ts_delta;
        Py_ssize_t rec_start = pos, rec_end = end, after_ts;
        if (read_varint32(p, end, &pos, &length) < 0)
            FAIL("record %zd: malformed or truncated length varint", i);
        if (length < 6 || length > end - pos)
            FAIL("record %zd: invalid record size %d with %zd bytes left in the batch",
                 i, (int)length, end - pos);
        rec_end = pos + length;
        pos++; /* attributes: unused in v2 */
        if (read_varint64(p, rec_end, &pos, &ts_delta) < 0)
            FAIL("record %zd: malformed or truncated timestamp delta varlong", i);
        after_ts = pos;
        V32(offset_delta, "offset delta");
        if (offset_delta < 0 || offset_delta > last_delta)
            FAIL("record %zd: offset delta %d outside the batch's [0, %zd]",
                 i, (int)offset_delta, last_delta);
        V32(klen, "key length");
        if (klen < -1 || klen > rec_end - pos)
            FAIL("record %zd: invalid key length %d", i, (int)klen);
        Py_ssize_t kpos = pos;
        if (klen > 0)
            pos += klen;
        V32(vlen, "value length");
        if (vlen < -1 || vlen > rec_end - pos)
            FAIL("record %zd: invalid value length %d", i, (int)vlen);
        PyObject *key;
        if (klen < 0) {
            key = Py_None;
            Py_INCREF(key);
        } else if ((key = PyBytes_FromStringAndSize((const char *)p + kpos, klen)) == NULL) {
            goto error;
        }
        PyObject *t = PyTuple_New(7);
        if (t == NULL) {
            Py_DECREF(key);
            goto error;
        }
        PyTuple_SET_ITEM(t, 0, PyLong_FromSsize_t(rec_start));
        PyTuple_SET_ITEM(t, 1, PyLong_FromSsize_t(rec_end));
        PyTuple_SET_ITEM(t, 2, PyLong_FromLongLong(ts_delta));
        PyTuple_SET_ITEM(t, 3, PyLong_FromSsize_t(after_ts));
        PyTuple_SET_ITEM(t, 4, PyLong_FromLong(offset_delta));
        PyTuple_SET_ITEM(t, 5, key);
        PyObject *hv = vlen >= 0 ? Py_True : Py_False;
        Py_INCREF(hv);
        PyTuple_SET_ITEM(t, 6, hv);
        for (int k = 0; k < 5; k++) {
            if (PyTuple_GET_ITEM(t, k) == NULL) {
                Py_DECREF(t);
                goto error;
            }
        }
        PyList_SET_ITEM(out, i, t);
        pos = rec_end;
    }
    if (pos != end)
        FAIL("incorrect declared batch size: %zd bytes remain after %zd records",
             end - pos, count);
    PyBuffer_Release(&view);
    return out;

error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS,
     "walk_records(buf, start, end, count, base_timestamp, check_timestamps, ts_lo, ts_hi,"
     " require_keys=False) -> (max_timestamp, bad_timestamp_indices or None, keyless_indices"
     " or None); ValueError on a malformed record."},
    {"record_spans", record_spans, METH_VARARGS,
     "record_spans(buf, start, end, count, last_offset_delta) -> [(record_start, record_end,"
     " timestamp_delta, after_timestamp, offset_delta, key, has_value)]; ValueError on a"
     " malformed record (the log cleaner's walk, see spans.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "snakka.records._recordwalk",
    "C record walker for produce-time batch validation (see walk.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__recordwalk(void)
{
    return PyModule_Create(&module);
}
