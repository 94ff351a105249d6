// SPDX-License-Identifier: Apache-2.0
// Allocation flags shared by the page allocator, vmem and kmem (the Solaris
// values, so code written against the DDI reads the same).
#pragma once

// kmem_alloc(9F) / kmem_cache_alloc(9F)
#define KM_SLEEP 0x0000     // may wait; never returns NULL
#define KM_NOSLEEP 0x0001   // return NULL at once if memory is short
#define KM_PANIC 0x0002     // (unused: we never panic on failure)
#define KM_PUSHPAGE 0x0004  // may use the reserve pool
#define KM_VMFLAGS 0x00ff   // the flags that pass through to vmem

// vmem_create / vmem_alloc
#define VM_SLEEP 0x00000000
#define VM_NOSLEEP 0x00000001
#define VM_PANIC 0x00000002
#define VM_PUSHPAGE 0x00000004
#define VM_KMFLAGS 0x000000ff
#define VM_BESTFIT 0x00000100
#define VM_INSTANTFIT 0x00000200  // the default policy
#define VM_NEXTFIT 0x00000400
#define VM_POLICY (VM_BESTFIT | VM_INSTANTFIT | VM_NEXTFIT)
