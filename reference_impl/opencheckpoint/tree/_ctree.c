/* The compiled fast path of tree decoding (opencheckpoint.tree.ctree): one pass over canonical tree.msgpack bytes
 * (the save side: _csave.c and _cpack.c; what they share: _ctree.h).
 *
 * decode(data) returns (root, arrays, has_placeholders, columns) for a document that the pure-Python fast path
 * (tree/fast.py: msgpack.unpackb, the canonical re-pack check, _FastWalk) would accept, with the same values; on
 * anything else it raises the configured doubt exception and the Python paths decide (the exact parser names
 * every error). It is stricter, never looser: every byte is bounds-checked before it is read, every length is
 * checked against the bytes left before anything is allocated, and nesting stops at TREE_MAX_DEPTH before the
 * recursion goes deeper, so hostile input can only make it doubt.
 *
 * Canonical means exactly the bytes msgpack.packb(value, use_bin_type=True) writes for what msgpack.unpackb
 * reads: the shortest int form (non-negative ints as unsigned, negative as signed), float 64 only, the shortest
 * str/bin/array/map header, tag markers as ext 8 of length 0 (c7 00 T), no duplicate map keys.
 *
 * columns: None, or bytes of (offset, nbytes, crc32c) as native uint64 per array node in document order when
 * every array node is within the limits R-LIM-13..16 and its nbytes equals shape product x itemsize (R-ARR-4):
 * step 15 then checks the rest over NumPy columns (tree/layout.py), with no Python step per array.
 *
 * CPython C API only (no NumPy headers): the build needs a C compiler and Python.h, nothing else.
 */
#include "_ctree.h"

#define MAX_DEPTH 128                    /* TREE_MAX_DEPTH (R-LIM-10) */
#define MAX_STR_BYTES (256u * 1024 * 1024) /* TREE_MAX_STR_BYTES: the limit the C msgpack decoder is given */
#define MAX_NDIM 64                      /* ARRAY_MAX_NDIM (R-LIM-13) */
#define LIMIT ((uint64_t)1 << 63)        /* R-LIM-14..16: dimensions, products and nbytes stay below 2**63 */
#define MAX_DTYPES 64

/* What configure() was given: the classes the tree is built of and the dtype table. */
static PyObject *doubt_type, *array_ref_type, *tree_path_type, *named_tuple_type, *dtype_value_type, *make_scalar;
static PyObject *ref_slots[6]; /* ArrayRef's member descriptors: dtype, shape, offset, nbytes, crc32c, where */
static PyObject *path_slots[3]; /* TreePath's: parent, key, _length */
static PyObject *minus_one;
static struct { PyObject *name; const char *utf8; Py_ssize_t len; uint64_t itemsize; int is_bool; } dtypes[MAX_DTYPES];
static int n_dtypes;

typedef struct {
    const uint8_t *p, *end;
    PyObject *arrays;     /* list of ArrayRef, document order */
    int placeholders;
    int columns_ok;       /* every array node within the limits with nbytes == product x itemsize */
    uint64_t *columns;    /* 3 per array node */
    Py_ssize_t n_columns, cap_columns;
} Parser;

