/* syncopate's compiled launch path (runtime/fastlaunch.py builds it at first use with the
 * system C compiler, through Triton's own build helper, and caches it in Triton's cache).
 *
 * Why C: a DirectLaunch (runtime/direct_launch.py) packed the kernel's parameters once, but
 * each launch still refreshed its ctypes slots in a Python loop and made a ctypes foreign call
 * with eleven converted arguments; on an H200 host that was ~8 us of an eager fused call whose
 * target is 20 us. Here one call reads the tensor addresses (``data_ptr()``) and the scalars,
 * range-checks them, writes the slots, and enqueues the optional staging copy
 * (cuMemcpyDtoDAsync) and the kernel (cuLaunchKernel).
 *
 * Thread safety: the slots belong to one Launch object shared by every thread launching the
 * kernel (loopback ranks are threads). All Python calls (data_ptr, integer conversion) happen
 * first, into a local array; the slots are then written and the driver called without any
 * Python call in between and with the GIL held, so no other thread can run between the writes
 * and cuLaunchKernel (which copies the parameters before it returns).
 *
 * The driver entry points are handed in as addresses (ctypes resolves them from libcuda): the
 * module links against nothing but Python, builds on a machine without CUDA, and its tests
 * run there with fake entry points.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void *, void **, void **);
typedef int (*cu_memcpy_t)(uint64_t, uint64_t, size_t, void *);
typedef int (*cu_capturing_t)(void *, int *);

/* slot kinds: runtime/fastlaunch.py KINDS */
enum { K_PTR = 0, K_I8, K_I16, K_I32, K_I64, K_U8, K_U16, K_U32, K_U64 };

typedef struct {
  void *addr;         /* where the kernel parameter lives (a ctypes object's buffer) */
  Py_ssize_t arg;     /* index into the call's values */
  int kind;
  long long lo;       /* accepted range of a scalar */
  unsigned long long hi;
} Slot;

typedef struct Launch_ {
  PyObject_HEAD
  cu_launch_t launch;
  cu_memcpy_t memcpy;
  void *function;
  unsigned block, smem;
  void **params;
  uint64_t *scratch_slot; /* NULL: the kernel has no global scratch */
  Py_ssize_t n;
  Slot *slots;
  PyObject *keep;         /* keeps the ctypes slots and the params array alive */
  /* the staging copy as a kernel (set_stager): a Launch of a grid-stride copy of n int64
   * words, its slots (dst, src, n); NULL: the copy is a cuMemcpyDtoDAsync */
  struct Launch_ *stager;
  unsigned stager_programs, stager_block_words;
} Launch;

static PyObject *str_data_ptr;

static int address_of(PyObject *v, uint64_t *out) {
  if (v == Py_None) {
    *out = 0;
    return 0;
  }
  if (PyLong_Check(v)) {
    *out = PyLong_AsUnsignedLongLong(v);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
  }
  PyObject *p = PyObject_CallMethodNoArgs(v, str_data_ptr);
  if (p == NULL)
    return -1;
  *out = PyLong_AsUnsignedLongLong(p);
  Py_DECREF(p);
  return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static int scalar_of(PyObject *v, const Slot *s, uint64_t *out) {
  if (!PyLong_Check(v)) { /* bool is an int; numpy ints are not (Triton refuses them too) */
    PyErr_Format(PyExc_TypeError, "argument %zd: %s for an integer parameter", s->arg,
                 Py_TYPE(v)->tp_name);
    return -1;
  }
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (x == -1 && PyErr_Occurred())
    return -1;
  int ok;
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      ok = 0;
    } else {
      ok = u <= s->hi;
    }
    x = (long long)u;
  } else {
    ok = overflow == 0 && x >= s->lo && (x < 0 || (unsigned long long)x <= s->hi);
  }
  if (!ok) {
    PyErr_Format(PyExc_OverflowError,
                 "argument %zd: %R does not fit the kernel's integer parameter", s->arg, v);
    return -1;
  }
  *out = (uint64_t)x;
  return 0;
}

static void store(const Slot *s, uint64_t v) {
  switch (s->kind) {
  case K_I8: case K_U8: *(uint8_t *)s->addr = (uint8_t)v; break;
  case K_I16: case K_U16: *(uint16_t *)s->addr = (uint16_t)v; break;
  case K_I32: case K_U32: *(uint32_t *)s->addr = (uint32_t)v; break;
  default: *(uint64_t *)s->addr = v; break;
  }
}

static void Launch_dealloc(Launch *self) {
  free(self->slots);
  Py_XDECREF(self->keep);
  Py_XDECREF((PyObject *)self->stager);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Launch(launch_addr, memcpy_addr, function, block, smem, params_addr, scratch_slot_addr,
 *        slots, keep): slots is a sequence of (slot address, argument index, kind, lo, hi) */
static int Launch_init(Launch *self, PyObject *args, PyObject *kw) {
  unsigned long long launch, memcpy_, function, params, scratch;
  unsigned int block, smem;
  PyObject *slots, *keep;
  if (!PyArg_ParseTuple(args, "KKKIIKKOO", &launch, &memcpy_, &function, &block, &smem,
                        &params, &scratch, &slots, &keep))
    return -1;
  if (launch == 0 || params == 0) {
    PyErr_SetString(PyExc_ValueError, "Launch needs cuLaunchKernel and a parameter array");
    return -1;
  }
  PyObject *seq = PySequence_Fast(slots, "slots must be a sequence");
  if (seq == NULL)
    return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  Slot *s = (Slot *)calloc(n ? n : 1, sizeof(Slot));
  if (s == NULL) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long long addr, hi;
    long long lo;
    Py_ssize_t arg;
    int kind;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "KniLK", &addr, &arg, &kind, &lo,
                          &hi)) {
      free(s);
      Py_DECREF(seq);
      return -1;
    }
    if (addr == 0 || arg < 0 || kind < K_PTR || kind > K_U64) {
      free(s);
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "slot %zd: bad address, argument index or kind", i);
      return -1;
    }
    s[i].addr = (void *)(uintptr_t)addr;
    s[i].arg = arg;
    s[i].kind = kind;
    s[i].lo = lo;
    s[i].hi = hi;
  }
  Py_DECREF(seq);
  free(self->slots);
  self->slots = s;
  self->n = n;
  self->launch = (cu_launch_t)(uintptr_t)launch;
  self->memcpy = (cu_memcpy_t)(uintptr_t)memcpy_;
  self->function = (void *)(uintptr_t)function;
  self->block = block;
  self->smem = smem;
  self->params = (void **)(uintptr_t)params;
  self->scratch_slot = (uint64_t *)(uintptr_t)scratch;
  Py_XINCREF(keep);
  Py_XSETREF(self->keep, keep);
  return 0;
}

