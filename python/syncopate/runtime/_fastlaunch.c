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
  if (str_data_ptr == NULL || PyType_Ready(&LaunchType) < 0 || PyType_Ready(&ProgramType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (m == NULL)
    return NULL;
  if (add_type(m, "Launch", &LaunchType) < 0 || add_type(m, "Program", &ProgramType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