static PyObject *doubt(void) {
    if (!PyErr_Occurred()) PyErr_SetNone(doubt_type);
    return NULL;
}

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* A new instance of a __slots__ class with its slots set through their descriptors, without running __init__.
 * A slot of a __slots__ class is a member descriptor of an object field at a fixed offset: it is written there
 * directly (what the descriptor's setter does after its checks); any other descriptor is called. */
PyObject *oc_new_slotted(PyObject *type, PyObject **slots, PyObject **values, int n) {
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (obj == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        if (Py_IS_TYPE(slots[i], &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)slots[i])->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY)) {
                PyObject **field = (PyObject **)((char *)obj + member->offset);
                Py_XSETREF(*field, Py_NewRef(values[i]));
                continue;
            }
        }
        if (Py_TYPE(slots[i])->tp_descr_set(slots[i], obj, values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyObject *child_path(PyObject *parent, PyObject *key) {
    PyObject *values[3] = {parent, key, minus_one};
    return oc_new_slotted(tree_path_type, path_slots, values, 3);
}

/* Header of a str/bin/array/map/ext at p: kind (one of the letters below) and its length. Returns 0 and sets
 * *kind to 0 for a scalar. Non-canonical (longer than needed) headers are a doubt (-1). */
enum { K_SCALAR = 0, K_STR = 's', K_BIN = 'b', K_ARRAY = 'a', K_MAP = 'm', K_EXT = 'e' };

static int header(Parser *s, int *kind, uint64_t *length) {
    const uint8_t *p = s->p;
    Py_ssize_t left = s->end - p;
    if (left < 1) return -1;
    uint8_t b = p[0];
    int width = 0;
    uint64_t minimum = 0;
    *kind = K_SCALAR;
    if (b >= 0xa0 && b <= 0xbf) { *kind = K_STR; *length = b & 0x1f; s->p += 1; return 0; }
    if (b >= 0x90 && b <= 0x9f) { *kind = K_ARRAY; *length = b & 0x0f; s->p += 1; return 0; }
    if (b >= 0x80 && b <= 0x8f) { *kind = K_MAP; *length = b & 0x0f; s->p += 1; return 0; }
    switch (b) {
    case 0xd9: *kind = K_STR; width = 1; minimum = 32; break;
    case 0xda: *kind = K_STR; width = 2; minimum = 256; break;
    case 0xdb: *kind = K_STR; width = 4; minimum = 65536; break;
    case 0xc4: *kind = K_BIN; width = 1; minimum = 0; break;
    case 0xc5: *kind = K_BIN; width = 2; minimum = 256; break;
    case 0xc6: *kind = K_BIN; width = 4; minimum = 65536; break;
    case 0xdc: *kind = K_ARRAY; width = 2; minimum = 16; break;
    case 0xdd: *kind = K_ARRAY; width = 4; minimum = 65536; break;
    case 0xde: *kind = K_MAP; width = 2; minimum = 16; break;
    case 0xdf: *kind = K_MAP; width = 4; minimum = 65536; break;
    case 0xc7: *kind = K_EXT; width = 1; minimum = 0; break;
    case 0xc8: case 0xc9: case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        return -1; /* an ext object with a payload: never a canonical tag marker */
    default: return 0; /* a scalar (or an unused byte): scalar() decides */
    }
    if (left < 1 + width) return -1;
    *length = be(p + 1, width);
    if (*length < minimum) return -1;
    s->p += 1 + width;
    return 0;
}

/* A scalar at s->p (int, float 64, nil, bool): a new reference, or NULL with the doubt set. *is_uint tells a
 * non-negative int and *uvalue its value (array fields need them without a Python round trip). */
static PyObject *scalar(Parser *s, int *is_uint, uint64_t *uvalue) {
    const uint8_t *p = s->p;
    Py_ssize_t left = s->end - p;
    *is_uint = 0;
    if (left < 1) return doubt();
    uint8_t b = p[0];
    if (b <= 0x7f) { s->p += 1; *is_uint = 1; *uvalue = b; return PyLong_FromLong(b); }
    if (b >= 0xe0) { s->p += 1; return PyLong_FromLong((int8_t)b); }
    switch (b) {
    case 0xc0: s->p += 1; Py_RETURN_NONE;
    case 0xc2: s->p += 1; Py_RETURN_FALSE;
    case 0xc3: s->p += 1; Py_RETURN_TRUE;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        int width = 1 << (b - 0xcc);
        if (left < 1 + width) return doubt();
        uint64_t v = be(p + 1, width);
        static const uint64_t minimum[4] = {0x80, 0x100, 0x10000, 0x100000000ULL};
        if (v < minimum[b - 0xcc]) return doubt();
        s->p += 1 + width;
        *is_uint = 1;
        *uvalue = v;
        return PyLong_FromUnsignedLongLong(v);
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int width = 1 << (b - 0xd0);
        if (left < 1 + width) return doubt();
        uint64_t raw = be(p + 1, width);
        int64_t v;
        switch (width) {
        case 1: v = (int8_t)raw; break;
        case 2: v = (int16_t)raw; break;
        case 4: v = (int32_t)raw; break;
        default: v = (int64_t)raw; break;
        }
        /* Canonical only below the range of the next shorter form (non-negative ints are packed unsigned). */
        static const int64_t below[4] = {-32, -128, -32768, -2147483648LL};
        if (v >= below[b - 0xd0]) return doubt();
        s->p += 1 + width;
        return PyLong_FromLongLong(v);
    }
    case 0xcb: {
        if (left < 9) return doubt();
        uint64_t raw = be(p + 1, 8);
        double d;
        memcpy(&d, &raw, 8);
        s->p += 9;
        return PyFloat_FromDouble(d);
    }
    default: return doubt(); /* float 32 (never canonical), 0xc1, or a header scalar() is not for */
    }
}

static PyObject *bytes_of(Parser *s, int kind, uint64_t length) {
    if (length > MAX_STR_BYTES || (uint64_t)(s->end - s->p) < length) return doubt();
    const char *start = (const char *)s->p;
    s->p += length;
    if (kind == K_BIN) return PyBytes_FromStringAndSize(start, (Py_ssize_t)length);
    PyObject *text = PyUnicode_DecodeUTF8(start, (Py_ssize_t)length, "strict");
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return doubt();
    }
    return text;
}

