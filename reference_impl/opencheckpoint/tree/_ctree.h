/* What the C files of opencheckpoint.tree._ctree share (decision 0025): the CRC-32C instruction, making instances
 * of __slots__ classes, and the functions each file gives the module's method table.
 *
 * _ctree.c: the module, decode (the read side) and crc_mismatch. _csave.c: plan_run and gather_run (the write side
 * of a run of small arrays). _cpack.c: pack (the document's msgpack bytes).
 */
#ifndef OPENCHECKPOINT_CTREE_H
#define OPENCHECKPOINT_CTREE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define OC_HIDDEN __attribute__((visibility("hidden")))
#else
#define OC_HIDDEN
#endif

/* A new instance of a __slots__ class with its slots set, without running __init__ (_ctree.c). */
OC_HIDDEN PyObject *oc_new_slotted(PyObject *type, PyObject **slots, PyObject **values, int n);
/* The descriptors of the named slots of a class (new references in out[0..n-1]); -1 with an error set. */
OC_HIDDEN int oc_slot_descriptors(PyObject *type, const char *const *names, PyObject **out, int n);

OC_HIDDEN PyObject *oc_plan_run(PyObject *module, PyObject *args);
OC_HIDDEN PyObject *oc_plan_dict(PyObject *module, PyObject *args);
OC_HIDDEN PyObject *oc_gather_run(PyObject *module, PyObject *args);
OC_HIDDEN PyObject *oc_pack(PyObject *module, PyObject *args);

/* CRC-32C (Castagnoli) with the SSE 4.2 instruction: the crc32c package has no C interface, and a Python call per
 * 1 KiB array costs more than its checksum. oc_have_crc32c() says whether this CPU has it; without it the callers
 * say so and the Python code computes the checksums with the crc32c package. oc_crc32c(crc, p, n) continues a
 * checksum as crc32c.crc32c(data, crc) does (0 to start). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static inline uint32_t oc_crc32c(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t state = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        state = _mm_crc32_u64(state, word);
    }
    uint32_t tail = (uint32_t)state;
    for (; n; p++, n--) tail = _mm_crc32_u8(tail, *p);
    return ~tail;
}
/* Copy n bytes from src to dst and continue two checksums over them in the same pass: *own (of this piece) and
 * *file (of everything before it too). Two independent chains of the instruction cost about what one costs. */
__attribute__((target("sse4.2"))) static inline void oc_copy_crc2(uint8_t *dst, const uint8_t *src, size_t n,
                                                                  uint32_t *own, uint32_t *file) {
    uint64_t a = ~*own, b = ~*file;
    for (; n >= 8; src += 8, dst += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, src, 8);
        memcpy(dst, &word, 8);
        a = _mm_crc32_u64(a, word);
        b = _mm_crc32_u64(b, word);
    }
    uint32_t ta = (uint32_t)a, tb = (uint32_t)b;
    for (; n; src++, dst++, n--) {
        *dst = *src;
        ta = _mm_crc32_u8(ta, *src);
        tb = _mm_crc32_u8(tb, *src);
    }
    *own = ~ta;
    *file = ~tb;
}
static inline int oc_have_crc32c(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#else
static inline uint32_t oc_crc32c(uint32_t crc, const uint8_t *p, size_t n) { (void)p; (void)n; return crc; }
static inline void oc_copy_crc2(uint8_t *dst, const uint8_t *src, size_t n, uint32_t *own, uint32_t *file) {
    (void)dst; (void)src; (void)n; (void)own; (void)file;
}
static inline int oc_have_crc32c(void) { return 0; }
#endif

#endif
