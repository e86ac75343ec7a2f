/*
 * snakka.spark._fastdecode: Kafka v2 records -> Arrow column buffers, for the Spark source.
 *
 * decode_records(), the C twin of snakka.spark.arrow_decode.decode_records_py
 * (same arguments, same results; the Python version is the specification and the fallback
 * when this module cannot be built). It decodes the (already decompressed) records section
 * of ONE record batch and appends the records whose offsets are in [lo, hi) to fifteen
 * bytearrays laid out as Arrow buffers (see arrow_decode's module docstring).
 *
 * Two passes over the section: the first validates every length against the record and
 * section bounds and sums the output sizes; the second resizes each bytearray once and
 * copies. Malformed input raises ValueError in the first pass, before any buffer changes.
 *
 * record_tuples() decodes the same records section into Python tuples (offset, timestamp,
 * key, value, headers) for snakka's share consumer: the C twin of the per-record part of
 * snakka.records.record.batch_records (one pass; see its comment below).
 *
 * Buffers hold native-endian integers; Arrow's layout is little-endian, so this module
 * refuses to build on a big-endian machine (the pure-Python decoder is used there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snakka.spark._fastdecode assumes a little-endian machine"
#endif

#define N_BUFFERS 15
enum {
    B_OFFS, B_TS, B_TST, B_KVALID, B_KENDS, B_KDATA, B_VVALID, B_VENDS, B_VDATA,
    B_HENDS, B_HKENDS, B_HKDATA, B_HVVALID, B_HVENDS, B_HVDATA
};

static inline int read_varint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    for (;;) {
        if (i >= end)
            return -1;
        uint8_t b = p[i++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
        if (shift > 63)
            return -1;
    }
    *pos = i;
    *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
    return 0;
}

#define FAIL(msg) do { PyErr_SetString(PyExc_ValueError, msg); goto error; } while (0)
#define VARINT(var) do { if (read_varint(p, rec_end, &pos, &(var)) < 0) \
    FAIL("malformed varint in record"); } while (0)

static char *grow(PyObject *ba, Py_ssize_t extra)
{
    Py_ssize_t old = PyByteArray_GET_SIZE(ba);
    if (extra == 0)
        return PyByteArray_AS_STRING(ba) + old;
    if (PyByteArray_Resize(ba, old + extra) < 0)
        return NULL;
    return PyByteArray_AS_STRING(ba) + old;
}

static PyObject *decode_records(PyObject *self, PyObject *args)
{
    PyObject *bufs_obj;
    Py_buffer view;
    long long count, base_offset, base_ts, ts_override, lo, hi;
    int ts_type, with_headers;
    PyObject *b[N_BUFFERS];

    if (!PyArg_ParseTuple(args, "Oy*LLLLiLLp", &bufs_obj, &view, &count, &base_offset,
                          &base_ts, &ts_override, &ts_type, &lo, &hi, &with_headers))
        return NULL;
    if (!PyList_Check(bufs_obj) || PyList_GET_SIZE(bufs_obj) != N_BUFFERS) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "bufs must be a list of 15 bytearrays");
        return NULL;
    }
    for (int i = 0; i < N_BUFFERS; i++) {
        b[i] = PyList_GET_ITEM(bufs_obj, i);
        if (!PyByteArray_Check(b[i])) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "bufs must be a list of 15 bytearrays");
            return NULL;
        }
    }

    const uint8_t *p = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = 0, rec_end = end;
    int64_t n = 0, kbytes = 0, vbytes = 0, nheaders = 0, hkbytes = 0, hvbytes = 0;
    int64_t length, ts_delta, off_delta, klen, vlen, hcount, hklen, hvlen;

    if (count < 0)
        FAIL("negative record count");

    /* Pass 1: validate and size. */
    for (long long r = 0; r < count; r++) {
        rec_end = end;
        VARINT(length);
        if (length < 0 || length > end - pos)
            FAIL("record length overruns the batch");
        rec_end = pos + length;
        if (pos + 1 > rec_end)
            FAIL("record too short");
        pos += 1; /* attributes */
        VARINT(ts_delta);
        VARINT(off_delta);
        int64_t offset = base_offset + off_delta;
        int keep = offset >= lo && offset < hi;
        VARINT(klen);
        if (klen >= 0) {
            if (klen > rec_end - pos)
                FAIL("key overruns the record");
            pos += klen;
        }
        VARINT(vlen);
        if (vlen >= 0) {
            if (vlen > rec_end - pos)
                FAIL("value overruns the record");
            pos += vlen;
        }
        VARINT(hcount);
        if (hcount < 0)
            FAIL("negative header count");
        for (int64_t h = 0; h < hcount; h++) {
            VARINT(hklen);
            if (hklen < 0)
                FAIL("null header key");
            if (hklen > rec_end - pos)
                FAIL("header key overruns the record");
            if (keep && with_headers) {
                /* Header keys become an Arrow string column: they must be UTF-8. */
                PyObject *s = PyUnicode_DecodeUTF8((const char *)p + pos, hklen, "strict");
                if (s == NULL) {
                    PyErr_Clear();
                    FAIL("header key is not valid UTF-8");
                }
                Py_DECREF(s);
            }
            pos += hklen;
            VARINT(hvlen);
            if (hvlen >= 0) {
                if (hvlen > rec_end - pos)
                    FAIL("header value overruns the record");
                pos += hvlen;
            }
            if (keep && with_headers) {
                hkbytes += hklen;
                hvbytes += hvlen > 0 ? hvlen : 0;
            }
        }
        if (pos != rec_end)
            FAIL("record length does not match its fields");
        if (keep) {
            n++;
            kbytes += klen > 0 ? klen : 0;
            vbytes += vlen > 0 ? vlen : 0;
            if (with_headers)
                nheaders += hcount;
        }
    }
    if (pos != end)
        FAIL("bytes left after the batch's records");

    Py_ssize_t k0 = PyByteArray_GET_SIZE(b[B_KDATA]), v0 = PyByteArray_GET_SIZE(b[B_VDATA]);
    Py_ssize_t hk0 = PyByteArray_GET_SIZE(b[B_HKDATA]), hv0 = PyByteArray_GET_SIZE(b[B_HVDATA]);
    Py_ssize_t h0 = PyByteArray_GET_SIZE(b[B_HKENDS]) / 4 - 1;
    if (k0 + kbytes > INT32_MAX || v0 + vbytes > INT32_MAX || hk0 + hkbytes > INT32_MAX
        || hv0 + hvbytes > INT32_MAX || h0 + nheaders > INT32_MAX)
        FAIL("more than 2 GiB in one Arrow column; flush the builder more often");
    if (n == 0) {
        PyBuffer_Release(&view);
        return PyLong_FromLong(0);
    }

    /* Pass 2: resize once, then fill. */
    int64_t *o_offs = (int64_t *)grow(b[B_OFFS], n * 8);
    int64_t *o_ts = (int64_t *)grow(b[B_TS], n * 8);
    int32_t *o_tst = (int32_t *)grow(b[B_TST], n * 4);
    uint8_t *o_kv = (uint8_t *)grow(b[B_KVALID], n);
    int32_t *o_ke = (int32_t *)grow(b[B_KENDS], n * 4);
    char *o_kd = grow(b[B_KDATA], kbytes);
    uint8_t *o_vv = (uint8_t *)grow(b[B_VVALID], n);
    int32_t *o_ve = (int32_t *)grow(b[B_VENDS], n * 4);
    char *o_vd = grow(b[B_VDATA], vbytes);
    int32_t *o_he = NULL, *o_hke = NULL, *o_hve = NULL;
    char *o_hkd = NULL, *o_hvd = NULL;
    uint8_t *o_hvv = NULL;
    if (with_headers) {
        o_he = (int32_t *)grow(b[B_HENDS], n * 4);
        o_hke = (int32_t *)grow(b[B_HKENDS], nheaders * 4);
        o_hkd = grow(b[B_HKDATA], hkbytes);
        o_hvv = (uint8_t *)grow(b[B_HVVALID], nheaders);
        o_hve = (int32_t *)grow(b[B_HVENDS], nheaders * 4);
        o_hvd = grow(b[B_HVDATA], hvbytes);
        if (!o_he || !o_hke || !o_hkd || !o_hvv || !o_hve || !o_hvd)
            goto error;
    }
    if (!o_offs || !o_ts || !o_tst || !o_kv || !o_ke || !o_kd || !o_vv || !o_ve || !o_vd)
        goto error;

    int32_t kpos = (int32_t)k0, vpos = (int32_t)v0, hkpos = (int32_t)hk0, hvpos = (int32_t)hv0;
    int32_t hidx = (int32_t)h0;
    int64_t ts_fixed = ts_override >= 0 ? ts_override * 1000 : 0;
    int64_t out = 0, ho = 0;
    pos = 0;
    for (long long r = 0; r < count; r++) {
        rec_end = end;
        VARINT(length);
        rec_end = pos + length;
        pos += 1;
        VARINT(ts_delta);
        VARINT(off_delta);
        int64_t offset = base_offset + off_delta;
        int keep = offset >= lo && offset < hi;
        VARINT(klen);
        Py_ssize_t kstart = pos;
        if (klen > 0)
            pos += klen;
        VARINT(vlen);
        Py_ssize_t vstart = pos;
        if (vlen > 0)
            pos += vlen;
        if (keep) {
            o_offs[out] = offset;
            o_ts[out] = ts_override >= 0 ? ts_fixed : (base_ts + ts_delta) * 1000;
            o_tst[out] = ts_type;
            o_kv[out] = klen >= 0;
            if (klen > 0) {
                memcpy(o_kd, p + kstart, (size_t)klen);
                o_kd += klen;
                kpos += (int32_t)klen;
            }
            o_ke[out] = kpos;
            o_vv[out] = vlen >= 0;
            if (vlen > 0) {
                memcpy(o_vd, p + vstart, (size_t)vlen);
                o_vd += vlen;
                vpos += (int32_t)vlen;
            }
            o_ve[out] = vpos;
        }
        VARINT(hcount);
        for (int64_t h = 0; h < hcount; h++) {
            VARINT(hklen);
            Py_ssize_t hkstart = pos;
            pos += hklen;
            VARINT(hvlen);
            Py_ssize_t hvstart = pos;
            if (hvlen > 0)
                pos += hvlen;
            if (keep && with_headers) {
                memcpy(o_hkd, p + hkstart, (size_t)hklen);
                o_hkd += hklen;
                hkpos += (int32_t)hklen;
                o_hke[ho] = hkpos;
                o_hvv[ho] = hvlen >= 0;
                if (hvlen > 0) {
                    memcpy(o_hvd, p + hvstart, (size_t)hvlen);
                    o_hvd += hvlen;
                    hvpos += (int32_t)hvlen;
                }
                o_hve[ho] = hvpos;
                ho++;
                hidx++;
            }
        }
        if (keep) {
            if (with_headers)
                o_he[out] = hidx;
            out++;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(out);

error:
    PyBuffer_Release(&view);
    return NULL;
}

/* record_tuples(data, count, base_offset, base_ts, log_append, log_append_ts, lo, hi) -> list
 *
 * The records of ONE batch's (decompressed) records section whose offsets are in [lo, hi),
 * as (offset, timestamp, key, value, headers) tuples: key/value bytes or None, headers a list
 * of (str, bytes | None) with keys decoded as UTF-8 with replacement characters (as Kafka's
 * Java consumer does and as snakka.records.record._decode_records does; that function is the
 * specification). With log_append (LogAppendTime batches) log_append_ts is every timestamp. Used by
 * snakka's share consumer (snakka.client.share_acks) instead of per-record Python varints.
 * Every record is validated, kept or not; malformed input raises ValueError. */
static PyObject *record_tuples(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base_offset, base_ts, log_append_ts, lo, hi;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*LLLpLLL", &view, &count, &base_offset, &base_ts,
                          &log_append, &log_append_ts, &lo, &hi))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = 0, rec_end = end;
    int64_t length, ts_delta, off_delta, klen, vlen, hcount, hklen, hvlen;
    PyObject *out = PyList_New(0);
    PyObject *headers = NULL;
    if (out == NULL)
        goto error;
    if (count < 0)
        FAIL("negative record count");
    for (long long r = 0; r < count; r++) {
        rec_end = end;
        VARINT(length);
        if (length < 0 || length > end - pos)
            FAIL("record length overruns the batch");
        rec_end = pos + length;
        if (pos + 1 > rec_end)
            FAIL("record too short");
        pos += 1; /* attributes: unused in v2 */
        VARINT(ts_delta);
        VARINT(off_delta);
        int64_t offset = base_offset + off_delta;
        int keep = offset >= lo && offset < hi;
        VARINT(klen);
        Py_ssize_t kstart = pos;
        if (klen >= 0) {
            if (klen > rec_end - pos)
                FAIL("key overruns the record");
            pos += klen;
        }
        VARINT(vlen);
        Py_ssize_t vstart = pos;
        if (vlen >= 0) {
            if (vlen > rec_end - pos)
                FAIL("value overruns the record");
            pos += vlen;
        }
        VARINT(hcount);
        if (hcount < 0)
            FAIL("negative header count");
        if (keep) {
            headers = PyList_New(0);
            if (headers == NULL)
                goto error;
        }
        for (int64_t h = 0; h < hcount; h++) {
            VARINT(hklen);
            if (hklen < 0)
                FAIL("null header key");
            if (hklen > rec_end - pos)
                FAIL("header key overruns the record");
            Py_ssize_t hkstart = pos;
            pos += hklen;
            VARINT(hvlen);
            Py_ssize_t hvstart = pos;
            if (hvlen >= 0) {
                if (hvlen > rec_end - pos)
                    FAIL("header value overruns the record");
                pos += hvlen;
            }
            if (keep) {
                PyObject *hv;
                if (hvlen >= 0) {
                    hv = PyBytes_FromStringAndSize((const char *)p + hvstart, hvlen);
                } else {
                    hv = Py_None;
                    Py_INCREF(hv);
                }
                PyObject *hk = PyUnicode_DecodeUTF8((const char *)p + hkstart, hklen,
                                                    "replace");
                PyObject *pair = (hk && hv) ? PyTuple_Pack(2, hk, hv) : NULL;
                Py_XDECREF(hk);
                Py_XDECREF(hv);
                if (pair == NULL)
                    goto error;
                int rc = PyList_Append(headers, pair);
                Py_DECREF(pair);
                if (rc < 0)
                    goto error;
            }
        }
        if (pos != rec_end)
            FAIL("record length does not match its fields");
        if (keep) {
            PyObject *k, *v;
            if (klen >= 0) {
                k = PyBytes_FromStringAndSize((const char *)p + kstart, klen);
            } else {
                k = Py_None;
                Py_INCREF(k);
            }
            if (vlen >= 0) {
                v = PyBytes_FromStringAndSize((const char *)p + vstart, vlen);
            } else {
                v = Py_None;
                Py_INCREF(v);
            }
            PyObject *rec = NULL;
            if (k && v)
                rec = Py_BuildValue("(LLOOO)", (long long)offset,
                                    log_append ? log_append_ts : base_ts + ts_delta,
                                    k, v, headers);
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_CLEAR(headers);
            if (rec == NULL)
                goto error;
            int rc = PyList_Append(out, rec);
            Py_DECREF(rec);
            if (rc < 0)
                goto error;
        }
    }
    if (pos != end)
        FAIL("bytes left after the batch's records");
    PyBuffer_Release(&view);
    return out;

error:
    Py_XDECREF(headers);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(bufs, data, count, base_offset, base_ts, ts_override, ts_type, lo, hi, "
     "with_headers) -> rows appended (see snakka.spark.arrow_decode.decode_records_py)"},
    {"record_tuples", record_tuples, METH_VARARGS,
     "record_tuples(data, count, base_offset, base_ts, log_append, log_append_ts, lo, hi) -> "
     "[(offset, timestamp, key, value, headers)] (see snakka.records.record._decode_records)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastdecode",
    "Kafka v2 records to Arrow buffers (C twin of arrow_decode.decode_records_py).", -1, methods,
};

PyMODINIT_FUNC PyInit__fastdecode(void)
{
    return PyModule_Create(&module);
}