/* Whether the stager can make this copy: a 16-byte aligned copy of a multiple of 128 bytes
 * (the kernel's specialisation: 16-byte aligned pointers, a word count divisible by 16) whose
 * word count the n slot holds with room for a step past it (its offsets are n's type). */
static int stager_fits(const Launch *self, uint64_t dst, uint64_t src,
                       unsigned long long nbytes) {
  const Launch *s = self->stager;
  if (s == NULL || (dst | src) % 16 || nbytes % 128)
    return 0;
  unsigned long long words = nbytes / 8;
  unsigned long long step = (unsigned long long)self->stager_programs * self->stager_block_words;
  return words + step <= s->slots[2].hi;
}

static void stager_store(Launch *s, uint64_t dst, uint64_t src, unsigned long long nbytes) {
  store(&s->slots[0], dst);
  store(&s->slots[1], src);
  store(&s->slots[2], nbytes / 8);
}

/* the stager's launch for ``self``'s copy of ``nbytes``: one program per step of words, at
 * most self->stager_programs */
static int stager_launch(const Launch *self, unsigned long long nbytes, void *stream) {
  const Launch *s = self->stager;
  unsigned long long words = nbytes / 8;
  unsigned long long need = (words + self->stager_block_words - 1) / self->stager_block_words;
  unsigned gx = need < self->stager_programs ? (unsigned)need : self->stager_programs;
  return s->launch(s->function, gx, 1, 1, s->block, 1, 1, s->smem, stream, s->params, NULL);
}

/* run(gx, gy, gz, stream, values, scratch, copy_dst, copy_src, copy_bytes, copy_after) -> int
 *
 * 0: enqueued. A positive number: cuLaunchKernel's error code (the copy before it, if any, was
 * enqueued). A negative number: minus cuMemcpyDtoDAsync's error code (a copy before the kernel
 * failed: nothing was enqueued; a copy after it failed: the kernel was). copy_bytes == 0: no
 * copy. The copy is the stager's kernel launch where set_stager allows it (its error code
 * then stands for the memcpy's). Python exceptions (a bad argument) are raised before
 * anything is enqueued. */
static PyObject *Launch_run(Launch *self, PyObject *const *a, Py_ssize_t nargs) {
  if (nargs != 10) {
    PyErr_Format(PyExc_TypeError, "run() takes 10 arguments (%zd given)", nargs);
    return NULL;
  }
  unsigned long g[3];
  for (int i = 0; i < 3; i++) {
    g[i] = PyLong_AsUnsignedLong(a[i]);
    if (g[i] == (unsigned long)-1 && PyErr_Occurred())
      return NULL;
  }
  uint64_t stream, scratch = 0, copy_dst = 0, copy_src = 0;
  if (address_of(a[3], &stream) < 0 || address_of(a[5], &scratch) < 0)
    return NULL;
  unsigned long long nbytes = PyLong_AsUnsignedLongLong(a[8]);
  if (nbytes == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  int after = PyObject_IsTrue(a[9]);
  if (after < 0)
    return NULL;
  if (nbytes) {
    if (self->memcpy == NULL) {
      PyErr_SetString(PyExc_ValueError, "this Launch was built without cuMemcpyDtoDAsync");
      return NULL;
    }
    if (address_of(a[6], &copy_dst) < 0 || address_of(a[7], &copy_src) < 0)
      return NULL;
  }
  PyObject *seq = PySequence_Fast(a[4], "values must be a sequence");
  if (seq == NULL)
    return NULL;
  Py_ssize_t nv = PySequence_Fast_GET_SIZE(seq);
  PyObject **items = PySequence_Fast_ITEMS(seq);
  uint64_t small[64];
  uint64_t *vals = self->n <= 64 ? small : (uint64_t *)malloc(self->n * sizeof(uint64_t));
  if (vals == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  int bad = 0;
  for (Py_ssize_t i = 0; i < self->n && !bad; i++) {
    const Slot *s = &self->slots[i];
    if (s->arg >= nv) {
      PyErr_Format(PyExc_IndexError, "argument %zd of %zd", s->arg, nv);
      bad = 1;
    } else if (s->kind == K_PTR) {
      bad = address_of(items[s->arg], &vals[i]) < 0;
    } else {
      bad = scalar_of(items[s->arg], s, &vals[i]) < 0;
    }
  }
  Py_DECREF(seq);
  if (bad) {
    if (vals != small)
      free(vals);
    return NULL;
  }
  /* from here on no Python code runs: the writes and the launch are one step for every other
   * thread */
  for (Py_ssize_t i = 0; i < self->n; i++)
    store(&self->slots[i], vals[i]);
  if (vals != small)
    free(vals);
  if (self->scratch_slot != NULL && scratch != 0)
    *self->scratch_slot = scratch;
  void *st = (void *)(uintptr_t)stream;
  int rc;
  const int by_kernel = nbytes && stager_fits(self, copy_dst, copy_src, nbytes);
  if (by_kernel)
    stager_store(self->stager, copy_dst, copy_src, nbytes);
  if (nbytes && !after) {
    rc = by_kernel ? stager_launch(self, nbytes, st)
                   : self->memcpy(copy_dst, copy_src, (size_t)nbytes, st);
    if (rc)
      return PyLong_FromLong(-rc);
  }
  rc = self->launch(self->function, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2],
                    self->block, 1, 1, self->smem, st, self->params, NULL);
  if (rc)
    return PyLong_FromLong(rc);
  if (nbytes && after) {
    rc = by_kernel ? stager_launch(self, nbytes, st)
                   : self->memcpy(copy_dst, copy_src, (size_t)nbytes, st);
    if (rc)
      return PyLong_FromLong(-rc);
  }
  return PyLong_FromLong(0);
}

/* set_stager(stager, programs, block_words): copies of run() go through ``stager`` (a Launch
 * of runtime/sync_kernels.py's _stage_kernel: slots dst, src, n words; at most ``programs``
 * programs of ``block_words`` words each per step) whenever they are 16-byte aligned and a
 * multiple of 128 bytes (the kernel was specialised for that), else through
 * cuMemcpyDtoDAsync. None: always the memcpy. */
static PyObject *Launch_set_stager(Launch *self, PyObject *const *a, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "set_stager(stager, programs, block_words)");
    return NULL;
  }
  if (a[0] == Py_None) {
    Py_CLEAR(self->stager);
    Py_RETURN_NONE;
  }
  if (!PyObject_TypeCheck(a[0], Py_TYPE(self))) {
    PyErr_SetString(PyExc_TypeError, "the stager must be a Launch");
    return NULL;
  }
  Launch *s = (Launch *)a[0];
  if (s == self || s->n != 3 || s->slots[0].kind != K_PTR || s->slots[1].kind != K_PTR ||
      s->slots[0].arg != 0 || s->slots[1].arg != 1 || s->slots[2].arg != 2 ||
      (s->slots[2].kind != K_I32 && s->slots[2].kind != K_I64) || s->scratch_slot != NULL) {
    PyErr_SetString(PyExc_ValueError,
                    "the stager must take (dst pointer, src pointer, int32/int64 n), no scratch");
    return NULL;
  }
  unsigned long programs = PyLong_AsUnsignedLong(a[1]);
  unsigned long block = PyLong_AsUnsignedLong(a[2]);
  if (PyErr_Occurred())
    return NULL;
  if (programs == 0 || block == 0 || block % 16) {
    PyErr_SetString(PyExc_ValueError, "programs > 0 and block_words a multiple of 16");
    return NULL;
  }
  Py_INCREF(s);
  Py_XSETREF(self->stager, s);
  self->stager_programs = (unsigned)programs;
  self->stager_block_words = (unsigned)block;
  Py_RETURN_NONE;
}

