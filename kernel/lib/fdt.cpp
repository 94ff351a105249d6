// SPDX-License-Identifier: Apache-2.0
// Flattened device tree reader. See fdt.h for the contract: validate once,
// then read without bounds surprises.
#include <kernel/fdt.h>

namespace fdt {
namespace {

constexpr uint32_t kMagic = 0xd00dfeed;
constexpr uint32_t kBeginNode = 1, kEndNode = 2, kProp = 3, kNop = 4, kEnd = 9;
constexpr uint32_t kHeaderSize = 40;

uint32_t align4(uint32_t v) { return (v + 3) & ~3u; }

bool str_eq(const char* a, const char* b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

// Does a node name match a path component (with or without unit address)?
bool name_matches(const char* name, const char* comp, uint32_t comp_len) {
  uint32_t i = 0;
  for (; i < comp_len; i++) {
    if (name[i] != comp[i]) return false;
  }
  if (name[i] == 0) return true;
  if (name[i] != '@') return false;
  for (uint32_t k = 0; k < comp_len; k++) {
    if (comp[k] == '@') return false;  // the path named a unit address: exact match only
  }
  return true;
}

}  // namespace

const char* error_name(Error e) {
  switch (e) {
    case Error::kOk: return "ok";
    case Error::kNull: return "no device tree pointer";
    case Error::kTooSmall: return "blob smaller than a device tree header";
    case Error::kBadMagic: return "bad magic (not a flattened device tree)";
    case Error::kBadVersion: return "unsupported device tree version";
    case Error::kBadLayout: return "header block offsets lie outside the blob";
    case Error::kBadReserveMap: return "memory reservation map unterminated or misaligned";
    case Error::kBadToken: return "unknown token in structure block";
    case Error::kBadName: return "node name runs off the structure block";
    case Error::kBadProperty: return "property runs off the structure block";
    case Error::kBadString: return "property name outside the strings block";
    case Error::kBadNesting: return "unbalanced nodes or no single root";
    case Error::kTruncated: return "structure block ends before FDT_END";
  }
  return "unknown error";
}

bool Property::cells(uint32_t i, uint32_t ncells, uint64_t& out) const {
  if (ncells == 0) {
    out = 0;
    return true;
  }
  if (ncells > 2 || (uint64_t{i} + ncells) * 4 > len) return false;  // 64-bit: no wrap
  out = ncells == 2 ? be64(data + 4 * uint64_t{i}) : be32(data + 4 * uint64_t{i});
  return true;
}

const char* Property::str() const {
  if (len == 0 || data[len - 1] != 0) return nullptr;
  return reinterpret_cast<const char*>(data);
}

bool Property::has_string(const char* s) const {
  uint32_t off = 0;
  while (off < len) {
    const char* p = reinterpret_cast<const char*>(data + off);
    uint32_t n = 0;
    while (off + n < len && p[n]) n++;
    if (off + n == len) return false;  // unterminated tail
    if (str_eq(p, s)) return true;
    off += n + 1;
  }
  return false;
}

Error Tree::open(const void* blob, size_t available) {
  *this = Tree{};  // a failed open leaves no trace of an earlier tree
  if (!blob) return Error::kNull;
  if (available < kHeaderSize) return Error::kTooSmall;
  const auto* b = static_cast<const uint8_t*>(blob);
  if (be32(b) != kMagic) return Error::kBadMagic;
  uint32_t total = be32(b + 4), off_struct = be32(b + 8), off_strings = be32(b + 12);
  uint32_t off_rsv = be32(b + 16), version = be32(b + 20), last_comp = be32(b + 24);
  uint32_t size_strings = be32(b + 32), size_struct = be32(b + 36);
  if (version < 16 || last_comp > 17) return Error::kBadVersion;
  if (total < kHeaderSize || total > available) return Error::kTooSmall;
  if (version < 17) size_struct = total - off_struct;  // v16 has no size field
  auto inside = [&](uint32_t off, uint32_t size) { return off >= kHeaderSize && off <= total && size <= total - off; };
  if (!inside(off_struct, size_struct) || !inside(off_strings, size_strings) || !inside(off_rsv, 0) ||
      (off_struct & 3) || size_struct < 4)
    return Error::kBadLayout;
  if (off_rsv & 7) return Error::kBadReserveMap;
  uint32_t nres = 0;
  for (uint32_t off = off_rsv;; off += 16) {
    if (off > total || total - off < 16) return Error::kBadReserveMap;
    if (be64(b + off) == 0 && be64(b + off + 8) == 0) break;
    nres++;
  }

  struct_ = b + off_struct;
  struct_size_ = size_struct & ~3u;
  strings_ = reinterpret_cast<const char*>(b + off_strings);
  strings_size_ = size_strings;

  // Walk the structure block once, checking everything the accessors rely on.
  int depth = 0, roots = 0;
  Node root = kNoNode;
  uint32_t off = 0;
  for (;;) {
    if (off + 4 > struct_size_) return Error::kTruncated;
    uint32_t tok = token(off);
    if (tok == kBeginNode) {
      uint32_t n = off + 4;
      while (n < struct_size_ && struct_[n]) n++;
      if (n >= struct_size_) return Error::kBadName;
      if (depth == 0) {
        roots++;
        root = static_cast<Node>(off);
      }
      depth++;
      off = align4(n + 1);
    } else if (tok == kEndNode) {
      if (--depth < 0) return Error::kBadNesting;
      off += 4;
    } else if (tok == kProp) {
      if (depth == 0) return Error::kBadNesting;
      if (off + 12 > struct_size_) return Error::kBadProperty;
      uint32_t len = be32(struct_ + off + 4), nameoff = be32(struct_ + off + 8);
      if (len > struct_size_ - (off + 12)) return Error::kBadProperty;
      if (nameoff >= strings_size_) return Error::kBadString;
      bool terminated = false;
      for (uint32_t i = nameoff; i < strings_size_; i++) {
        if (!strings_[i]) {
          terminated = true;
          break;
        }
      }
      if (!terminated) return Error::kBadString;
      off = align4(off + 12 + len);
    } else if (tok == kNop) {
      off += 4;
    } else if (tok == kEnd) {
      break;
    } else {
      return Error::kBadToken;
    }
  }
  if (depth != 0 || roots != 1) return Error::kBadNesting;

  base_ = b;
  total_ = total;
  rsvmap_ = b + off_rsv;
  nreserve_ = nres;
  root_ = root;
  return Error::kOk;
}

uint32_t Tree::skip(uint32_t off) const {
  uint32_t tok = token(off);
  if (tok == kBeginNode) {
    uint32_t n = off + 4;
    while (struct_[n]) n++;
    return align4(n + 1);
  }
  if (tok == kProp) return align4(off + 12 + be32(struct_ + off + 4));
  return off + 4;
}

const char* Tree::name(Node n) const {
  if (!valid() || n < 0) return "";
  return reinterpret_cast<const char*>(struct_ + n + 4);
}

Node Tree::first_child(Node n) const {
  if (!valid() || n < 0) return kNoNode;
  uint32_t off = skip(static_cast<uint32_t>(n));
  for (;;) {
    uint32_t tok = token(off);
    if (tok == kBeginNode) return static_cast<Node>(off);
    if (tok == kEndNode || tok == kEnd) return kNoNode;
    off = skip(off);
  }
}

Node Tree::next_sibling(Node n) const {
  if (!valid() || n < 0) return kNoNode;
  // Skip n's whole subtree, then look at what follows at the same depth.
  uint32_t off = static_cast<uint32_t>(n);
  int depth = 0;
  do {
    uint32_t tok = token(off);
    if (tok == kBeginNode) depth++;
    else if (tok == kEndNode) depth--;
    else if (tok == kEnd) return kNoNode;
    off = skip(off);
  } while (depth > 0);
  for (;;) {
    uint32_t tok = token(off);
    if (tok == kBeginNode) return static_cast<Node>(off);
    if (tok == kEndNode || tok == kEnd) return kNoNode;
    off = skip(off);
  }
}

Node Tree::parent(Node n) const {
  if (!valid() || n <= root_) return kNoNode;
  // Two walks from the root, no stack, so any depth works: the first finds
  // n's depth d; the parent is the last node opened at depth d - 1 before n.
  int depth = 0, target = -1;
  for (uint32_t off = static_cast<uint32_t>(root_);; off = skip(off)) {
    uint32_t tok = token(off);
    if (tok == kBeginNode) {
      if (static_cast<Node>(off) == n) {
        target = depth - 1;
        break;
      }
      depth++;
    } else if (tok == kEndNode) {
      depth--;
    } else if (tok == kEnd) {
      return kNoNode;  // n is not a node
    }
  }
  Node candidate = kNoNode;
  depth = 0;
  for (uint32_t off = static_cast<uint32_t>(root_); static_cast<Node>(off) != n; off = skip(off)) {
    uint32_t tok = token(off);
    if (tok == kBeginNode) {
      if (depth == target) candidate = static_cast<Node>(off);
      depth++;
    } else if (tok == kEndNode) {
      depth--;
    }
  }
  return candidate;
}

Node Tree::find(const char* path) const {
  if (!valid() || !path || path[0] != '/') return kNoNode;
  Node cur = root_;
  const char* p = path + 1;
  while (*p) {
    uint32_t len = 0;
    while (p[len] && p[len] != '/') len++;
    if (len) {
      Node child = first_child(cur);
      while (child != kNoNode && !name_matches(name(child), p, len)) child = next_sibling(child);
      if (child == kNoNode) return kNoNode;
      cur = child;
    }
    p += len;
    if (*p == '/') p++;
  }
  return cur;
}

bool Tree::next_prop(Node n, uint32_t& cursor, Property& out) const {
  if (!valid() || n < 0) return false;
  uint32_t off = cursor ? cursor : skip(static_cast<uint32_t>(n));
  for (;;) {
    uint32_t tok = token(off);
    if (tok == kNop) {
      off += 4;
      continue;
    }
    if (tok != kProp) return false;
    out.len = be32(struct_ + off + 4);
    out.name = strings_ + be32(struct_ + off + 8);
    out.data = struct_ + off + 12;
    cursor = skip(off);
    return true;
  }
}

bool Tree::prop(Node n, const char* pname, Property& out) const {
  uint32_t cursor = 0;
  Property p;
  while (next_prop(n, cursor, p)) {
    if (str_eq(p.name, pname)) {
      out = p;
      return true;
    }
  }
  return false;
}

bool Tree::is_compatible(Node n, const char* compat) const {
  Property p;
  return prop(n, "compatible", p) && p.has_string(compat);
}

Node Tree::find_compatible(const char* compat, Node after) const {
  if (!valid()) return kNoNode;
  uint32_t off = after < 0 ? static_cast<uint32_t>(root_) : skip(static_cast<uint32_t>(after));
  for (;;) {
    uint32_t tok = token(off);
    if (tok == kEnd) return kNoNode;
    if (tok == kBeginNode && is_compatible(static_cast<Node>(off), compat)) return static_cast<Node>(off);
    off = skip(off);
  }
}

Node Tree::find_device_type(const char* type, Node after) const {
  if (!valid()) return kNoNode;
  uint32_t off = after < 0 ? static_cast<uint32_t>(root_) : skip(static_cast<uint32_t>(after));
  uint32_t tlen = 0;
  while (type[tlen]) tlen++;
  for (;;) {
    uint32_t tok = token(off);
    if (tok == kEnd) return kNoNode;
    if (tok == kBeginNode) {
      Node n = static_cast<Node>(off);
      Property p;
      const char* dt = prop(n, "device_type", p) ? p.str() : nullptr;
      if ((dt && str_eq(dt, type)) || name_matches(name(n), type, tlen)) return n;
    }
    off = skip(off);
  }
}

Node Tree::find_phandle(uint32_t phandle) const {
  if (!valid() || phandle == 0 || phandle == 0xffffffff) return kNoNode;
  uint32_t off = static_cast<uint32_t>(root_);
  for (;;) {
    uint32_t tok = token(off);
    if (tok == kEnd) return kNoNode;
    if (tok == kBeginNode) {
      Property p;
      Node n = static_cast<Node>(off);
      if ((prop(n, "phandle", p) || prop(n, "linux,phandle", p)) && p.len == 4 && p.u32() == phandle) return n;
    }
    off = skip(off);
  }
}

uint32_t Tree::address_cells(Node n) const {
  Property p;
  return prop(n, "#address-cells", p) && p.len == 4 ? p.u32() : 2;
}

uint32_t Tree::size_cells(Node n) const {
  Property p;
  return prop(n, "#size-cells", p) && p.len == 4 ? p.u32() : 1;
}

bool Tree::reg(Node n, uint32_t i, uint64_t& base, uint64_t& size) const {
  Node par = parent(n);
  if (par == kNoNode) return false;
  uint32_t ac = address_cells(par), sc = size_cells(par);
  if (ac > 2 || sc > 2 || ac == 0) return false;
  Property p;
  if (!prop(n, "reg", p)) return false;
  uint32_t stride = ac + sc;
  if ((uint64_t{i} + 1) * stride * 4 > p.len) return false;  // also keeps i * stride from wrapping
  if (!p.cells(i * stride, ac, base) || !p.cells(i * stride + ac, sc, size)) return false;
  return translate(par, base);
}

// Up the tree through each bus's "ranges" (child address, parent address,
// size; the cell counts of the bus, of its parent, of the bus): an empty
// "ranges" maps 1:1, an address no entry covers is not reachable from the
// CPU. A bus without "ranges" ends the walk where it is (reg read as it
// stands, which DTBs without bus translation rely on). The Pi's /soc maps
// bus addresses 0x7e000000.. to CPU addresses 0x3f000000..
bool Tree::translate(Node bus, uint64_t& addr) const {
  for (unsigned depth = 0; depth < 16; depth++) {
    Node up = parent(bus);
    if (up == kNoNode) return true;  // the root's children: CPU addresses
    Property r;
    if (!prop(bus, "ranges", r)) return true;
    if (r.len == 0) {
      bus = up;
      continue;
    }
    uint32_t cac = address_cells(bus), pac = address_cells(up), csc = size_cells(bus);
    if (cac == 0 || cac > 2 || pac == 0 || pac > 2 || csc > 2) return false;
    uint32_t stride = cac + pac + csc;
    bool found = false;
    for (uint32_t e = 0; (e + 1) * stride * 4 <= r.len; e++) {
      uint64_t child, parent_addr, size;
      if (!r.cells(e * stride, cac, child) || !r.cells(e * stride + cac, pac, parent_addr) ||
          !r.cells(e * stride + cac + pac, csc, size))
        return false;
      if (addr >= child && addr - child < size) {
        addr = parent_addr + (addr - child);
        found = true;
        break;
      }
    }
    if (!found) return false;
    bus = up;
  }
  return false;  // deeper than any real tree: a loop in a corrupt blob
}

bool Tree::memreserve(uint32_t i, uint64_t& base, uint64_t& size) const {
  if (!valid() || i >= nreserve_) return false;
  base = be64(rsvmap_ + 16 * i);
  size = be64(rsvmap_ + 16 * i + 8);
  return true;
}

}  // namespace fdt
