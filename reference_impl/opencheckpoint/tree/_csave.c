/* The write side of a run of small arrays (opencheckpoint.tree.ctree, decision 0025): plan_run plans a dict's run
 * of plain NumPy arrays in one call, gather_run copies a run of small extents into the data file's pending buffer
 * with their CRC-32Cs and the file's. Each either does exactly what the Python code does or says it cannot (None, or
 * nothing gathered), the Python code then running; nothing is changed before it knows it can finish.
 */
#include "_ctree.h"

#define MAX_NDIM 64                      /* ARRAY_MAX_NDIM (R-LIM-13) */
#define ALIGN 64                         /* ALIGNMENT (R-ARR-9) */
#define COALESCE_BYTES (64 << 10)        /* datafile._COALESCE_BYTES: smaller extents are gathered */
#define PENDING_BYTES (1 << 20)          /* datafile._PENDING_BYTES: the pending buffer is written from this size */


/* An attribute read many times in one call, on objects of one type: where that type gets it with the generic
 * lookup from a getset descriptor (ndarray's dtype, flags, nbytes, shape; the flags object's c_contiguous, owndata),
 * its getter is called directly: what PyObject_GetAttr ends in, without the lookup through the type's dicts per
 * array. Resolved for the first type met and kept for one call only (the arrays keep their types alive). */
typedef struct {
    PyObject *name;
    PyTypeObject *type;
    getter get;
    void *closure;
} Attr;

static PyObject *attr(PyObject *obj, Attr *a) {
    PyTypeObject *type = Py_TYPE(obj);
    if (type != a->type) {
        a->type = type;
        a->get = NULL;
        PyObject *mro = type->tp_mro, *descr = NULL;
        if (type->tp_getattro == PyObject_GenericGetAttr && mro != NULL && PyTuple_Check(mro)) {
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro) && descr == NULL; i++) {
                PyObject *dict = ((PyTypeObject *)PyTuple_GET_ITEM(mro, i))->tp_dict;
                descr = dict ? PyDict_GetItemWithError(dict, a->name) : NULL;
                if (descr == NULL && PyErr_Occurred()) return NULL;
            }
        }
        if (descr != NULL && Py_IS_TYPE(descr, &PyGetSetDescr_Type)
                && PyType_IsSubtype(type, PyDescr_TYPE(descr)) && ((PyGetSetDescrObject *)descr)->d_getset->get) {
            a->get = ((PyGetSetDescrObject *)descr)->d_getset->get;
            a->closure = ((PyGetSetDescrObject *)descr)->d_getset->closure;
        }
    }
    return a->get ? a->get(obj, a->closure) : PyObject_GetAttr(obj, a->name);
}

/* The attributes plain_array reads, and the dtypes met in one call with their spec names. */
typedef struct { PyObject *dtype, *name; } DtypeName;
typedef struct {
    Attr dtype, flags, c_contiguous, owndata, nbytes, shape;
    DtypeName names[16];
    int n_names;
} Run;

/* Attribute names, interned once (a lookup by a C string builds a str each time). */
static PyObject *s_dtype, *s_flags, *s_c_contiguous, *s_owndata, *s_nbytes, *s_shape;

static int intern_names(void) {
    if (s_shape != NULL) return 0;
    s_dtype = PyUnicode_InternFromString("dtype");
    s_flags = PyUnicode_InternFromString("flags");
    s_c_contiguous = PyUnicode_InternFromString("c_contiguous");
    s_owndata = PyUnicode_InternFromString("owndata");
    s_nbytes = PyUnicode_InternFromString("nbytes");
    s_shape = PyUnicode_InternFromString("shape");
    return s_dtype && s_flags && s_c_contiguous && s_owndata && s_nbytes && s_shape ? 0 : -1;
}

static void run_init(Run *run) {
    memset(run, 0, sizeof *run);
    run->dtype.name = s_dtype;
    run->flags.name = s_flags;
    run->c_contiguous.name = s_c_contiguous;
    run->owndata.name = s_owndata;
    run->nbytes.name = s_nbytes;
    run->shape.name = s_shape;
}

