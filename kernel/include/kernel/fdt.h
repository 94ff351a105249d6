// SPDX-License-Identifier: Apache-2.0
// A reader for flattened device trees (the DTB a bootloader passes).
//
// Tree::open() checks the header and walks the whole structure block once:
// every token, name, property and string offset is checked against the blob's
// bounds, and nesting must balance. Only a blob that passes is used, so the
// accessors afterwards never read outside it. A bad blob gives an Error with a
// name, never a fault. Portable: the host tests run it under ASan and UBSan on
// malformed and truncated blobs.
//
// Nodes are offsets of their FDT_BEGIN_NODE token in the structure block.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fdt {

enum class Error : uint8_t {
  kOk,
  kNull,           // no blob pointer
  kTooSmall,       // fewer bytes than a header
  kBadMagic,       // not a device tree
  kBadVersion,     // older than v16 or incompatible
  kBadLayout,      // a block lies outside the blob or overlaps the header
  kBadReserveMap,  // memory reservation map unterminated or misaligned
  kBadToken,       // unknown token in the structure block
  kBadName,        // node name runs off the structure block
  kBadProperty,    // property data runs off the structure block
  kBadString,      // property name offset outside the strings block
  kBadNesting,     // unbalanced nodes, or no single root
  kTruncated,      // structure block ends before FDT_END
};

const char* error_name(Error e);

inline uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
inline uint64_t be64(const uint8_t* p) { return (uint64_t{be32(p)} << 32) | be32(p + 4); }

struct Property {
  const char* name = nullptr;
  const uint8_t* data = nullptr;
  uint32_t len = 0;

  // Cell i (a big-endian u32) or 0 when out of range.
  uint32_t u32(uint32_t i = 0) const { return (uint64_t{i} + 1) * 4 <= len ? be32(data + 4 * uint64_t{i}) : 0; }
  // A number of ncells (1 or 2) cells starting at cell i; false if out of range.
  bool cells(uint32_t i, uint32_t ncells, uint64_t& out) const;
  // The value as one NUL-terminated string (nullptr if it is not one).
  const char* str() const;
  // True if the string list contains s.
  bool has_string(const char* s) const;
};

using Node = int32_t;
constexpr Node kNoNode = -1;

class Tree {
 public:
  // Checks blob (of at most `available` readable bytes) and keeps it if good.
  [[nodiscard]] Error open(const void* blob, size_t available);
  bool valid() const { return base_ != nullptr; }
  const void* blob() const { return base_; }
  uint32_t total_size() const { return total_; }

  Node root() const { return valid() ? root_ : kNoNode; }
  // Absolute path such as "/chosen" or "/soc/uart@9000000"; a component
  // without '@' also matches a node named with a unit address.
  Node find(const char* path) const;
  Node first_child(Node n) const;
  Node next_sibling(Node n) const;
  Node parent(Node n) const;
  const char* name(Node n) const;

  bool prop(Node n, const char* name, Property& out) const;
  // Iterates properties: start with cursor = 0.
  bool next_prop(Node n, uint32_t& cursor, Property& out) const;
  bool is_compatible(Node n, const char* compat) const;
  // The next node after `after` in document order whose compatible has compat.
  Node find_compatible(const char* compat, Node after = kNoNode) const;
  Node find_phandle(uint32_t phandle) const;
  // Node names starting with prefix ("memory" matches "memory@40000000"),
  // or whose device_type equals prefix, in document order after `after`.
  Node find_device_type(const char* type, Node after = kNoNode) const;

  // #address-cells / #size-cells that apply to the children of n.
  uint32_t address_cells(Node n) const;
  uint32_t size_cells(Node n) const;
  // Entry i of n's "reg", decoded with the parent's cell sizes and
  // translated to a CPU physical address through the buses' "ranges".
  bool reg(Node n, uint32_t i, uint64_t& base, uint64_t& size) const;
  // Translates addr, an address on bus (the parent of the node it came
  // from), up to the root's address space; false if no range covers it.
  bool translate(Node bus, uint64_t& addr) const;

  uint32_t memreserve_count() const { return nreserve_; }
  bool memreserve(uint32_t i, uint64_t& base, uint64_t& size) const;

 private:
  const uint8_t* base_ = nullptr;
  uint32_t total_ = 0;
  const uint8_t* struct_ = nullptr;
  uint32_t struct_size_ = 0;
  const char* strings_ = nullptr;
  uint32_t strings_size_ = 0;
  const uint8_t* rsvmap_ = nullptr;
  uint32_t nreserve_ = 0;
  Node root_ = kNoNode;

  // Steps over the token at off; returns the next token's offset.
  uint32_t skip(uint32_t off) const;
  uint32_t token(uint32_t off) const { return be32(struct_ + off); }
};

}  // namespace fdt