static PyMethodDef Launch_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Launch_run, METH_FASTCALL,
     "run(gx, gy, gz, stream, values, scratch, copy_dst, copy_src, copy_bytes, copy_after)"},
    {"set_stager", (PyCFunction)(void (*)(void))Launch_set_stager, METH_FASTCALL,
     "set_stager(stager Launch or None, programs, block_words)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_syncopate_fastlaunch.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One kernel's launches: slots refreshed and cuLaunchKernel in one call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launch_init,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_methods = Launch_methods,
};

/* ---------------------------------------------------------------------------------------------
 * Program: a fixed list of stream operations replayed per call with the epoch filled in
 * (runtime/stream_program.py builds it; the ce backend's side-stream protocol is one).
 *
 * Why: a ce launch enqueues ~15 driver operations around the fused kernel -- event records and
 * waits, sync-kernel launches, copies, stream memory operations -- whose streams, addresses and
 * geometry are fixed for one set of operand buffers; only the epoch changes. Through Python
 * each cost a ctypes call, argument conversions and the launcher's bookkeeping: 0.10-0.15 ms of
 * host time per ce call on an H200 host against the 60 us. Here one call computes every
 * epoch-dependent value and enqueues the list.
 *
 * Each kernel operation owns its parameter storage (one 8-byte slot per parameter; the driver
 * reads a parameter's size from the slot's first bytes, little endian), so no Python object is
 * touched once the values are computed and the GIL is released around the driver calls: a
 * driver call that blocks (a full launch queue) must not stop another loopback rank's thread
 * from enqueueing what this rank's kernels wait for. A Program is not reentrant (its slots):
 * a second concurrent run() is refused.
 * ------------------------------------------------------------------------------------------- */

typedef int (*cu_record_t)(void *, void *);
typedef int (*cu_wait_event_t)(void *, void *, unsigned);
typedef int (*cu_memop32_t)(void *, uint64_t, uint32_t, unsigned);
typedef int (*cu_memcpy2d_t)(const void *, void *);

/* CUDA_MEMCPY2D_v2 of cuda.h (runtime/_cuda.py's ctypes twin) */
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  uint64_t srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  uint64_t dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} Memcpy2D;

/* operation kinds: runtime/stream_program.py OPS */
enum { P_RECORD = 0, P_WAIT_EVENT, P_WAIT32, P_WRITE32, P_MEMCPY, P_MEMCPY2D, P_KERNEL,
       P_CALL_COPY };
/* entry points, in the order Program() takes them */
enum { E_LAUNCH = 0, E_MEMCPY, E_MEMCPY2D, E_RECORD, E_WAIT_EVENT, E_WAIT32, E_WRITE32, E_N };

typedef struct {
  uint64_t c;   /* value(e) = c + m * e (mod 2^64) */
  int64_t m;
  int wrap32;   /* then as the int32 a 32-bit flag holds, sign-extended */
  int shift;    /* plus the call copy's dst - src: a kernel that writes the copy's bytes itself */
} Value;

typedef struct {
  int kind, stream;    /* stream: 0 the launch stream (run's argument), 1 the side stream */
  uint64_t a[6];       /* the operation's fixed operands (see Program_init) */
  Value v;             /* the value of a stream memory operation */
  /* kernels */
  unsigned gx, block, smem;
  Py_ssize_t np;
  Value *params;
  uint64_t *slots;
  void **ptrs;
} Op;

typedef struct {
  PyObject_HEAD
  void *entry[E_N];
  void *side;
  Py_ssize_t n;
  Op *ops;
  int busy;
  int has_call_copy;   /* a P_CALL_COPY placeholder is in the list */
  int has_shift;       /* a kernel parameter takes the call copy's dst - src */
} Program;

static uint64_t value_at(const Value *v, uint64_t e, uint64_t shift) {
  uint64_t x = v->c + (uint64_t)v->m * e + (v->shift ? shift : 0);
  if (v->wrap32)
    x = (uint64_t)(int64_t)(int32_t)(uint32_t)x;
  return x;
}

static void Program_free_ops(Program *self) {
  for (Py_ssize_t i = 0; i < self->n; i++) {
    free(self->ops[i].params);
    free(self->ops[i].slots);
    free(self->ops[i].ptrs);
  }
  free(self->ops);
  self->ops = NULL;
  self->n = 0;
}