static void run_clear(Run *run) {
    for (int i = 0; i < run->n_names; i++) { Py_DECREF(run->names[i].dtype); Py_DECREF(run->names[i].name); }
    run->n_names = 0;
}

/* One array of a run for plan_run: whether it is stored as it is (C-contiguous, owning its memory, not empty,
 * within ARRAY_MAX_NDIM, a known little-endian dtype other than bool), its dtype name, shape and nbytes.
 * 1 yes, 0 no (the Python path), -1 an error. */
static int plain_array(PyObject *array, PyObject *name_of, Run *run, PyObject **name, PyObject **shape,
                       unsigned long long *nbytes) {
    PyObject *dtype = attr(array, &run->dtype);
    if (dtype == NULL) return -1;
    *name = NULL;
    for (int i = 0; i < run->n_names; i++)
        if (run->names[i].dtype == dtype) { *name = run->names[i].name; break; }
    if (*name == NULL) {
        if (run->n_names == 16) { Py_DECREF(dtype); return 0; } /* a run of many dtypes: the Python path */
        PyObject *pair = PyObject_CallOneArg(name_of, dtype);
        if (pair == NULL) { Py_DECREF(dtype); PyErr_Clear(); return 0; } /* not a spec dtype: the Python path */
        int plain = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))
                    && PyTuple_GET_ITEM(pair, 1) == Py_False
                    && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(pair, 0), "bool") != 0;
        if (plain) {
            run->names[run->n_names].dtype = Py_NewRef(dtype);
            run->names[run->n_names].name = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
            *name = run->names[run->n_names++].name;
        }
        Py_DECREF(pair);
    }
    Py_DECREF(dtype);
    if (*name == NULL) return 0;
    PyObject *flags = attr(array, &run->flags);
    if (flags == NULL) return -1;
    PyObject *contiguous = attr(flags, &run->c_contiguous);
    PyObject *owndata = contiguous ? attr(flags, &run->owndata) : NULL;
    Py_DECREF(flags);
    int ok = owndata != NULL && contiguous == Py_True && owndata == Py_True;
    Py_XDECREF(contiguous);
    Py_XDECREF(owndata);
    if (!ok) return PyErr_Occurred() ? -1 : 0;
    PyObject *size = attr(array, &run->nbytes);
    if (size == NULL) return -1;
    *nbytes = PyLong_AsUnsignedLongLong(size);
    Py_DECREF(size);
    if (PyErr_Occurred()) return -1;
    if (*nbytes == 0) return 0;
    *shape = attr(array, &run->shape);
    if (*shape == NULL) return -1;
    if (!PyTuple_CheckExact(*shape) || PyTuple_GET_SIZE(*shape) > MAX_NDIM) { Py_CLEAR(*shape); return 0; }
    return 1;
}

/* Whether the n objects of ``items`` are distinct (by address): an open-addressing set of pointers, instead of
 * a Python set of 20,000 ids. 1 distinct, 0 not, -1 out of memory. */
static int distinct(PyObject *const *items, Py_ssize_t n) {
    size_t size = 16;
    while (size < (size_t)n * 2) size <<= 1;
    void **table = PyMem_Calloc(size, sizeof(void *));
    if (table == NULL) { PyErr_NoMemory(); return -1; }
    int result = 1;
    for (Py_ssize_t i = 0; i < n && result; i++) {
        uintptr_t key = (uintptr_t)items[i];
        size_t slot = (size_t)((key >> 4) * 0x9E3779B97F4A7C15ULL) & (size - 1);
        while (table[slot] != NULL && table[slot] != items[i]) slot = (slot + 1) & (size - 1);
        if (table[slot] == items[i]) result = 0;
        table[slot] = items[i];
    }
    PyMem_Free(table);
    return result;
}