/* A dtype name of the table at s->p, as the table's own str object (no new string per node), or -1. */
static int dtype_at(Parser *s) {
    int kind;
    uint64_t length;
    if (header(s, &kind, &length) < 0 || kind != K_STR || (uint64_t)(s->end - s->p) < length) return -1;
    for (int i = 0; i < n_dtypes; i++) {
        if ((uint64_t)dtypes[i].len == length && memcmp(dtypes[i].utf8, s->p, length) == 0) {
            s->p += length;
            return i;
        }
    }
    return -1;
}

static PyObject *value(Parser *s, int depth, PyObject *path);

/* A non-negative int field of an array node. */
static int uint_field(Parser *s, uint64_t *out, PyObject **obj) {
    int is_uint;
    *obj = scalar(s, &is_uint, out);
    if (*obj == NULL) return -1;
    if (!is_uint) { Py_CLEAR(*obj); doubt(); return -1; }
    return 0;
}

/* R-LIM-13..16 and R-ARR-4 for one array node, as tree/layout.py's limit_error and layout_errors compute them. */
static int sizes_match(const uint64_t *dims, Py_ssize_t ndim, uint64_t itemsize, uint64_t nbytes) {
    if (ndim > MAX_NDIM || nbytes >= LIMIT) return 0;
    uint64_t product = 1;
    for (Py_ssize_t i = 0; i < ndim; i++) {
        if (dims[i] >= LIMIT) return 0;
        if (product && dims[i] > (LIMIT - 1) / product) return 0;
        product *= dims[i];
    }
    if (product && itemsize > (LIMIT - 1) / product) return 0;
    return product * itemsize == nbytes;
}

static int add_columns(Parser *s, uint64_t offset, uint64_t nbytes, uint64_t crc) {
    if (s->n_columns + 3 > s->cap_columns) {
        Py_ssize_t cap = s->cap_columns ? s->cap_columns * 2 : 3 * 1024;
        uint64_t *grown = PyMem_Realloc(s->columns, (size_t)cap * sizeof(uint64_t));
        if (grown == NULL) { PyErr_NoMemory(); return -1; }
        s->columns = grown;
        s->cap_columns = cap;
    }
    s->columns[s->n_columns++] = offset;
    s->columns[s->n_columns++] = nbytes;
    s->columns[s->n_columns++] = crc;
    return 0;
}

/* The five fields after the marker of an array node (tag 6) whose list is at ``depth``; ``path`` is its path. */
static PyObject *array_node(Parser *s, int depth, PyObject *path) {
    if (depth + 1 > MAX_DEPTH) return doubt();
    int index = dtype_at(s);
    if (index < 0) return doubt();
    int kind;
    uint64_t ndim;
    if (header(s, &kind, &ndim) < 0 || kind != K_ARRAY || ndim > (uint64_t)(s->end - s->p)) return doubt();
    PyObject *shape = PyTuple_New((Py_ssize_t)ndim);
    if (shape == NULL) return NULL;
    uint64_t small[MAX_NDIM];
    PyObject *offset = NULL, *nbytes = NULL, *crc = NULL, *ref = NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)ndim; i++) {
        PyObject *dim;
        uint64_t v;
        if (uint_field(s, &v, &dim) < 0) goto done;
        PyTuple_SET_ITEM(shape, i, dim);
        if (i < MAX_NDIM) small[i] = v;
    }
    uint64_t off, size, sum;
    if (uint_field(s, &off, &offset) < 0 || uint_field(s, &size, &nbytes) < 0 || uint_field(s, &sum, &crc) < 0)
        goto done;
    if (sum > 0xFFFFFFFFu) { doubt(); goto done; }
    if (s->columns_ok && !sizes_match(small, (Py_ssize_t)ndim, dtypes[index].itemsize, size)) s->columns_ok = 0;
    if (s->columns_ok && add_columns(s, off, size, sum) < 0) goto done;
    PyObject *values[6] = {dtypes[index].name, shape, offset, nbytes, crc, path};
    ref = oc_new_slotted(array_ref_type, ref_slots, values, 6);
    if (ref != NULL && PyList_Append(s->arrays, ref) < 0) Py_CLEAR(ref);
    s->placeholders = 1;