static void Program_dealloc(Program *self) {
  Program_free_ops(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_value(PyObject *t, Value *v) {
  unsigned long long c;
  long long m;
  int wrap, shift;
  if (!PyArg_ParseTuple(t, "KLpp", &c, &m, &wrap, &shift))
    return -1;
  v->c = c;
  v->m = m;
  v->wrap32 = wrap;
  v->shift = shift;
  return 0;
}

/* Program(entries, side_stream, ops): entries the E_N driver entry point addresses (0 where
 * absent: an operation that needs it is refused here); ops a sequence of
 *   (P_RECORD, stream, event)                  (P_WAIT_EVENT, stream, event)
 *   (P_WAIT32, stream, addr, value)             (P_WRITE32, stream, addr, value)
 *   (P_MEMCPY, stream, dst, src, nbytes)
 *   (P_MEMCPY2D, stream, dst, dst_pitch, src, src_pitch, width_bytes, rows)
 *   (P_KERNEL, stream, function, programs, block, smem, (value, ...))
 *   (P_CALL_COPY, stream, 0)                   where run()'s copy goes (at most one)
 * with stream 0 (run's stream) or 1 (side_stream); a value is (c, m, wrap32, shift): c + m * e,
 * plus run()'s copy_dst - copy_src where shift (kernel parameters only: a kernel that writes
 * the call copy's bytes itself, so the program has no P_CALL_COPY). */
static int Program_init(Program *self, PyObject *args, PyObject *kw) {
  PyObject *entries, *ops;
  unsigned long long side;
  if (self->busy) { /* its operations are in use by a run() on another thread */
    PyErr_SetString(PyExc_RuntimeError, "Program.__init__ during a run()");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "OKO", &entries, &side, &ops))
    return -1;
  PyObject *es = PySequence_Fast(entries, "entries must be a sequence");
  if (es == NULL)
    return -1;
  if (PySequence_Fast_GET_SIZE(es) != E_N) {
    Py_DECREF(es);
    PyErr_Format(PyExc_ValueError, "Program needs %d entry points", E_N);
    return -1;
  }
  void *entry[E_N];
  for (int i = 0; i < E_N; i++) {
    unsigned long long x = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(es, i));
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
      Py_DECREF(es);
      return -1;
    }
    entry[i] = (void *)(uintptr_t)x;
  }
  Py_DECREF(es);
  PyObject *seq = PySequence_Fast(ops, "ops must be a sequence");
  if (seq == NULL)
    return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  Op *o = (Op *)calloc(n ? n : 1, sizeof(Op));
  if (o == NULL) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  Program_free_ops(self);
  self->ops = o;
  self->n = n;
  static const int needs[] = {E_RECORD, E_WAIT_EVENT, E_WAIT32, E_WRITE32, E_MEMCPY,
                              E_MEMCPY2D, E_LAUNCH, E_MEMCPY};
  int call_copies = 0, shifts = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 3) {
      PyErr_Format(PyExc_TypeError, "op %zd: a tuple (kind, stream, ...)", i);
      goto fail;
    }
    int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    int stream = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
    if (PyErr_Occurred())
      goto fail;
    if (kind < P_RECORD || kind > P_CALL_COPY || (stream != 0 && stream != 1)) {
      PyErr_Format(PyExc_ValueError, "op %zd: kind %d on stream %d", i, kind, stream);
      goto fail;
    }
    if (entry[needs[kind]] == NULL) {
      PyErr_Format(PyExc_ValueError, "op %zd: its driver entry point is missing", i);
      goto fail;
    }
    Op *op = &o[i];
    op->kind = kind;
    op->stream = stream;
    unsigned long long a0, a1, a2, a3, a4, a5;
    unsigned int gx, block, smem;
    PyObject *v, *ps;
    switch (kind) {
    case P_RECORD:
    case P_WAIT_EVENT:
      if (!PyArg_ParseTuple(t, "iiK", &kind, &stream, &a0))
        goto fail;
      op->a[0] = a0;
      break;
    case P_CALL_COPY:
      if (++call_copies > 1) {
        PyErr_Format(PyExc_ValueError, "op %zd: a second place for the call's copy", i);
        goto fail;
      }
      break;
    case P_WAIT32:
    case P_WRITE32:
      if (!PyArg_ParseTuple(t, "iiKO", &kind, &stream, &a0, &v) || parse_value(v, &op->v) < 0)
        goto fail;
      if (op->v.shift) {
        PyErr_Format(PyExc_ValueError, "op %zd: only a kernel parameter takes the copy's shift",
                     i);
        goto fail;
      }
      op->a[0] = a0;
      break;
    case P_MEMCPY:
      if (!PyArg_ParseTuple(t, "iiKKK", &kind, &stream, &a0, &a1, &a2))
        goto fail;
      op->a[0] = a0, op->a[1] = a1, op->a[2] = a2;
      break;
    case P_MEMCPY2D:
      if (!PyArg_ParseTuple(t, "iiKKKKKK", &kind, &stream, &a0, &a1, &a2, &a3, &a4, &a5))
        goto fail;
      op->a[0] = a0, op->a[1] = a1, op->a[2] = a2, op->a[3] = a3, op->a[4] = a4, op->a[5] = a5;
      break;
    case P_KERNEL: {
      if (!PyArg_ParseTuple(t, "iiKIIIO", &kind, &stream, &a0, &gx, &block, &smem, &ps))
        goto fail;
      if (a0 == 0 || gx == 0 || block == 0) {
        PyErr_Format(PyExc_ValueError, "op %zd: a kernel needs a function and a grid", i);
        goto fail;
      }
      PyObject *pseq = PySequence_Fast(ps, "kernel parameters must be a sequence");
      if (pseq == NULL)
        goto fail;
      Py_ssize_t np = PySequence_Fast_GET_SIZE(pseq);
      op->np = np;
      op->params = (Value *)calloc(np ? np : 1, sizeof(Value));
      op->slots = (uint64_t *)calloc(np ? np : 1, sizeof(uint64_t));
      op->ptrs = (void **)calloc(np ? np : 1, sizeof(void *));
      if (op->params == NULL || op->slots == NULL || op->ptrs == NULL) {
        Py_DECREF(pseq);
        PyErr_NoMemory();
        goto fail;
      }
      for (Py_ssize_t k = 0; k < np; k++) {
        if (parse_value(PySequence_Fast_GET_ITEM(pseq, k), &op->params[k]) < 0) {
          Py_DECREF(pseq);
          goto fail;
        }
        shifts += op->params[k].shift;
        op->ptrs[k] = &op->slots[k];
      }
      Py_DECREF(pseq);
      op->a[0] = a0;
      op->gx = gx, op->block = block, op->smem = smem;
      break;
    }
    }
  }
  Py_DECREF(seq);
  memcpy(self->entry, entry, sizeof(entry));
  self->side = (void *)(uintptr_t)side;
  if (call_copies && shifts) {
    PyErr_SetString(PyExc_ValueError, "a program either copies the call's bytes (P_CALL_COPY) "
                    "or has a kernel write them (a shift parameter), not both");
    Program_free_ops(self);
    return -1;
  }
  self->has_call_copy = call_copies;
  self->has_shift = shifts != 0;
  return 0;