/* The plan of n (key, array) pairs (new references in ``items``: key i at 2i, array i at 2i + 1) for plan_run and
 * plan_dict: (extents, end), or None with ``out`` unchanged. */
static PyObject *plan_items(PyObject *const *items, Py_ssize_t n, uint64_t start, PyObject *marker,
                            PyObject *planned_type, PyObject *name_of, PyObject *out) {
    static const char *const slot_names[4] = {"array", "nodes", "offset", "nbytes"};
    PyObject *slots[4] = {NULL, NULL, NULL, NULL};
    Run run;
    PyObject *planned = PyList_New(n), *nodes = PyList_New(n), *result = NULL, *size = NULL;
    PyObject **arrays = PyMem_Malloc(((size_t)n + 1) * sizeof(PyObject *));
    unsigned long long last_size = 0;
    run_init(&run); /* the names were interned by the entry point */
    if (planned == NULL || nodes == NULL || arrays == NULL || !PyType_Check(planned_type)
            || oc_slot_descriptors(planned_type, slot_names, slots, 4) < 0) {
        if (arrays == NULL) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) arrays[i] = items[2 * i + 1];
    int unique = distinct(arrays, n);
    if (unique <= 0) {
        if (unique == 0) result = Py_NewRef(Py_None); /* an array twice: its second node aliases the first */
        goto done;
    }
    uint64_t offset = start, end = start;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *array = arrays[i], *name, *shape = NULL;
        unsigned long long nbytes;
        int plain = plain_array(array, name_of, &run, &name, &shape, &nbytes);
        if (plain <= 0) {
            if (plain == 0) result = Py_NewRef(Py_None);
            goto done;
        }
        if (i) offset = (end + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
        end = offset + nbytes;
        if (size == NULL || nbytes != last_size) {
            Py_XSETREF(size, PyLong_FromUnsignedLongLong(nbytes));
            last_size = nbytes;
        }
        PyObject *at = PyLong_FromUnsignedLongLong(offset);
        PyObject *node = at && size ? PyList_New(6) : NULL;
        PyObject *refs = node ? PyList_New(1) : NULL;
        PyObject *extent = NULL;
        if (refs != NULL) {
            PyList_SET_ITEM(node, 0, Py_NewRef(marker));
            PyList_SET_ITEM(node, 1, Py_NewRef(name));
            PyList_SET_ITEM(node, 2, Py_NewRef(shape));
            PyList_SET_ITEM(node, 3, Py_NewRef(at));
            PyList_SET_ITEM(node, 4, Py_NewRef(size));
            PyList_SET_ITEM(node, 5, PyLong_FromLong(0));
            PyList_SET_ITEM(refs, 0, Py_NewRef(node));
            PyObject *values[4] = {array, refs, at, size};
            extent = oc_new_slotted(planned_type, slots, values, 4);
        }
        Py_XDECREF(shape);
        Py_XDECREF(at);
        Py_XDECREF(refs);
        if (extent == NULL) { Py_XDECREF(node); goto done; }
        PyList_SET_ITEM(planned, i, extent);
        PyList_SET_ITEM(nodes, i, node);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyDict_SetItem(out, items[2 * i], PyList_GET_ITEM(nodes, i)) < 0) goto done;
    result = Py_BuildValue("(OK)", planned, (unsigned long long)end);
done:
    run_clear(&run);
    for (int i = 0; i < 4; i++) Py_XDECREF(slots[i]);
    Py_XDECREF(planned);
    Py_XDECREF(nodes);
    Py_XDECREF(size);
    PyMem_Free(arrays);
    return result;
}

static void release_items(PyObject **items, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) Py_DECREF(items[i]);
    PyMem_Free(items);
}

/* plan_run(keys, arrays, start, marker, Planned, name_of, out): the plan of a dict's run of NumPy arrays
 * (tree/datafile.py DataFilePlan.compiled_run) when they are distinct objects and every one is stored as it is:
 * extent i a new Planned at the 64-byte aligned end of extent i - 1 (the first at ``start``) holding its node
 * [marker, name, shape, offset, nbytes, 0], and out[keys[i]] = that node, in order. Returns (extents, end); None,
 * with ``out`` unchanged, when any array needs the per-array path. ``name_of(dtype)`` gives (name, swapped).
 * Consecutive extents of one size share their nbytes int (20,000 tiny arrays: 20,000 ints fewer to make and free). */