done:
    Py_DECREF(shape);
    Py_XDECREF(offset);
    Py_XDECREF(nbytes);
    Py_XDECREF(crc);
    return ref;
}

/* Tag 5: a dtype name of the table and exactly itemsize raw bytes (bool: 00 or 01), through make_scalar. */
static PyObject *scalar_node(Parser *s) {
    int index = dtype_at(s);
    int kind;
    uint64_t length;
    if (index < 0 || header(s, &kind, &length) < 0 || kind != K_BIN || length != dtypes[index].itemsize)
        return doubt();
    PyObject *raw = bytes_of(s, kind, length);
    if (raw == NULL) return NULL;
    if (dtypes[index].is_bool && PyBytes_AS_STRING(raw)[0] != 0 && PyBytes_AS_STRING(raw)[0] != 1) {
        Py_DECREF(raw);
        return doubt();
    }
    PyObject *out = PyObject_CallFunctionObjArgs(make_scalar, dtypes[index].name, raw, NULL);
    Py_DECREF(raw);
    return out;
}

static PyObject *named_tuple(Parser *s, int depth, PyObject *path) {
    int kind;
    uint64_t length;
    if (header(s, &kind, &length) < 0 || kind != K_STR) return doubt();
    PyObject *type_name = bytes_of(s, kind, length);
    if (type_name == NULL) return NULL;
    PyObject *fields = NULL, *body_path = NULL, *out = NULL, *two = NULL;
    uint64_t count;
    if (header(s, &kind, &count) < 0 || kind != K_MAP || count > (uint64_t)(s->end - s->p) / 2
            || depth + 1 > MAX_DEPTH) { doubt(); goto done; }
    fields = PyDict_New();
    two = PyLong_FromLong(2);
    if (fields == NULL || two == NULL || (body_path = child_path(path, two)) == NULL) goto done;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t key_length;
        if (header(s, &kind, &key_length) < 0 || kind != K_STR) { doubt(); goto done; }
        PyObject *key = bytes_of(s, kind, key_length);
        if (key == NULL) goto done;
        PyObject *item_path = child_path(body_path, key);
        PyObject *item = item_path ? value(s, depth + 1, item_path) : NULL;
        Py_XDECREF(item_path);
        Py_ssize_t before = PyDict_GET_SIZE(fields);
        int failed = item == NULL || PyDict_SetItem(fields, key, item) < 0;
        Py_DECREF(key);
        Py_XDECREF(item);
        if (failed) goto done;
        if (PyDict_GET_SIZE(fields) == before) { doubt(); goto done; } /* a duplicate key */
    }
    out = PyObject_CallFunctionObjArgs(named_tuple_type, type_name, fields, NULL);
done:
    Py_DECREF(type_name);
    Py_XDECREF(fields);
    Py_XDECREF(body_path);
    Py_XDECREF(two);
    return out;
}