fail:
  Py_DECREF(seq);
  Program_free_ops(self);
  return -1;
}

/* run(stream, epoch, copy_dst, copy_src, copy_bytes) -> None, or (op index, driver error code)
 * of the first failing operation (nothing after it was enqueued). copy_bytes != 0: a
 * cuMemcpyDtoDAsync at the list's P_CALL_COPY (an all-gather's staging, a reduce-scatter's
 * result copy); 0: that place enqueues nothing. A program with shift parameters needs the copy
 * (its kernels write the bytes at copy_dst - copy_src from where they read them). */
static PyObject *Program_run(Program *self, PyObject *const *a, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "run(stream, epoch, copy_dst, copy_src, copy_bytes)");
    return NULL;
  }
  uint64_t stream, dst = 0, src = 0;
  if (address_of(a[0], &stream) < 0)
    return NULL;
  unsigned long long e = PyLong_AsUnsignedLongLongMask(a[1]);
  if (e == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  unsigned long long nbytes = PyLong_AsUnsignedLongLong(a[4]);
  if (nbytes == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  if (nbytes && (address_of(a[2], &dst) < 0 || address_of(a[3], &src) < 0))
    return NULL;
  if (nbytes && !self->has_call_copy && !self->has_shift) {
    PyErr_SetString(PyExc_ValueError, "this Program has no place for a copy (P_CALL_COPY)");
    return NULL;
  }
  if (!nbytes && self->has_shift) {
    PyErr_SetString(PyExc_ValueError, "this Program's kernels write the call's copy: run() "
                    "needs it (copy_bytes != 0)");
    return NULL;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Program.run is already running (not reentrant)");
    return NULL;
  }
  self->busy = 1;
  uint64_t shift = dst - src;
  for (Py_ssize_t i = 0; i < self->n; i++) {
    Op *op = &self->ops[i];
    for (Py_ssize_t k = 0; k < op->np; k++)
      op->slots[k] = value_at(&op->params[k], e, shift);
  }
  Py_ssize_t failed = -2;
  int rc = 0;
  void **en = self->entry;
  Py_BEGIN_ALLOW_THREADS
  void *main = (void *)(uintptr_t)stream;
  for (Py_ssize_t i = 0; i < self->n && !rc; i++) {
    Op *op = &self->ops[i];
    void *st = op->stream ? self->side : main;
    switch (op->kind) {
    case P_RECORD:
      rc = ((cu_record_t)en[E_RECORD])((void *)(uintptr_t)op->a[0], st);
      break;
    case P_WAIT_EVENT:
      rc = ((cu_wait_event_t)en[E_WAIT_EVENT])(st, (void *)(uintptr_t)op->a[0], 0);
      break;
    case P_WAIT32: /* CU_STREAM_WAIT_VALUE_GEQ (0): cyclic >= */
      rc = ((cu_memop32_t)en[E_WAIT32])(st, op->a[0], (uint32_t)value_at(&op->v, e, 0), 0);
      break;
    case P_WRITE32: /* default flags: a memory fence before the write */
      rc = ((cu_memop32_t)en[E_WRITE32])(st, op->a[0], (uint32_t)value_at(&op->v, e, 0), 0);
      break;
    case P_MEMCPY:
      rc = ((cu_memcpy_t)en[E_MEMCPY])(op->a[0], op->a[1], (size_t)op->a[2], st);
      break;
    case P_MEMCPY2D: {
      Memcpy2D p;
      memset(&p, 0, sizeof(p));
      p.dstMemoryType = p.srcMemoryType = 2; /* CU_MEMORYTYPE_DEVICE */
      p.dstDevice = op->a[0], p.dstPitch = op->a[1];
      p.srcDevice = op->a[2], p.srcPitch = op->a[3];
      p.WidthInBytes = op->a[4], p.Height = op->a[5];
      rc = ((cu_memcpy2d_t)en[E_MEMCPY2D])(&p, st);
      break;
    }
    case P_CALL_COPY:
      if (nbytes)
        rc = ((cu_memcpy_t)en[E_MEMCPY])(dst, src, (size_t)nbytes, st);
      break;
    case P_KERNEL:
      rc = ((cu_launch_t)en[E_LAUNCH])((void *)(uintptr_t)op->a[0], op->gx, 1, 1, op->block, 1,
                                       1, op->smem, st, op->ptrs, NULL);
      break;
    }
    if (rc)
      failed = i;
  }
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (!rc)
    Py_RETURN_NONE;
  return Py_BuildValue("(ni)", failed, rc);
}

static PyObject *Program_len(Program *self, PyObject *unused) {
  return PyLong_FromSsize_t(self->n);
}

static PyMethodDef Program_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Program_run, METH_FASTCALL,
     "run(stream, epoch, copy_dst, copy_src, copy_bytes) -> None or (op index, error code)"},
    {"size", (PyCFunction)Program_len, METH_NOARGS, "the number of operations"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_syncopate_fastlaunch.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A fixed list of stream operations replayed per call with the epoch filled in.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Program_init,
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_methods = Program_methods,
};