PyObject *oc_plan_run(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *keys, *arrays, *marker, *planned_type, *name_of, *out;
    unsigned long long start;
    if (!PyArg_ParseTuple(args, "O!O!KOOOO!", &PyList_Type, &keys, &PyList_Type, &arrays, &start, &marker,
                          &planned_type, &name_of, &PyDict_Type, &out))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(arrays);
    if (intern_names() < 0) return NULL;
    if (PyList_GET_SIZE(keys) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and arrays differ in length");
        return NULL;
    }
    PyObject **items = PyMem_Malloc(((size_t)n + 1) * 2 * sizeof(PyObject *));
    if (items == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) { /* held: name_of is Python code */
        items[2 * i] = Py_NewRef(PyList_GET_ITEM(keys, i));
        items[2 * i + 1] = Py_NewRef(PyList_GET_ITEM(arrays, i));
    }
    PyObject *result = plan_items(items, n, start, marker, planned_type, name_of, out);
    release_items(items, 2 * n);
    return result;
}

/* plan_dict(mapping, ndarray, start, marker, Planned, name_of, out): plan_run over the items of the dict
 * ``mapping`` when it is not empty, every key is a str and every value an ndarray (exact types); else None. The
 * common state dict of arrays, without a Python pass over its types. */
PyObject *oc_plan_dict(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *mapping, *ndarray, *marker, *planned_type, *name_of, *out;
    unsigned long long start;
    if (!PyArg_ParseTuple(args, "O!OKOOOO!", &PyDict_Type, &mapping, &ndarray, &start, &marker, &planned_type,
                          &name_of, &PyDict_Type, &out))
        return NULL;
    Py_ssize_t n = PyDict_GET_SIZE(mapping), pos = 0, count = 0;
    if (intern_names() < 0) return NULL;
    if (n == 0) Py_RETURN_NONE;
    PyObject **items = PyMem_Malloc(((size_t)n + 1) * 2 * sizeof(PyObject *));
    if (items == NULL) return PyErr_NoMemory();
    PyObject *key, *value;
    while (count < 2 * n && PyDict_Next(mapping, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || (PyObject *)Py_TYPE(value) != ndarray) break;
        items[count++] = Py_NewRef(key);
        items[count++] = Py_NewRef(value);
    }
    PyObject *result = count == 2 * n ? plan_items(items, n, start, marker, planned_type, name_of, out)
                                      : Py_NewRef(Py_None);
    release_items(items, count);
    return result;
}

/* A slot of an instance of exactly the class whose descriptor it is (a borrowed reference, NULL when unset), read
 * at the member's offset; the caller checked that ``descr`` is a T_OBJECT_EX member descriptor. */
static PyObject *slot(PyObject *obj, PyObject *descr) {
    return *(PyObject **)((char *)obj + ((PyMemberDescrObject *)descr)->d_member->offset);
}

static int object_member(PyObject *descr) {
    return Py_IS_TYPE(descr, &PyMemberDescr_Type) && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
}

/* Whether every node of ``refs`` is a list of at least 6 (index 5 receives the CRC-32C). */
static int nodes_ok(PyObject *refs) {
    if (!PyList_Check(refs)) return 0;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(refs); j++) {
        PyObject *node = PyList_GET_ITEM(refs, j);
        if (!PyList_Check(node) || PyList_GET_SIZE(node) < 6) return 0;
    }
    return 1;
}

