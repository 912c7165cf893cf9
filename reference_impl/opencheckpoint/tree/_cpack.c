/* pack(root, ExtType): the msgpack bytes of a tree document (opencheckpoint.tree.ctree.compiled_pack), byte for byte
 * what msgpack.packb(root, use_bin_type=True, strict_types=False) gives, for documents made only of the types the
 * tree writer builds, exactly: dict (any key of these types), list, tuple, str, bytes, int from -2**63 to 2**64 - 1,
 * float, bool, None and msgpack.ExtType (code 0..127, bytes data). Anything else, a str that is not valid UTF-8
 * (lone surrogates), a size msgpack refuses, or nesting deeper than msgpack's limit gives None, changing nothing:
 * the caller then runs msgpack.packb, which packs it or raises its own error. The bytes are msgpack's shortest
 * forms: non-negative ints unsigned, negative ints signed, floats as float 64, str 8 for text, bin for bytes.
 */
#include "_ctree.h"

#define MAX_NEST 511 /* msgpack's DEFAULT_RECURSE_LIMIT: a deeper document is msgpack's to refuse */

typedef struct {
    uint8_t *data;
    size_t size, capacity;
    PyObject *ext_type;
} Packer;

/* Room for n more bytes (the buffer doubles): 0, or -1 with MemoryError set. */
static int grow(Packer *pk, size_t n) {
    size_t capacity = pk->capacity ? pk->capacity : 4096;
    while (capacity - pk->size < n) {
        if (capacity > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
        capacity *= 2;
    }
    uint8_t *grown = PyMem_Realloc(pk->data, capacity);
    if (grown == NULL) { PyErr_NoMemory(); return -1; }
    pk->data = grown;
    pk->capacity = capacity;
    return 0;
}

static inline int reserve(Packer *pk, size_t n) {
    return pk->capacity - pk->size >= n ? 0 : grow(pk, n);
}

/* pack() reserves ROOM bytes before each object: a scalar or a header (at most 9 bytes) is then written unchecked. */
#define ROOM 16

/* A type byte and a big-endian value of ``width`` bytes (0: the type byte alone), within the reserved room. */
static inline void put(Packer *pk, uint8_t type, uint64_t value, int width) {
    uint8_t *out = pk->data + pk->size;
    out[0] = type;
    for (int i = 0; i < width; i++) out[1 + i] = (uint8_t)(value >> (8 * (width - 1 - i)));
    pk->size += 1 + (size_t)width;
}

static int put_bytes(Packer *pk, const void *bytes, size_t n) {
    if (reserve(pk, n) < 0) return -1;
    memcpy(pk->data + pk->size, bytes, n);
    pk->size += n;
    return 0;
}

/* A header whose short form carries the length in its low bits (fixstr, fixarray, fixmap: below fix_limit), else
 * a type byte and a length of 1 (t8, when not 0), 2 or 4 bytes; within the reserved room. */
static inline void header(Packer *pk, size_t n, uint8_t fix, size_t fix_limit, uint8_t t8, uint8_t t16, uint8_t t32) {
    if (n < fix_limit) put(pk, (uint8_t)(fix | n), 0, 0);
    else if (t8 && n <= 0xFF) put(pk, t8, n, 1);
    else if (n <= 0xFFFF) put(pk, t16, n, 2);
    else put(pk, t32, n, 4);
}

static int pack_int(Packer *pk, PyObject *obj) {
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (overflow < 0) return 1;
    if (overflow > 0) { /* 2**63 .. 2**64 - 1, or beyond (msgpack's OverflowError) */
        unsigned long long big = PyLong_AsUnsignedLongLong(obj);
        if (big == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 1; }
        put(pk, 0xcf, big, 8);
        return 0;
    }
    if (value >= 0) {
        uint64_t v = (uint64_t)value;
        if (v < 0x80) put(pk, (uint8_t)v, 0, 0);
        else if (v <= 0xFF) put(pk, 0xcc, v, 1);
        else if (v <= 0xFFFF) put(pk, 0xcd, v, 2);
        else if (v <= 0xFFFFFFFFu) put(pk, 0xce, v, 4);
        else put(pk, 0xcf, v, 8);
    } else if (value >= -32) {
        put(pk, (uint8_t)(int8_t)value, 0, 0);
    } else if (value >= -128) {
        put(pk, 0xd0, (uint64_t)value & 0xFF, 1);
    } else if (value >= -32768) {
        put(pk, 0xd1, (uint64_t)value & 0xFFFF, 2);
    } else if (value >= -2147483648LL) {
        put(pk, 0xd2, (uint64_t)value & 0xFFFFFFFFu, 4);
    } else {
        put(pk, 0xd3, (uint64_t)value, 8);
    }
    return 0;
}

static int pack_ext(Packer *pk, PyObject *obj) {
    if (PyTuple_GET_SIZE(obj) != 2) return 1;
    PyObject *code = PyTuple_GET_ITEM(obj, 0), *data = PyTuple_GET_ITEM(obj, 1);
    if (!PyLong_CheckExact(code) || !PyBytes_CheckExact(data)) return 1;
    long value = PyLong_AsLong(code);
    if (value == -1 && PyErr_Occurred()) { PyErr_Clear(); return 1; }
    size_t n = (size_t)PyBytes_GET_SIZE(data);
    if (value < 0 || value > 127 || n > 0xFFFFFFFFu) return 1;
    switch (n) {
    case 1: put(pk, 0xd4, 0, 0); break;
    case 2: put(pk, 0xd5, 0, 0); break;
    case 4: put(pk, 0xd6, 0, 0); break;
    case 8: put(pk, 0xd7, 0, 0); break;
    case 16: put(pk, 0xd8, 0, 0); break;
    default:
        if (n <= 0xFF) put(pk, 0xc7, n, 1);
        else if (n <= 0xFFFF) put(pk, 0xc8, n, 2);
        else put(pk, 0xc9, n, 4);
    }
    put(pk, (uint8_t)value, 0, 0); /* header and type: at most 6 bytes of the room */
    return put_bytes(pk, PyBytes_AS_STRING(data), n);
}

/* 0 packed, 1 not this packer's to pack (nothing more is written: the caller drops the buffer), -1 an error. */
static int pack(Packer *pk, PyObject *obj, int nest) {
    if (nest > MAX_NEST) return 1;
    if (reserve(pk, ROOM) < 0) return -1;
    PyTypeObject *type = Py_TYPE(obj);
    if (type == &PyUnicode_Type) {
        Py_ssize_t n;
        const char *utf8;
        if (PyUnicode_IS_COMPACT_ASCII(obj)) { /* the common key and dtype name: its bytes are its UTF-8 */
            utf8 = (const char *)PyUnicode_DATA(obj);
            n = PyUnicode_GET_LENGTH(obj);
        } else if ((utf8 = PyUnicode_AsUTF8AndSize(obj, &n)) == NULL) {
            PyErr_Clear(); /* lone surrogates: msgpack raises UnicodeEncodeError (R-TREE-9) */
            return 1;
        }
        if ((size_t)n > 0xFFFFFFFFu) return 1;
        header(pk, (size_t)n, 0xa0, 32, 0xd9, 0xda, 0xdb);
        return put_bytes(pk, utf8, (size_t)n);
    }
    if (type == &PyLong_Type) return pack_int(pk, obj);
    if (type == &PyList_Type || type == &PyTuple_Type) {
        Py_ssize_t n = Py_SIZE(obj);
        PyObject **items = type == &PyList_Type ? ((PyListObject *)obj)->ob_item : ((PyTupleObject *)obj)->ob_item;
        if ((size_t)n > 0xFFFFFFFFu) return 1;
        header(pk, (size_t)n, 0x90, 16, 0, 0xdc, 0xdd);
        for (Py_ssize_t i = 0; i < n; i++) {
            int done = pack(pk, items[i], nest + 1);
            if (done) return done;
        }
        return 0;
    }
    if (type == &PyDict_Type) {
        Py_ssize_t n = PyDict_GET_SIZE(obj), pos = 0;
        if ((size_t)n > 0xFFFFFFFFu) return 1;
        header(pk, (size_t)n, 0x80, 16, 0, 0xde, 0xdf);
        PyObject *key, *value;
        while (PyDict_Next(obj, &pos, &key, &value)) {
            int done = pack(pk, key, nest + 1);
            if (!done) done = pack(pk, value, nest + 1);
            if (done) return done;
        }
        return 0;
    }
    if (obj == Py_None) { put(pk, 0xc0, 0, 0); return 0; }
    if (obj == Py_True) { put(pk, 0xc3, 0, 0); return 0; }
    if (obj == Py_False) { put(pk, 0xc2, 0, 0); return 0; }
    if (type == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(obj);
        uint64_t bits;
        memcpy(&bits, &d, 8);
        put(pk, 0xcb, bits, 8);
        return 0;
    }
    if (type == &PyBytes_Type) {
        size_t n = (size_t)PyBytes_GET_SIZE(obj);
        if (n > 0xFFFFFFFFu) return 1;
        header(pk, n, 0xc4, 0, 0xc4, 0xc5, 0xc6);
        return put_bytes(pk, PyBytes_AS_STRING(obj), n);
    }
    if ((PyObject *)type == pk->ext_type) return pack_ext(pk, obj);
    return 1;
}

PyObject *oc_pack(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *root, *ext_type;
    if (!PyArg_ParseTuple(args, "OO!", &root, &PyType_Type, &ext_type)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)ext_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "ExtType must be a tuple class");
        return NULL;
    }
    Packer pk = {NULL, 0, 0, ext_type};
    int done = pack(&pk, root, 0);
    PyObject *result = done < 0 ? NULL
                       : done ? Py_NewRef(Py_None)
                              : PyBytes_FromStringAndSize((const char *)pk.data, (Py_ssize_t)pk.size);
    PyMem_Free(pk.data);
    return result;
}