/* ---------------------------------------------------------------------------------------------
 * Gate: a bound launch's per-call checks and its launch in one C call (runtime/launch_plan.py,
 * LaunchPlan._fast, is the same in Python and stays the reference).
 *
 * Why: on an H200 host the Python checks of an eager sm call -- the kernel not poisoned, the
 * registry generation, the device, Triton's launch hooks, the watchdog's environment, the
 * operands' addresses, the stream's capture status, the thread's graph capture, the lock, the
 * watchdog records of every kernel, the epoch -- cost ~8-10 us around a launch, against issue
 * 13's 20 us for the whole call. Each is one attribute read, dictionary lookup, method call or
 * memory read here.
 *
 * A Gate only ever declines more than _fast does: any check that fails, and anything it cannot
 * read, answers None with nothing changed (the caller takes the general path, which makes
 * every check again and raises what is wrong). Its own answers:
 *   None          not taken: nothing was enqueued, nothing changed
 *   0             enqueued
 *   (e, rc)       epoch e was taken and Launch.run answered rc (a driver error: the caller
 *                 poisons the kernel as _fast does)
 *   (e, exc)      epoch e was taken and Launch.run raised exc before enqueueing
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  Launch *launch;
  PyObject *grid[3];      /* PyLongs */
  PyObject *tail;         /* list: the values after the call's arguments */
  Py_ssize_t nops;
  Py_ssize_t *op_index;
  uint64_t *op_ptr;
  PyObject *falsy;        /* tuple of (obj, name): getattr(obj, name) must be falsy */
  PyObject *equal;        /* tuple of (obj, name, value): getattr(obj, name) == value */
  PyObject *get_device;   /* callable () -> the current device index */
  PyObject *device;       /* the layout's device (what get_device answers; raw_stream's argument) */
  PyObject *hooks;        /* tuple of (obj, name): hook chains that must hold no hook */
  PyObject *env;          /* dict (os.environ's own) */
  PyObject *env_keys;     /* tuple of keys */
  PyObject *env_values;   /* tuple: the values when bound (None: absent) */
  PyObject *raw_stream;   /* callable (device) -> the current stream's handle */
  cu_capturing_t capturing;
  PyObject *local;        /* getattr(local, "active") must be None */
  PyObject *lock;         /* the kernel's lock: acquired without blocking, or not taken */
  PyObject *fk;           /* its _poisoned again under the lock; its last_config set */
  PyObject *probes;       /* getattr(probes, "_probe_addrs"): int32 words that must read 0 */
  PyObject *epochs;       /* .next() -> e; .value = e - 1 rolls it back */
  PyObject *cfg;
} Gate;

static PyObject *s_calls, *s_active, *s_acquire, *s_release, *s_poisoned, *s_probe_addrs,
    *s_next, *s_value, *s_last_config;

static void Gate_dealloc(Gate *self) {
  Py_XDECREF((PyObject *)self->launch);
  for (int i = 0; i < 3; i++)
    Py_XDECREF(self->grid[i]);
  Py_XDECREF(self->tail);
  free(self->op_index);
  free(self->op_ptr);
  Py_XDECREF(self->falsy);
  Py_XDECREF(self->equal);
  Py_XDECREF(self->get_device);
  Py_XDECREF(self->device);
  Py_XDECREF(self->hooks);
  Py_XDECREF(self->env);
  Py_XDECREF(self->env_keys);
  Py_XDECREF(self->env_values);
  Py_XDECREF(self->raw_stream);
  Py_XDECREF(self->local);
  Py_XDECREF(self->lock);
  Py_XDECREF(self->fk);
  Py_XDECREF(self->probes);
  Py_XDECREF(self->epochs);
  Py_XDECREF(self->cfg);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int tuple_of(PyObject *t, Py_ssize_t width, const char *what) {
  if (!PyTuple_Check(t)) {
    PyErr_Format(PyExc_TypeError, "%s: a tuple", what);
    return -1;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
    PyObject *x = PyTuple_GET_ITEM(t, i);
    if (!PyTuple_Check(x) || PyTuple_GET_SIZE(x) != width ||
        !PyUnicode_Check(PyTuple_GET_ITEM(x, 1))) {
      PyErr_Format(PyExc_TypeError, "%s: tuples of %zd, an attribute name second", what, width);
      return -1;
    }
  }
  return 0;
}

#define GATE_SET(field, value) do { Py_INCREF(value); Py_XSETREF(self->field, value); } while (0)

/* Gate(launch, grid, tail, operands, falsy, equal, get_device, device, hooks, env, env_keys,
 *      env_values, raw_stream, capturing_addr, local, lock, fk, probes, epochs, cfg):
 * operands a tuple of (argument index, address); the rest as the struct says. */
static int Gate_init(Gate *self, PyObject *args, PyObject *kw) {
  PyObject *launch, *grid, *tail, *ops, *falsy, *equal, *get_device, *device, *hooks, *env,
      *env_keys, *env_values, *raw_stream, *local, *lock, *fk, *probes, *epochs, *cfg;
  unsigned long long cap;
  if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!OOO!O!O!O!OKOOOOOO", &LaunchType, &launch,
                        &PyTuple_Type, &grid, &PyList_Type, &tail, &PyTuple_Type, &ops,
                        &PyTuple_Type, &falsy, &PyTuple_Type, &equal, &get_device,
                        &device, &PyTuple_Type, &hooks, &PyDict_Type, &env,
                        &PyTuple_Type, &env_keys, &PyTuple_Type, &env_values, &raw_stream,
                        &cap, &local, &lock, &fk, &probes, &epochs, &cfg))
    return -1;
  if (PyTuple_GET_SIZE(grid) != 3 || PyTuple_GET_SIZE(env_keys) != PyTuple_GET_SIZE(env_values)
      || cap == 0 || ((Launch *)launch)->scratch_slot != NULL) {
    PyErr_SetString(PyExc_ValueError, "Gate: a grid of 3, one value per environment key, "
                    "cuStreamIsCapturing and a kernel without global scratch");
    return -1;
  }
  if (tuple_of(falsy, 2, "falsy") < 0 || tuple_of(equal, 3, "equal") < 0 ||
      tuple_of(hooks, 2, "hooks") < 0)
    return -1;
  Py_ssize_t n = PyTuple_GET_SIZE(ops);
  Py_ssize_t *idx = (Py_ssize_t *)calloc(n ? n : 1, sizeof(Py_ssize_t));
  uint64_t *ptr = (uint64_t *)calloc(n ? n : 1, sizeof(uint64_t));
  if (idx == NULL || ptr == NULL) {
    free(idx);
    free(ptr);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long long p;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(ops, i), "nK", &idx[i], &p) || idx[i] < 0) {
      free(idx);
      free(ptr);
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "Gate: a negative operand index");
      return -1;
    }
    ptr[i] = p;
  }
  for (int i = 0; i < 3; i++)
    GATE_SET(grid[i], PyTuple_GET_ITEM(grid, i));
  free(self->op_index);
  free(self->op_ptr);
  self->op_index = idx, self->op_ptr = ptr, self->nops = n;
  GATE_SET(launch, (Launch *)launch);
  GATE_SET(tail, tail);
  GATE_SET(falsy, falsy);
  GATE_SET(equal, equal);
  GATE_SET(get_device, get_device);
  GATE_SET(device, device);
  GATE_SET(hooks, hooks);
  GATE_SET(env, env);
  GATE_SET(env_keys, env_keys);
  GATE_SET(env_values, env_values);
  GATE_SET(raw_stream, raw_stream);
  GATE_SET(local, local);
  GATE_SET(lock, lock);
  GATE_SET(fk, fk);
  GATE_SET(probes, probes);
  GATE_SET(epochs, epochs);
  GATE_SET(cfg, cfg);
  self->capturing = (cu_capturing_t)(uintptr_t)cap;
  return 0;
}