/* A tagged node: the list at ``depth`` has ``count`` elements and s->p is at its first, an ext object. */
static PyObject *tagged(Parser *s, uint64_t count, int depth, PyObject *path) {
    if (s->end - s->p < 3 || s->p[0] != 0xc7 || s->p[1] != 0) return doubt();
    int tag = s->p[2];
    s->p += 3;
    static const uint64_t fields[9] = {0, 0, 2, 1, 2, 2, 5, 2, 1};
    if (tag < 1 || tag > 8) return doubt();
    if (tag == 1) { /* a tuple: every element after the marker */
        PyObject *out = PyTuple_New((Py_ssize_t)count - 1);
        if (out == NULL) return NULL;
        for (uint64_t i = 1; i < count; i++) {
            PyObject *index = PyLong_FromUnsignedLongLong(i);
            PyObject *item_path = index ? child_path(path, index) : NULL;
            Py_XDECREF(index);
            PyObject *item = item_path ? value(s, depth, item_path) : NULL;
            Py_XDECREF(item_path);
            if (item == NULL) { Py_DECREF(out); return NULL; }
            PyTuple_SET_ITEM(out, (Py_ssize_t)i - 1, item);
        }
        return out;
    }
    if (count - 1 != fields[tag]) return doubt();
    switch (tag) {
    case 6: return array_node(s, depth, path);
    case 2: return named_tuple(s, depth, path);
    case 4: { /* complex: two float 64s */
        if (s->end - s->p < 18 || s->p[0] != 0xcb || s->p[9] != 0xcb) return doubt();
        uint64_t re = be(s->p + 1, 8), im = be(s->p + 10, 8);
        double real, imag;
        memcpy(&real, &re, 8);
        memcpy(&imag, &im, 8);
        s->p += 18;
        return PyComplex_FromDoubles(real, imag);
    }
    case 5: return scalar_node(s);
    case 8: {
        int index = dtype_at(s);
        if (index < 0) return doubt();
        s->placeholders = 1;
        return PyObject_CallOneArg(dtype_value_type, dtypes[index].name);
    }
    default: return doubt(); /* big ints (3) and PRNG keys (7): the Python paths handle them */
    }
}

/* Whether s->p starts an array node: a list of 6 whose first element is the marker of tag 6 (93 ... c7 00 06). */
static int at_array_node(const Parser *s) {
    return s->end - s->p >= 4 && s->p[0] == 0x96 && s->p[1] == 0xc7 && s->p[2] == 0 && s->p[3] == 6;
}

/* A list or map child of a container at ``depth``, under ``key`` of ``parent``. */
static PyObject *child(Parser *s, int depth, PyObject *parent, PyObject *key) {
    PyObject *path = child_path(parent, key);
    if (path == NULL) return NULL;
    PyObject *out;
    if (at_array_node(s)) {
        s->p += 4;
        out = depth + 2 > MAX_DEPTH ? doubt() : array_node(s, depth + 1, path);
    } else {
        out = value(s, depth, path);
    }
    Py_DECREF(path);
    return out;
}