/* gather_run(extents, index, position, Planned, buffer, fill, file_crc): the write side of a run of small extents
 * (tree/datafile.py _Pending.gather). From extents[index] on, while each is a Planned of fewer than COALESCE_BYTES
 * whose array gives a plain C-contiguous buffer of exactly its nbytes and fits: its zero padding (from the file
 * position ``position`` up to its offset) and its bytes are copied into the bytearray ``buffer`` at ``fill``, index
 * 5 of each of its nodes set to its CRC-32C, and ``file_crc`` continued over both; it stops after the extent that
 * brings ``fill`` to PENDING_BYTES. Returns (next index, position, fill, file_crc): next index == index when it
 * gathered nothing (the Python code then takes that extent). None when this CPU has no CRC-32C instruction or
 * Planned's fields are not plain slots. The buffer is never resized: the caller keeps room for a run. */
PyObject *oc_gather_run(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *extents, *planned_type, *buffer;
    Py_ssize_t index, fill;
    unsigned long long position;
    unsigned int file_crc;
    if (!PyArg_ParseTuple(args, "O!nKOO!nI", &PyList_Type, &extents, &index, &position, &planned_type,
                          &PyByteArray_Type, &buffer, &fill, &file_crc))
        return NULL;
    static const char *const slot_names[4] = {"array", "nodes", "offset", "nbytes"};
    PyObject *slots[4] = {NULL, NULL, NULL, NULL};
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(extents), capacity = PyByteArray_GET_SIZE(buffer);
    if (index < 0 || index > n || fill < 0 || fill > capacity) {
        PyErr_SetString(PyExc_ValueError, "index or fill outside the extents or the buffer");
        return NULL;
    }
    if (!PyType_Check(planned_type) || oc_slot_descriptors(planned_type, slot_names, slots, 4) < 0) goto done;
    if (!oc_have_crc32c() || !object_member(slots[0]) || !object_member(slots[1]) || !object_member(slots[2])
            || !object_member(slots[3])) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    uint8_t *base = (uint8_t *)PyByteArray_AS_STRING(buffer);
    uint32_t crc_of_file = file_crc;
    Py_ssize_t i = index;
    for (; i < n && fill < PENDING_BYTES; i++) {
        PyObject *extent = PyList_GET_ITEM(extents, i);
        if (!Py_IS_TYPE(extent, (PyTypeObject *)planned_type)) break;
        PyObject *array = slot(extent, slots[0]), *refs = slot(extent, slots[1]);
        PyObject *offset = slot(extent, slots[2]), *nbytes = slot(extent, slots[3]);
        if (array == NULL || refs == NULL || offset == NULL || nbytes == NULL || !PyLong_Check(offset)
                || !PyLong_Check(nbytes) || !nodes_ok(refs))
            break;
        unsigned long long at = PyLong_AsUnsignedLongLong(offset), size = PyLong_AsUnsignedLongLong(nbytes);
        if (PyErr_Occurred()) { PyErr_Clear(); break; }
        if (size >= COALESCE_BYTES || at < position || at - position > (unsigned long long)(capacity - fill)
                || size > (unsigned long long)(capacity - fill) - (at - position))
            break;
        Py_buffer view;
        if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS) < 0) { PyErr_Clear(); break; }
        if ((unsigned long long)view.len != size) { PyBuffer_Release(&view); break; }
        size_t padding = (size_t)(at - position);
        memset(base + fill, 0, padding);
        crc_of_file = oc_crc32c(crc_of_file, base + fill, padding);
        uint32_t own = 0;
        oc_copy_crc2(base + fill + padding, view.buf, (size_t)size, &own, &crc_of_file);
        PyBuffer_Release(&view);
        fill += (Py_ssize_t)(padding + size);
        position = at + size;
        PyObject *crc = PyLong_FromUnsignedLong(own);
        if (crc == NULL) goto done;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(refs); j++)
            PyList_SetItem(PyList_GET_ITEM(refs, j), 5, Py_NewRef(crc));
        Py_DECREF(crc);
    }
    result = Py_BuildValue("(nKnI)", i, position, fill, crc_of_file);
done:
    for (int k = 0; k < 4; k++) Py_XDECREF(slots[k]);
    return result;
}