/* 1 when getattr(obj, name) is truthy or unreadable (the caller declines), 0 otherwise */
static int attr_truthy(PyObject *obj, PyObject *name) {
  PyObject *v = PyObject_GetAttr(obj, name);
  if (v == NULL) {
    PyErr_Clear();
    return 1;
  }
  int t = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (t < 0) {
    PyErr_Clear();
    return 1;
  }
  return t;
}

/* 1 when every check before the lock passes (runtime/launch_plan.py _fast, in its order) */
static int gate_checks(Gate *self, PyObject *args, uint64_t *stream) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->falsy); i++) {
    PyObject *x = PyTuple_GET_ITEM(self->falsy, i);
    if (attr_truthy(PyTuple_GET_ITEM(x, 0), PyTuple_GET_ITEM(x, 1)))
      return 0;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->equal); i++) {
    PyObject *x = PyTuple_GET_ITEM(self->equal, i);
    PyObject *v = PyObject_GetAttr(PyTuple_GET_ITEM(x, 0), PyTuple_GET_ITEM(x, 1));
    int eq = v == NULL ? -1 : PyObject_RichCompareBool(v, PyTuple_GET_ITEM(x, 2), Py_EQ);
    Py_XDECREF(v);
    if (eq != 1) {
      PyErr_Clear();
      return 0;
    }
  }
  PyObject *d = PyObject_CallNoArgs(self->get_device);
  int same = d == NULL ? -1 : PyObject_RichCompareBool(d, self->device, Py_EQ);
  Py_XDECREF(d);
  if (same != 1) {
    PyErr_Clear();
    return 0;
  }
  /* runtime/direct_launch.py hooks_active: a chain counts when it holds a hook */
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->hooks); i++) {
    PyObject *x = PyTuple_GET_ITEM(self->hooks, i);
    PyObject *chain = PyObject_GetAttr(PyTuple_GET_ITEM(x, 0), PyTuple_GET_ITEM(x, 1));
    if (chain == NULL) {
      PyErr_Clear();
      return 0;
    }
    int set = 0;
    if (chain != Py_None)
      set = attr_truthy(chain, s_calls); /* no ``calls``: a plain hook, which counts */
    Py_DECREF(chain);
    if (set)
      return 0;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->env_keys); i++) {
    PyObject *v = PyDict_GetItemWithError(self->env, PyTuple_GET_ITEM(self->env_keys, i));
    if (v == NULL && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    PyObject *want = PyTuple_GET_ITEM(self->env_values, i);
    if (v == NULL ? want != Py_None : (want == Py_None ||
                                       PyObject_RichCompareBool(v, want, Py_EQ) != 1)) {
      PyErr_Clear();
      return 0;
    }
  }
  Py_ssize_t n = PyList_GET_SIZE(args);
  for (Py_ssize_t i = 0; i < self->nops; i++) {
    uint64_t p;
    if (self->op_index[i] >= n || address_of(PyList_GET_ITEM(args, self->op_index[i]), &p) < 0
        || p != self->op_ptr[i]) {
      PyErr_Clear();
      return 0;
    }
  }
  PyObject *s = PyObject_CallOneArg(self->raw_stream, self->device);
  int bad = s == NULL || address_of(s, stream) < 0;
  Py_XDECREF(s);
  if (bad) {
    PyErr_Clear();
    return 0;
  }
  int status = 0;
  if (self->capturing((void *)(uintptr_t)*stream, &status) || status)
    return 0;
  PyObject *active = PyObject_GetAttr(self->local, s_active);
  if (active == NULL) {
    PyErr_Clear();
    return 0;
  }
  Py_DECREF(active);
  return active == Py_None;
}

