// SPDX-License-Identifier: Apache-2.0
// kmem's consolidator: moving objects out of sparse slabs (Solaris
// kmem_cache_set_move(9F)).
//
// 1. A cache with a move callback is sparse when at most 3/4 of its slab-
//    layer buffers are in use and it has at least two partial slabs. One
//    pass takes the emptiest partial slab (the victim) and offers each of
//    its allocated objects to the client's callback, one at a time, with a
//    new constructed buffer from a fuller slab. YES frees the old buffer,
//    NO and LATER free the new one and leave the victim for this pass,
//    DONT_NEED frees both, DONT_KNOW frees the new one and looks for the old
//    one in the depot's full magazines (it may be free there: depot_evict).
// 2. Victims. A victim is marked kSlabVictim: allocations skip it and
//    slab_put never destroys it, so the mover may look at it between
//    callbacks; an emptied victim stays on the empty list for the next reap.
// 3. At most kMaxMoveCalls callbacks per cache per pass. One pass runs at a
//    time (g_moving); callbacks run with no lock held.
#include "kmem_cache.h"
#include "kmemleak_meta.h"

namespace mm {
namespace {

constexpr unsigned kMaxMoveCalls = 256;  // per cache per pass
// A pass is running: a try-lock, taken by an exchange with acquire and
// dropped with a release store (one pass's work before the next one's).
// Word-sized: no sub-word atomics on riscv64.
uintptr_t g_moving;

void set_victim(kmem_cache_t* cp, Slab* sp, bool on) {
  Guard<> g(cp->slab_lock);
  if (on) sp->flags |= kSlabVictim;
  else sp->flags &= ~kSlabVictim;
}

}  // namespace

void move_cache(kmem_cache_t* cp) {
  auto move = __atomic_load_n(&cp->move, __ATOMIC_ACQUIRE);  // kmem_cache_set_move's release
  if (!move) return;
  unsigned calls = 0;
  for (;;) {
    Slab* victim = nullptr;
    {
      Guard<> g(cp->slab_lock);
      if (cp->partial.count >= 2 && cp->buf_slab_inuse * 4 <= cp->buf_total * 3) {
        for (Slab* sp = cp->partial.head; sp; sp = sp->next)
          if (!(sp->flags & kSlabVictim) && (!victim || sp->refcnt < victim->refcnt)) victim = sp;
      }
      if (victim) victim->flags |= kSlabVictim;
    }
    if (!victim) return;
    bool stop = false;
    for (;;) {
      uintptr_t old = 0;
      {
        Guard<> g(cp->slab_lock);
        for (uint32_t i = 0; i < victim->chunks && !old; i++)
          if (!slab_buffer_free(victim, i)) old = victim->base + i * cp->chunk;
      }
      if (!old) break;  // emptied
      if (calls++ >= kMaxMoveCalls) {
        stop = true;
        break;
      }
      // A constructed destination from another slab (victims are skipped).
      void* dst = slab_alloc(cp, KM_NOSLEEP);
      if (!dst) {
        stop = true;
        break;
      }
      kmem_cbrc_t rc = move(reinterpret_cast<void*>(old), dst, cp->bufsize, cp->priv);
      {
        Guard<> g(cp->slab_lock);
        if (rc <= KMEM_CBRC_DONT_KNOW) cp->moves[rc]++;
      }
      if (rc == KMEM_CBRC_YES) {
        // The object moved: its kmemleak record goes with it.
        leak_move(cp, old, reinterpret_cast<uintptr_t>(dst));
        prof_move(cp, reinterpret_cast<void*>(old), dst);  // and its allocation profiling reference
        slab_free(cp, reinterpret_cast<void*>(old), true, 0);
      } else if (rc == KMEM_CBRC_DONT_NEED) {
        prof_unstamp(cp, reinterpret_cast<void*>(old), 0);  // the object is gone: off its tag
        slab_free(cp, reinterpret_cast<void*>(old), true, 0);
        slab_free(cp, dst, true, 0);
      } else if (rc == KMEM_CBRC_DONT_KNOW) {
        slab_free(cp, dst, true, 0);
        // The old buffer may be sitting free in the depot: get it out so its
        // slab can empty. Otherwise leave this slab.
        if (!depot_evict(cp, reinterpret_cast<void*>(old))) break;
      } else {  // NO or LATER: leave this slab alone for this pass
        slab_free(cp, dst, true, 0);
        break;
      }
    }
    set_victim(cp, victim, false);
    if (stop) return;
  }
}

void kmem_move_pass() {
  if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE)) return;                    // kmem_init's release
  if (__atomic_exchange_n(&g_moving, uintptr_t{1}, __ATOMIC_ACQUIRE)) return;  // one pass at a time
  for_each_cache(move_cache);
  __atomic_store_n(&g_moving, uintptr_t{0}, __ATOMIC_RELEASE);
}

}  // namespace mm