static PyObject *map_node(Parser *s, uint64_t count, int depth, PyObject *path) {
    if (count > (uint64_t)(s->end - s->p) / 2) return doubt();
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        int kind;
        uint64_t length;
        if (header(s, &kind, &length) < 0) { doubt(); goto fail; }
        PyObject *key;
        if (kind == K_STR) {
            key = bytes_of(s, kind, length);
        } else if (kind == K_SCALAR) {
            int is_uint;
            uint64_t v;
            key = scalar(s, &is_uint, &v);
            if (key != NULL && !PyLong_CheckExact(key)) { Py_DECREF(key); key = doubt(); } /* str or int keys */
        } else {
            key = doubt();
        }
        if (key == NULL) goto fail;
        PyObject *item;
        if (s->p < s->end && ((s->p[0] & 0xf0) == 0x90 || (s->p[0] & 0xf0) == 0x80 || s->p[0] == 0xdc
                              || s->p[0] == 0xdd || s->p[0] == 0xde || s->p[0] == 0xdf))
            item = child(s, depth, path, key);
        else
            item = value(s, depth, path); /* a plain leaf: its path is never used */
        Py_ssize_t before = PyDict_GET_SIZE(out);
        int failed = item == NULL || PyDict_SetItem(out, key, item) < 0;
        Py_DECREF(key);
        Py_XDECREF(item);
        if (failed) goto fail;
        if (PyDict_GET_SIZE(out) == before) { doubt(); goto fail; } /* a duplicate key */
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *list_node(Parser *s, uint64_t count, int depth, PyObject *path) {
    if (count > (uint64_t)(s->end - s->p)) return doubt();
    if (count && s->p[0] >= 0xc7 && s->p[0] <= 0xc9) return tagged(s, count, depth, path);
    if (count && s->p[0] >= 0xd4 && s->p[0] <= 0xd8) return doubt();
    PyObject *out = PyList_New((Py_ssize_t)count);
    if (out == NULL) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        PyObject *item;
        if (s->p < s->end && ((s->p[0] & 0xe0) == 0x80 || (s->p[0] >= 0xdc && s->p[0] <= 0xdf))) {
            PyObject *index = PyLong_FromUnsignedLongLong(i);
            item = index ? child(s, depth, path, index) : NULL;
            Py_XDECREF(index);
        } else {
            item = value(s, depth, path);
        }
        if (item == NULL) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    return out;
}

/* Any node whose parent container is at ``depth`` (the root: 0). */
static PyObject *value(Parser *s, int depth, PyObject *path) {
    int kind;
    uint64_t length;
    if (header(s, &kind, &length) < 0) return doubt();
    switch (kind) {
    case K_STR: case K_BIN: return bytes_of(s, kind, length);
    case K_ARRAY: return depth + 1 > MAX_DEPTH ? doubt() : list_node(s, length, depth + 1, path);
    case K_MAP: return depth + 1 > MAX_DEPTH ? doubt() : map_node(s, length, depth + 1, path);
    case K_EXT: return doubt(); /* a marker anywhere but first in a list */
    default: {
        int is_uint;
        uint64_t v;
        return scalar(s, &is_uint, &v);
    }
    }
}

static PyObject *decode(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer data;
    PyObject *root_path;
    if (doubt_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "opencheckpoint.tree._ctree: configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*O", &data, &root_path)) return NULL;
    Parser s = {.p = data.buf, .end = (const uint8_t *)data.buf + data.len, .columns_ok = 1};
    PyObject *result = NULL, *root = NULL, *columns = NULL;
    s.arrays = PyList_New(0);
    if (s.arrays == NULL) goto done;
    root = value(&s, 0, root_path);
    if (root == NULL) { doubt(); goto done; } /* doubt() keeps an error already set (MemoryError) */
    if (s.p != s.end) { doubt(); goto done; } /* bytes after the root object */
    if (s.columns_ok) {
        columns = PyBytes_FromStringAndSize((const char *)s.columns, s.n_columns * (Py_ssize_t)sizeof(uint64_t));
        if (columns == NULL) goto done;
    } else {
        columns = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(OOOO)", root, s.arrays, s.placeholders ? Py_True : Py_False, columns);
done:
    PyBuffer_Release(&data);
    PyMem_Free(s.columns);
    Py_XDECREF(s.arrays);
    Py_XDECREF(root);
    Py_XDECREF(columns);
    return result;
}


/* crc_mismatch(buffer, columns, first, count, base): the index (from first) of the first of ``count`` array nodes
 * whose CRC-32C over buffer[offset - base : offset - base + nbytes] differs from its column's; -1 when none does,
 * -2 when this CPU has no CRC-32C instruction. Rows whose bytes lie outside the buffer are a ValueError. */
static PyObject *crc_mismatch(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer buffer, columns;
    Py_ssize_t first, count;
    unsigned long long base;
    if (!PyArg_ParseTuple(args, "y*y*nnK", &buffer, &columns, &first, &count, &base)) return NULL;
    PyObject *result = NULL;
    const uint64_t *rows = columns.buf;
    Py_ssize_t n_rows = columns.len / (Py_ssize_t)(3 * sizeof(uint64_t));
    if (first < 0 || count < 0 || first > n_rows || count > n_rows - first) {
        PyErr_SetString(PyExc_ValueError, "rows outside the columns");
        goto done;
    }
    if (!oc_have_crc32c()) { result = PyLong_FromLong(-2); goto done; }
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < count && bad < 0; i++) {
        uint64_t offset, nbytes, expected;
        memcpy(&offset, (const char *)rows + (size_t)(first + i) * 24, 8);
        memcpy(&nbytes, (const char *)rows + (size_t)(first + i) * 24 + 8, 8);
        memcpy(&expected, (const char *)rows + (size_t)(first + i) * 24 + 16, 8);
        if (offset < base || offset - base > (uint64_t)buffer.len || nbytes > (uint64_t)buffer.len - (offset - base)) {
            PyErr_SetString(PyExc_ValueError, "an extent outside the buffer");
            goto done;
        }
        if (oc_crc32c(0, (const uint8_t *)buffer.buf + (offset - base), (size_t)nbytes) != expected) bad = i;
    }
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&columns);
    return result;
}