static int gate_release(Gate *self) {
  PyObject *r = PyObject_CallMethodNoArgs(self->lock, s_release);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* gate(args, copy) -> None | 0 | (e, rc) | (e, exc): args the call's argument list, copy None
 * or (dst, src, nbytes, after) */
static PyObject *Gate_call(Gate *self, PyObject *const *a, Py_ssize_t nargs) {
  if (nargs != 2 || !PyList_Check(a[0])) {
    PyErr_SetString(PyExc_TypeError, "gate(args list, copy tuple or None)");
    return NULL;
  }
  PyObject *args = a[0], *copy = a[1];
  PyObject *dst = Py_None, *src = Py_None, *nb = NULL, *after = Py_False;
  unsigned long long nbytes = 0;
  if (copy != Py_None) {
    if (!PyTuple_Check(copy) || PyTuple_GET_SIZE(copy) != 4) {
      PyErr_SetString(PyExc_TypeError, "copy: (dst, src, nbytes, after) or None");
      return NULL;
    }
    dst = PyTuple_GET_ITEM(copy, 0), src = PyTuple_GET_ITEM(copy, 1);
    nb = PyTuple_GET_ITEM(copy, 2), after = PyTuple_GET_ITEM(copy, 3);
    uint64_t d, sr;
    nbytes = PyLong_AsUnsignedLongLong(nb);
    if ((nbytes == (unsigned long long)-1 && PyErr_Occurred()) || address_of(dst, &d) < 0 ||
        address_of(src, &sr) < 0)
      return NULL;
    if (nbytes && d < sr + nbytes && sr < d + nbytes)
      Py_RETURN_NONE; /* overlapping: Tensor.copy_ refuses or orders it, a memcpy would not */
  }
  uint64_t stream;
  if (!gate_checks(self, args, &stream))
    Py_RETURN_NONE;
  PyObject *got = PyObject_CallMethodOneArg(self->lock, s_acquire, Py_False);
  if (got == NULL) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  Py_DECREF(got);
  if (got != Py_True)
    Py_RETURN_NONE; /* another thread launches this kernel: the general path waits for it */
  /* the lock is held from here: every way out releases it */
  PyObject *out = NULL;
  int declined = attr_truthy(self->fk, s_poisoned);
  if (!declined) { /* communicator.check's records: any timeout recorded declines */
    PyObject *addrs = PyObject_GetAttr(self->probes, s_probe_addrs);
    if (addrs == NULL || !PyTuple_Check(addrs)) {
      PyErr_Clear();
      declined = 1;
    } else {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(addrs) && !declined; i++) {
        uint64_t p = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(addrs, i));
        if (p == (uint64_t)-1 && PyErr_Occurred()) {
          PyErr_Clear();
          declined = 1;
        } else {
          declined = *(volatile int32_t *)(uintptr_t)p != 0;
        }
      }
    }
    Py_XDECREF(addrs);
  }
  if (declined) {
    if (gate_release(self) < 0)
      return NULL;
    Py_RETURN_NONE;
  }
  PyObject *ev = PyObject_CallMethodNoArgs(self->epochs, s_next);
  if (ev == NULL) { /* the epoch limit: the general path raises it too */
    PyErr_Clear();
    if (gate_release(self) < 0)
      return NULL;
    Py_RETURN_NONE;
  }
  long long e = PyLong_AsLongLong(ev);
  PyObject *values = NULL, *rc_obj = NULL, *zero = NULL, *pystream = NULL;
  if (PyObject_SetAttr(self->fk, s_last_config, self->cfg) < 0)
    goto raised;
  values = PySequence_Concat(args, self->tail);
  zero = PyLong_FromLong(0);
  pystream = PyLong_FromUnsignedLongLong(stream);
  if (values == NULL || zero == NULL || pystream == NULL)
    goto raised;
  {
    PyObject *argv[10] = {self->grid[0], self->grid[1], self->grid[2], pystream, values, zero,
                          dst, src, nb != NULL ? nb : zero, after};
    rc_obj = Launch_run(self->launch, argv, 10);
  }
  if (rc_obj == NULL)
    goto raised;
  long rc = PyLong_AsLong(rc_obj);
  long first = (nbytes && PyObject_IsTrue(after) == 0) ? -rc : rc;
  if (rc == 0) {
    out = PyLong_FromLong(0);
  } else if (first == 201) { /* CUDA_ERROR_INVALID_CONTEXT before anything: roll back, decline */
    PyObject *back = PyLong_FromLongLong(e - 1);
    if (back == NULL || PyObject_SetAttr(self->epochs, s_value, back) < 0) {
      Py_XDECREF(back);
      goto raised;
    }
    Py_DECREF(back);
    out = Py_None;
    Py_INCREF(out);
  } else {
    out = Py_BuildValue("(OO)", ev, rc_obj);
  }
  goto done;
raised: { /* Launch.run raised before enqueueing (or a Python step failed): (e, exc) */
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (exc != NULL && tb != NULL)
      PyException_SetTraceback(exc, tb);
    out = Py_BuildValue("(OO)", ev, exc != NULL ? exc : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
  }
done:
  Py_XDECREF(values);
  Py_XDECREF(rc_obj);
  Py_XDECREF(zero);
  Py_XDECREF(pystream);
  Py_DECREF(ev);
  if (gate_release(self) < 0) {
    Py_XDECREF(out);
    return NULL;
  }
  return out;
}

static PyObject *Gate_vectorcall_entry(PyObject *self, PyObject *args, PyObject *kw) {
  if (kw != NULL && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "gate(args, copy): no keyword arguments");
    return NULL;
  }
  return Gate_call((Gate *)self, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args));
}

static PyMethodDef Gate_run_def[] = {
    {"run", (PyCFunction)(void (*)(void))Gate_call, METH_FASTCALL,
     "run(args, copy) -> None | 0 | (e, rc) | (e, exc)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_syncopate_fastlaunch.Gate",
    .tp_basicsize = sizeof(Gate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A bound launch's checks and launch in one call (runtime/launch_plan.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Gate_init,
    .tp_dealloc = (destructor)Gate_dealloc,
    .tp_methods = Gate_run_def,
    .tp_call = Gate_vectorcall_entry,
};

/* capturing(fn_addr, stream) -> status: cuStreamIsCapturing's status (0: not capturing), or
 * -1 when the driver refuses to answer (the caller then takes its general path) */
static PyObject *capturing(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "capturing(fn_addr, stream)");
    return NULL;
  }
  uint64_t fn, stream;
  if (address_of(a[0], &fn) < 0 || address_of(a[1], &stream) < 0)
    return NULL;
  if (fn == 0)
    return PyLong_FromLong(-1);
  int status = 0;
  int rc = ((cu_capturing_t)(uintptr_t)fn)((void *)(uintptr_t)stream, &status);
  return PyLong_FromLong(rc ? -1 : status);
}

static PyMethodDef module_methods[] = {
    {"capturing", (PyCFunction)(void (*)(void))capturing, METH_FASTCALL,
     "capturing(fn_addr, stream) -> cuStreamIsCapturing status, -1 on a driver error"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_syncopate_fastlaunch",
    "syncopate's compiled launch path (runtime/fastlaunch.py)", -1, module_methods,
};

static int add_type(PyObject *m, const char *name, PyTypeObject *type) {
  Py_INCREF(type);
  if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

PyMODINIT_FUNC PyInit__syncopate_fastlaunch(void) {
  str_data_ptr = PyUnicode_InternFromString("data_ptr");
  s_calls = PyUnicode_InternFromString("calls");
  s_active = PyUnicode_InternFromString("active");
  s_acquire = PyUnicode_InternFromString("acquire");
  s_release = PyUnicode_InternFromString("release");
  s_poisoned = PyUnicode_InternFromString("_poisoned");
  s_probe_addrs = PyUnicode_InternFromString("_probe_addrs");
  s_next = PyUnicode_InternFromString("next");
  s_value = PyUnicode_InternFromString("value");
  s_last_config = PyUnicode_InternFromString("last_config");
  if (str_data_ptr == NULL || s_calls == NULL || s_active == NULL || s_acquire == NULL ||
      s_release == NULL || s_poisoned == NULL || s_probe_addrs == NULL || s_next == NULL ||
      s_value == NULL || s_last_config == NULL || PyType_Ready(&LaunchType) < 0 ||
      PyType_Ready(&ProgramType) < 0 || PyType_Ready(&GateType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (m == NULL)
    return NULL;
  if (add_type(m, "Launch", &LaunchType) < 0 || add_type(m, "Program", &ProgramType) < 0 ||
      add_type(m, "Gate", &GateType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