int oc_slot_descriptors(PyObject *type, const char *const *names, PyObject **out, int n) {
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString(type, names[i]);
        if (descr == NULL) return -1;
        if (Py_TYPE(descr)->tp_descr_set == NULL) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "%s is not a slot", names[i]);
            return -1;
        }
        Py_XSETREF(out[i], descr);
    }
    return 0;
}
static PyObject *configure(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *doubt_, *ref_type, *path_type, *nt_type, *dv_type, *scalar_, *table;
    if (!PyArg_ParseTuple(args, "OOOOOOO!", &doubt_, &ref_type, &path_type, &nt_type, &dv_type, &scalar_,
                          &PyDict_Type, &table))
        return NULL;
    if (!PyType_Check(ref_type) || !PyType_Check(path_type)) {
        PyErr_SetString(PyExc_TypeError, "ArrayRef and TreePath must be classes");
        return NULL;
    }
    static const char *const ref_names[6] = {"dtype", "shape", "offset", "nbytes", "crc32c", "where"};
    static const char *const path_names[3] = {"parent", "key", "_length"};
    if (oc_slot_descriptors(ref_type, ref_names, ref_slots, 6) < 0
            || oc_slot_descriptors(path_type, path_names, path_slots, 3) < 0)
        return NULL;
    if (PyDict_GET_SIZE(table) > MAX_DTYPES) {
        PyErr_SetString(PyExc_ValueError, "too many dtypes");
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *size;
    int n = 0;
    while (PyDict_Next(table, &pos, &name, &size)) {
        if (!PyUnicode_CheckExact(name)) {
            PyErr_SetString(PyExc_TypeError, "dtype names must be str");
            return NULL;
        }
        unsigned long long itemsize = PyLong_AsUnsignedLongLong(size);
        if (PyErr_Occurred()) return NULL;
        Py_XSETREF(dtypes[n].name, Py_NewRef(name));
        dtypes[n].utf8 = PyUnicode_AsUTF8AndSize(name, &dtypes[n].len);
        if (dtypes[n].utf8 == NULL) return NULL;
        dtypes[n].itemsize = itemsize;
        dtypes[n].is_bool = strcmp(dtypes[n].utf8, "bool") == 0;
        n++;
    }
    n_dtypes = n;
    Py_XSETREF(doubt_type, Py_NewRef(doubt_));
    Py_XSETREF(array_ref_type, Py_NewRef(ref_type));
    Py_XSETREF(tree_path_type, Py_NewRef(path_type));
    Py_XSETREF(named_tuple_type, Py_NewRef(nt_type));
    Py_XSETREF(dtype_value_type, Py_NewRef(dv_type));
    Py_XSETREF(make_scalar, Py_NewRef(scalar_));
    if (minus_one == NULL && (minus_one = PyLong_FromLong(-1)) == NULL) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(doubt, ArrayRef, TreePath, NamedTupleValue, DtypeValue, make_scalar, {dtype name: itemsize})"},
    {"decode", decode, METH_VARARGS,
     "decode(data, root_path) -> (root, arrays, has_placeholders, columns or None); raises doubt otherwise"},
    {"crc_mismatch", crc_mismatch, METH_VARARGS,
     "crc_mismatch(buffer, columns, first, count, base) -> first mismatching row from first, -1 none, -2 no CPU support"},
    {"plan_run", oc_plan_run, METH_VARARGS,
     "plan_run(keys, arrays, start, marker, Planned, name_of, out) -> (extents, end), or None (the per-array path)"},
    {"plan_dict", oc_plan_dict, METH_VARARGS,
     "plan_dict(mapping, ndarray, start, marker, Planned, name_of, out) -> (extents, end), or None"},
    {"gather_run", oc_gather_run, METH_VARARGS,
     "gather_run(extents, index, position, Planned, buffer, fill, file_crc) -> (index, position, fill, file_crc)"
     " or None"},
    {"pack", oc_pack, METH_VARARGS, "pack(root, ExtType) -> msgpack.packb(root, use_bin_type=True) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "opencheckpoint.tree._ctree",
    "The compiled fast paths of the tree codec (see opencheckpoint.tree.ctree).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ctree(void) { return PyModule_Create(&module_def); }
