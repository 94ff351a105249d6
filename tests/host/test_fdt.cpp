// SPDX-License-Identifier: Apache-2.0
// Tests of the flattened device tree reader (kernel/lib/fdt.cpp).
//
//   - Trees made by a small builder below (header, memory reservation map,
//     structure and strings blocks, big-endian), so each malformation can be
//     made precisely and must give its own fdt::Error.
//   - The device trees QEMU passes to the kernel on each supported board
//     (tests/host/data/*.dtb), checked for the values the kernel relies on.
//   - Robustness: every truncation and every single-byte flip of the real
//     trees, plus seeded random corruption. Each case is copied into a heap
//     buffer of exactly the size the reader is told, so AddressSanitizer
//     catches any read beyond it; whenever open() accepts a blob, the whole
//     tree is walked through the public accessors.
#include <kernel/fdt.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef MAGPIE_TEST_DATA_DIR
#error "MAGPIE_TEST_DATA_DIR must name tests/host/data"
#endif

namespace fdt {
// Lets GoogleTest print an Error by name.
void PrintTo(Error e, std::ostream* os) { *os << "fdt::Error(" << int(e) << ", " << error_name(e) << ")"; }
}  // namespace fdt

namespace {

using fdt::Error;
using fdt::kNoNode;
using fdt::Node;

constexpr uint32_t kFdtMagic = 0xd00dfeed;
constexpr uint32_t kBeginNode = 1, kEndNode = 2, kProp = 3, kNop = 4, kEnd = 9;

// Header fields: byte offsets of the big-endian words.
enum HeaderField : size_t {
  kMagicField = 0,
  kTotalSize = 4,
  kOffStruct = 8,
  kOffStrings = 12,
  kOffRsvmap = 16,
  kVersion = 20,
  kLastCompVersion = 24,
  kBootCpuid = 28,
  kSizeStrings = 32,
  kSizeStruct = 36,
};
constexpr size_t kHeaderSize = 40;

uint32_t get_be32(const std::vector<uint8_t>& b, size_t off) { return fdt::be32(b.data() + off); }

void set_be32(std::vector<uint8_t>& b, size_t off, uint32_t v) {
  b.at(off + 3);  // bounds check
  b[off] = uint8_t(v >> 24);
  b[off + 1] = uint8_t(v >> 16);
  b[off + 2] = uint8_t(v >> 8);
  b[off + 3] = uint8_t(v);
}

void append_be32(std::vector<uint8_t>& b, uint32_t v) {
  b.resize(b.size() + 4);
  set_be32(b, b.size() - 4, v);
}

void append_be64(std::vector<uint8_t>& b, uint64_t v) {
  append_be32(b, uint32_t(v >> 32));
  append_be32(b, uint32_t(v));
}

void pad4(std::vector<uint8_t>& b) {
  while (b.size() % 4) b.push_back(0);
}

// A built device tree and where its blocks are, for precise corruption.
struct Blob {
  std::vector<uint8_t> bytes;
  uint32_t off_rsvmap = 0, off_struct = 0, off_strings = 0;

  uint32_t header(HeaderField f) const { return get_be32(bytes, f); }
  void set_header(HeaderField f, uint32_t v) { set_be32(bytes, f, v); }
  // Overwrites the word at offset `off` of the structure block.
  void set_struct_word(uint32_t off, uint32_t v) { set_be32(bytes, off_struct + off, v); }
};

// Writes a flattened device tree. begin()/prop()/end() append tokens to the
// structure block as written (no checking: the point is to make bad trees
// too); build() lays out header, reservation map, structure block (with a
// final FDT_END unless told not to) and strings block.
class FdtBuilder {
 public:
  struct Options {
    uint32_t version = 17;
    uint32_t last_comp_version = 16;
    bool end_token = true;     // append FDT_END to the structure block
    bool rsvmap_last = false;  // reservation map after the strings block
    uint32_t padding = 0;      // unused bytes at the end of the blob
  };

  FdtBuilder& reserve(uint64_t base, uint64_t size) {
    rsv_.emplace_back(base, size);
    return *this;
  }
  FdtBuilder& begin(std::string_view name) {
    append_be32(struct_, kBeginNode);
    struct_.insert(struct_.end(), name.begin(), name.end());
    struct_.push_back(0);
    pad4(struct_);
    return *this;
  }
  FdtBuilder& end() { return word(kEndNode); }
  FdtBuilder& nop() { return word(kNop); }
  FdtBuilder& word(uint32_t w) {
    append_be32(struct_, w);
    return *this;
  }
  // Raw bytes in the structure block, not padded.
  FdtBuilder& raw(std::string_view bytes) {
    struct_.insert(struct_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  FdtBuilder& prop(std::string_view name, const void* data, size_t len) {
    append_be32(struct_, kProp);
    append_be32(struct_, uint32_t(len));
    append_be32(struct_, string(name));
    auto* p = static_cast<const uint8_t*>(data);
    struct_.insert(struct_.end(), p, p + len);
    pad4(struct_);
    return *this;
  }
  FdtBuilder& prop_empty(std::string_view name) { return prop(name, nullptr, 0); }
  FdtBuilder& prop_cells(std::string_view name, std::initializer_list<uint32_t> cells) {
    std::vector<uint8_t> d;
    for (uint32_t c : cells) append_be32(d, c);
    return prop(name, d.data(), d.size());
  }
  // A string list: each string NUL-terminated.
  FdtBuilder& prop_str(std::string_view name, std::initializer_list<std::string_view> strs) {
    std::string d;
    for (auto s : strs) {
      d.append(s);
      d.push_back('\0');
    }
    return prop(name, d.data(), d.size());
  }
  // A property header with any length and name offset, then `data` bytes.
  FdtBuilder& prop_header(uint32_t len, uint32_t nameoff, size_t data = 0) {
    append_be32(struct_, kProp);
    append_be32(struct_, len);
    append_be32(struct_, nameoff);
    struct_.resize(struct_.size() + data);
    pad4(struct_);
    return *this;
  }

  // Offset of a name in the strings block (added once).
  uint32_t string(std::string_view s) {
    std::string_view all(strings_.data(), strings_.size());
    for (size_t off = 0; off < all.size(); off += std::strlen(all.data() + off) + 1) {
      if (all.substr(off, s.size()) == s && off + s.size() < all.size() && all[off + s.size()] == 0)
        return uint32_t(off);
    }
    uint32_t off = uint32_t(strings_.size());
    strings_.insert(strings_.end(), s.begin(), s.end());
    strings_.push_back(0);
    return off;
  }
  // The structure-block offset the next token gets (a Node, for begin()).
  Node here() const { return Node(struct_.size()); }

  Blob build(const Options& o) const {
    Blob blob;
    std::vector<uint8_t>& b = blob.bytes;
    b.resize(kHeaderSize);
    auto put_rsvmap = [&] {
      while (b.size() % 8) b.push_back(0);
      blob.off_rsvmap = uint32_t(b.size());
      for (auto [base, size] : rsv_) {
        append_be64(b, base);
        append_be64(b, size);
      }
      append_be64(b, 0);
      append_be64(b, 0);
    };
    if (!o.rsvmap_last) put_rsvmap();
    pad4(b);
    blob.off_struct = uint32_t(b.size());
    b.insert(b.end(), struct_.begin(), struct_.end());
    if (o.end_token) append_be32(b, kEnd);
    uint32_t size_struct = uint32_t(b.size()) - blob.off_struct;
    pad4(b);
    blob.off_strings = uint32_t(b.size());
    b.insert(b.end(), strings_.begin(), strings_.end());
    if (o.rsvmap_last) put_rsvmap();
    b.resize(b.size() + o.padding);

    blob.set_header(kMagicField, kFdtMagic);
    blob.set_header(kTotalSize, uint32_t(b.size()));
    blob.set_header(kOffStruct, blob.off_struct);
    blob.set_header(kOffStrings, blob.off_strings);
    blob.set_header(kOffRsvmap, blob.off_rsvmap);
    blob.set_header(kVersion, o.version);
    blob.set_header(kLastCompVersion, o.last_comp_version);
    blob.set_header(kBootCpuid, 0);
    blob.set_header(kSizeStrings, uint32_t(strings_.size()));
    blob.set_header(kSizeStruct, size_struct);
    return blob;
  }
  Blob build() const { return build(Options{}); }

 private:
  std::vector<uint8_t> struct_;
  std::vector<char> strings_;
  std::vector<std::pair<uint64_t, uint64_t>> rsv_;
};

// A copy of bytes in a heap block of exactly `size` bytes (even 0), so that
// AddressSanitizer reports any read past what the reader was given.
class ExactBuffer {
 public:
  ExactBuffer(const uint8_t* src, size_t size) : size_(size), data_(new uint8_t[size]) {
    if (size) std::memcpy(data_.get(), src, size);
  }
  explicit ExactBuffer(const std::vector<uint8_t>& v) : ExactBuffer(v.data(), v.size()) {}
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  size_t size_;
  std::unique_ptr<uint8_t[]> data_;
};

// An opened tree together with the buffer it reads.
struct Opened {
  ExactBuffer buf;
  fdt::Tree tree;
  Error err;

  explicit Opened(const std::vector<uint8_t>& bytes) : Opened(bytes.data(), bytes.size()) {}
  Opened(const uint8_t* bytes, size_t size) : buf(bytes, size) { err = tree.open(buf.data(), buf.size()); }
};

Error open_error(const std::vector<uint8_t>& bytes) { return Opened(bytes).err; }

// --- Walking a whole tree through the public API ---------------------------

struct WalkStats {
  size_t nodes = 0;
  size_t props = 0;
  uint32_t checksum = 0;
};

// Visits every node (first_child/next_sibling) and every property
// (next_prop), and calls parent(), reg(), find_compatible(), find_phandle(),
// find(), find_device_type() and memreserve() along the way. The checks made
// hold for any tree open() accepts; with `paths`, also that find() of each
// node's path finds it (true when no two siblings share a name).
WalkStats walk_tree(const fdt::Tree& t, bool paths) {
  WalkStats st;
  EXPECT_TRUE(t.valid());
  struct Item {
    Node node;
    Node parent;
    std::string path;
  };
  std::vector<Item> todo{{t.root(), kNoNode, "/"}};
  EXPECT_NE(t.root(), kNoNode);
  while (!todo.empty()) {
    Item it = std::move(todo.back());
    todo.pop_back();
    const Node n = it.node;
    st.nodes++;
    if (st.nodes > t.total_size()) {
      ADD_FAILURE() << "more nodes than bytes: a walk loops";
      return st;
    }

    const char* name = t.name(n);
    size_t name_len = std::strlen(name);
    for (size_t i = 0; i < name_len; i++) st.checksum += uint8_t(name[i]);
    EXPECT_EQ(t.parent(n), it.parent) << "node at " << n;
    Node by_path = t.find(it.path.c_str());
    if (paths) {
      EXPECT_EQ(by_path, n) << it.path;
    }

    // Every property.
    uint32_t cursor = 0, last_cursor = 0;
    fdt::Property p;
    while (t.next_prop(n, cursor, p)) {
      st.props++;
      if (cursor <= last_cursor) {
        ADD_FAILURE() << "next_prop did not advance";
        break;
      }
      last_cursor = cursor;
      for (const char* c = p.name; *c; c++) st.checksum += uint8_t(*c);
      for (uint32_t i = 0; i < p.len; i++) st.checksum += p.data[i];
      // Including indexes just out of range (and, for len < 4, 0xffffffff).
      st.checksum += p.u32(0) + p.u32(p.len / 4) + p.u32(p.len / 4 - 1);
      uint64_t v = 0;
      if (p.cells(0, 2, v)) st.checksum += uint32_t(v);
      if (const char* s = p.str()) st.checksum += uint32_t(std::strlen(s));
      st.checksum += p.has_string("okay");
      fdt::Property again;
      EXPECT_TRUE(t.prop(n, p.name, again));  // finds this or an earlier one of that name
      if (p.len == 4 && (std::strcmp(p.name, "phandle") == 0 || std::strcmp(p.name, "interrupt-parent") == 0)) {
        Node target = t.find_phandle(p.u32());
        if (target != kNoNode) st.checksum += uint32_t(target);
      }
    }

    // compatible: the first string finds this node or an earlier one.
    fdt::Property compat;
    if (t.prop(n, "compatible", compat) && compat.str()) {
      const char* first = compat.str();
      EXPECT_TRUE(t.is_compatible(n, first));
      Node found = t.find_compatible(first);
      EXPECT_NE(found, kNoNode);
      EXPECT_LE(found, n);
      Node later = t.find_compatible(first, n);
      EXPECT_TRUE(later == kNoNode || later > n);
    }
    fdt::Property ph;
    if (t.prop(n, "phandle", ph) && ph.len == 4 && ph.u32() != 0 && ph.u32() != 0xffffffff) {
      Node found = t.find_phandle(ph.u32());
      EXPECT_NE(found, kNoNode);
      EXPECT_LE(found, n);
    }

    st.checksum += t.address_cells(n) + t.size_cells(n);
    for (uint32_t i = 0; i < 64; i++) {
      uint64_t base = 0, size = 0;
      if (!t.reg(n, i, base, size)) break;
      st.checksum += uint32_t(base) + uint32_t(size);
    }

    // Children, in document order, after their parent.
    std::vector<Item> kids;
    Node prev = n;
    for (Node c = t.first_child(n); c != kNoNode; c = t.next_sibling(c)) {
      if (c <= prev) {
        ADD_FAILURE() << "child offsets not increasing";
        break;
      }
      prev = c;
      std::string cp = it.path == "/" ? "/" : it.path + "/";
      kids.push_back({c, n, cp + t.name(c)});
    }
    for (auto k = kids.rbegin(); k != kids.rend(); ++k) todo.push_back(std::move(*k));
  }

  // Whole-tree lookups.
  for (const char* type : {"memory", "cpu"}) {
    Node prev = kNoNode;
    for (Node d = t.find_device_type(type); d != kNoNode; d = t.find_device_type(type, d)) {
      if (d <= prev) {
        ADD_FAILURE() << "find_device_type did not advance";
        break;
      }
      prev = d;
    }
  }
  for (const char* path : {"/chosen", "/cpus/cpu@0", "/cpus/cpu", "/memory", "/soc/serial"})
    st.checksum += uint32_t(t.find(path));
  for (uint32_t i = 0; i < t.memreserve_count(); i++) {
    uint64_t base = 0, size = 0;
    EXPECT_TRUE(t.memreserve(i, base, size));
    st.checksum += uint32_t(base ^ size);
  }
  uint64_t base, size;
  EXPECT_FALSE(t.memreserve(t.memreserve_count(), base, size));
  return st;
}

// --- A sample tree used by the accessor tests ------------------------------

struct Sample {
  Blob blob;
  Node root, chosen, memory, cpus, cpu0, cpu1, soc, uart0, intc, uart1, legacy, empty;
};

Sample make_sample(const FdtBuilder::Options& opts = {}) {
  Sample s;
  FdtBuilder b;
  b.reserve(0x80000000, 0x200000).reserve(0x1'0000'0000ull, 0x1000);
  b.nop();  // NOPs are allowed anywhere
  s.root = b.here();
  b.begin("")
      .prop_cells("#address-cells", {2})
      .prop_cells("#size-cells", {2})
      .nop()
      .prop_str("compatible", {"magpie,test", "magpie,base"})
      .prop_str("model", {"Magpie test board"});
  s.chosen = b.here();
  b.begin("chosen").prop_str("bootargs", {"console=ttyS0 quiet"}).prop_str("stdout-path", {"/soc/uart@9000000"}).end();
  s.memory = b.here();
  b.begin("memory@80000000")
      .prop_str("device_type", {"memory"})
      .prop_cells("reg", {0x0, 0x80000000, 0x0, 0x10000000, 0x1, 0x0, 0x0, 0x8000000})
      .end();
  s.cpus = b.here();
  b.begin("cpus").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {0});
  s.cpu0 = b.here();
  b.begin("cpu@0")
      .prop_str("device_type", {"cpu"})
      .prop_cells("reg", {0})
      .prop_str("compatible", {"arm,cortex-a53"})
      .end();
  b.nop();
  s.cpu1 = b.here();
  b.begin("cpu@1")
      .prop_str("device_type", {"cpu"})
      .prop_cells("reg", {1})
      .prop_str("compatible", {"arm,cortex-a53"})
      .end();
  b.end();  // cpus
  s.soc = b.here();
  b.begin("soc").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {1}).prop_empty("ranges");
  s.uart0 = b.here();
  b.begin("uart@9000000")
      .prop_str("compatible", {"arm,pl011", "arm,primecell"})
      .prop_cells("reg", {0x9000000, 0x1000})
      .prop_cells("interrupt-parent", {1})
      .end();
  s.intc = b.here();
  b.begin("intc@8000000")
      .prop_cells("phandle", {1})
      .prop_str("compatible", {"arm,gic-400"})
      .prop_cells("reg", {0x8000000, 0x10000, 0x8010000, 0x10000})
      .prop_empty("interrupt-controller")
      .end();
  s.uart1 = b.here();
  b.begin("uart@9001000").prop_str("compatible", {"arm,pl011"}).prop_cells("reg", {0x9001000, 0x1000}).end();
  s.legacy = b.here();
  b.begin("legacy").prop_cells("linux,phandle", {2}).prop_cells("#address-cells", {0}).end();
  b.end();  // soc
  s.empty = b.here();
  b.begin("empty").end();
  b.end();  // root
  b.nop();
  s.blob = b.build(opts);
  return s;
}

// The smallest interesting tree: / { compatible; child { reg; }; }.
FdtBuilder minimal() {
  FdtBuilder b;
  b.begin("").prop_str("compatible", {"x"}).begin("child").prop_cells("reg", {1, 2}).end().end();
  return b;
}

// --- Builder sanity --------------------------------------------------------

TEST(FdtBuilder, MakesAValidHeader) {
  Blob blob = make_sample().blob;
  EXPECT_EQ(blob.header(kMagicField), kFdtMagic);
  EXPECT_EQ(blob.header(kTotalSize), blob.bytes.size());
  EXPECT_EQ(blob.header(kOffRsvmap) % 8, 0u);
  EXPECT_EQ(blob.header(kOffStruct) % 4, 0u);
  EXPECT_EQ(blob.header(kOffStrings), blob.off_strings);
  EXPECT_EQ(get_be32(blob.bytes, blob.off_struct), kNop);
  EXPECT_EQ(get_be32(blob.bytes, blob.off_struct + blob.header(kSizeStruct) - 4), kEnd);
}

// --- Accessors on a built tree ---------------------------------------------

TEST(Fdt, OpensAWellFormedTree) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_TRUE(t.valid());
  EXPECT_EQ(t.blob(), o.buf.data());
  EXPECT_EQ(t.total_size(), s.blob.bytes.size());
  EXPECT_EQ(t.root(), s.root);
  EXPECT_STREQ(t.name(t.root()), "");
  WalkStats st = walk_tree(t, true);
  EXPECT_EQ(st.nodes, 12u);
  EXPECT_EQ(st.props, 30u);
}

TEST(Fdt, ChildrenAndSiblings) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  std::vector<Node> kids;
  for (Node c = t.first_child(t.root()); c != kNoNode; c = t.next_sibling(c)) kids.push_back(c);
  EXPECT_EQ(kids, (std::vector<Node>{s.chosen, s.memory, s.cpus, s.soc, s.empty}));
  EXPECT_EQ(t.first_child(s.cpus), s.cpu0);
  EXPECT_EQ(t.next_sibling(s.cpu0), s.cpu1);  // across a NOP
  EXPECT_EQ(t.next_sibling(s.cpu1), kNoNode);
  EXPECT_EQ(t.first_child(s.empty), kNoNode);
  EXPECT_EQ(t.first_child(s.chosen), kNoNode);
  EXPECT_EQ(t.next_sibling(s.empty), kNoNode);
  EXPECT_EQ(t.next_sibling(t.root()), kNoNode);
  EXPECT_EQ(t.first_child(kNoNode), kNoNode);
  EXPECT_EQ(t.next_sibling(kNoNode), kNoNode);
  EXPECT_STREQ(t.name(s.uart0), "uart@9000000");
  EXPECT_STREQ(t.name(s.empty), "empty");
  EXPECT_STREQ(t.name(kNoNode), "");
}

TEST(Fdt, Parent) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_EQ(t.parent(t.root()), kNoNode);
  EXPECT_EQ(t.parent(kNoNode), kNoNode);
  EXPECT_EQ(t.parent(s.chosen), s.root);
  EXPECT_EQ(t.parent(s.cpus), s.root);
  EXPECT_EQ(t.parent(s.cpu0), s.cpus);
  EXPECT_EQ(t.parent(s.cpu1), s.cpus);
  EXPECT_EQ(t.parent(s.uart1), s.soc);
  EXPECT_EQ(t.parent(s.legacy), s.soc);
  EXPECT_EQ(t.parent(s.empty), s.root);
  // Not a node offset: no parent, no fault.
  EXPECT_EQ(t.parent(s.cpu0 + 4), kNoNode);
  EXPECT_EQ(t.parent(Node(t.total_size()) * 2), kNoNode);
}

TEST(Fdt, Find) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_EQ(t.find("/"), s.root);
  EXPECT_EQ(t.find("/chosen"), s.chosen);
  EXPECT_EQ(t.find("/memory@80000000"), s.memory);
  EXPECT_EQ(t.find("/memory"), s.memory);  // without the unit address
  EXPECT_EQ(t.find("/cpus/cpu@1"), s.cpu1);
  EXPECT_EQ(t.find("/cpus/cpu"), s.cpu0);  // the first match
  EXPECT_EQ(t.find("/soc/uart@9001000"), s.uart1);
  EXPECT_EQ(t.find("/soc/uart@9000000"), s.uart0);
  EXPECT_EQ(t.find("/soc/uart@9"), kNoNode);  // a unit address must match exactly
  EXPECT_EQ(t.find("/soc/uart@90000000"), kNoNode);
  EXPECT_EQ(t.find("/soc/legacy"), s.legacy);
  EXPECT_EQ(t.find("/cpus/"), s.cpus);
  EXPECT_EQ(t.find("//cpus"), s.cpus);
  EXPECT_EQ(t.find("/cpu"), kNoNode);  // "cpus" is not "cpu"
  EXPECT_EQ(t.find("/cpus/cpu@0/more"), kNoNode);
  EXPECT_EQ(t.find("/nonexistent"), kNoNode);
  EXPECT_EQ(t.find("/chosenx"), kNoNode);
  EXPECT_EQ(t.find("chosen"), kNoNode);  // must be absolute
  EXPECT_EQ(t.find(""), kNoNode);
  EXPECT_EQ(t.find(nullptr), kNoNode);
}

TEST(Fdt, Properties) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;

  // Root properties in order, skipping the NOP between them.
  std::vector<std::string> names;
  uint32_t cursor = 0;
  fdt::Property p;
  while (t.next_prop(t.root(), cursor, p)) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"#address-cells", "#size-cells", "compatible", "model"}));
  cursor = 0;
  EXPECT_FALSE(t.next_prop(s.empty, cursor, p));
  cursor = 0;
  EXPECT_FALSE(t.next_prop(kNoNode, cursor, p));

  ASSERT_TRUE(t.prop(s.chosen, "bootargs", p));
  EXPECT_STREQ(p.str(), "console=ttyS0 quiet");
  EXPECT_EQ(p.len, sizeof("console=ttyS0 quiet"));
  EXPECT_FALSE(t.prop(s.chosen, "bootarg", p));
  EXPECT_FALSE(t.prop(s.chosen, "bootargsx", p));
  ASSERT_TRUE(t.prop(s.soc, "ranges", p));
  EXPECT_EQ(p.len, 0u);
  EXPECT_EQ(p.str(), nullptr);
  EXPECT_EQ(p.u32(), 0u);
  // A node's properties do not include its children's.
  EXPECT_FALSE(t.prop(s.cpus, "device_type", p));
  EXPECT_FALSE(t.prop(t.root(), "bootargs", p));

  ASSERT_TRUE(t.prop(s.intc, "reg", p));
  EXPECT_EQ(p.len, 16u);
  EXPECT_EQ(p.u32(0), 0x8000000u);
  EXPECT_EQ(p.u32(3), 0x10000u);
  EXPECT_EQ(p.u32(4), 0u);
  uint64_t v = 0;
  EXPECT_TRUE(p.cells(0, 2, v));
  EXPECT_EQ(v, 0x0800000000010000ull);
  EXPECT_TRUE(p.cells(2, 1, v));
  EXPECT_EQ(v, 0x8010000u);
  EXPECT_TRUE(p.cells(2, 2, v));
  EXPECT_FALSE(p.cells(3, 2, v));
  EXPECT_FALSE(p.cells(4, 1, v));
  EXPECT_FALSE(p.cells(0, 3, v));
  EXPECT_TRUE(p.cells(9, 0, v));
  EXPECT_EQ(v, 0u);

  ASSERT_TRUE(t.prop(s.uart0, "compatible", p));
  EXPECT_STREQ(p.str(), "arm,pl011");
  EXPECT_TRUE(p.has_string("arm,pl011"));
  EXPECT_TRUE(p.has_string("arm,primecell"));
  EXPECT_FALSE(p.has_string("arm,pl01"));
  EXPECT_FALSE(p.has_string("arm,pl0111"));
  EXPECT_FALSE(p.has_string(""));
}

TEST(Fdt, PropertyValueHelpers) {
  const uint8_t list[] = {'a', 0, 'b', 'c', 0, 0, 'd', 0};
  fdt::Property p{"x", list, sizeof list};
  EXPECT_TRUE(p.has_string("a"));
  EXPECT_TRUE(p.has_string("bc"));
  EXPECT_TRUE(p.has_string(""));  // the empty string in the list
  EXPECT_TRUE(p.has_string("d"));
  EXPECT_FALSE(p.has_string("b"));
  EXPECT_STREQ(p.str(), "a");

  const uint8_t unterminated[] = {'a', 0, 'b', 'c'};
  fdt::Property q{"x", unterminated, sizeof unterminated};
  EXPECT_TRUE(q.has_string("a"));
  EXPECT_FALSE(q.has_string("bc"));  // an unterminated tail never matches
  EXPECT_EQ(q.str(), nullptr);

  fdt::Property empty{"x", list, 0};
  EXPECT_FALSE(empty.has_string(""));
  EXPECT_EQ(empty.str(), nullptr);

  // Indexes far out of range give "absent", never a read elsewhere.
  const uint8_t cells[8] = {0, 0, 0, 1, 0, 0, 0, 2};
  fdt::Property c{"reg", cells, sizeof cells};
  EXPECT_EQ(c.u32(0), 1u);
  EXPECT_EQ(c.u32(1), 2u);
  EXPECT_EQ(c.u32(2), 0u);
  for (uint32_t i : {0x3fffffffu, 0x40000000u, 0x40000001u, 0x7fffffffu, 0xbfffffffu, 0xfffffffeu, 0xffffffffu}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(c.u32(i), 0u);
    uint64_t v = 0;
    EXPECT_FALSE(c.cells(i, 1, v));
    EXPECT_FALSE(c.cells(i, 2, v));
  }
}

TEST(Fdt, Compatible) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_TRUE(t.is_compatible(s.uart0, "arm,pl011"));
  EXPECT_TRUE(t.is_compatible(s.uart0, "arm,primecell"));
  EXPECT_FALSE(t.is_compatible(s.uart0, "arm,gic-400"));
  EXPECT_FALSE(t.is_compatible(s.empty, "arm,pl011"));
  EXPECT_TRUE(t.is_compatible(t.root(), "magpie,base"));

  EXPECT_EQ(t.find_compatible("magpie,test"), s.root);
  EXPECT_EQ(t.find_compatible("arm,pl011"), s.uart0);
  EXPECT_EQ(t.find_compatible("arm,pl011", s.uart0), s.uart1);
  EXPECT_EQ(t.find_compatible("arm,pl011", s.uart1), kNoNode);
  EXPECT_EQ(t.find_compatible("arm,primecell"), s.uart0);
  EXPECT_EQ(t.find_compatible("arm,cortex-a53"), s.cpu0);
  EXPECT_EQ(t.find_compatible("arm,cortex-a53", s.cpu0), s.cpu1);
  EXPECT_EQ(t.find_compatible("arm,cortex-a53", s.cpus), s.cpu0);  // searches inside `after` too
  EXPECT_EQ(t.find_compatible("arm,pl01"), kNoNode);
  EXPECT_EQ(t.find_compatible("nothing"), kNoNode);
}

TEST(Fdt, Phandles) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  fdt::Property ip;
  ASSERT_TRUE(t.prop(s.uart0, "interrupt-parent", ip));
  EXPECT_EQ(t.find_phandle(ip.u32()), s.intc);
  EXPECT_EQ(t.find_phandle(2), s.legacy);  // linux,phandle
  EXPECT_EQ(t.find_phandle(3), kNoNode);
  EXPECT_EQ(t.find_phandle(0), kNoNode);
  EXPECT_EQ(t.find_phandle(0xffffffff), kNoNode);
}

TEST(Fdt, DeviceType) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_EQ(t.find_device_type("memory"), s.memory);
  EXPECT_EQ(t.find_device_type("memory", s.memory), kNoNode);
  EXPECT_EQ(t.find_device_type("cpu"), s.cpu0);
  EXPECT_EQ(t.find_device_type("cpu", s.cpu0), s.cpu1);
  EXPECT_EQ(t.find_device_type("cpu", s.cpu1), kNoNode);
  EXPECT_EQ(t.find_device_type("uart"), s.uart0);  // by name prefix
  EXPECT_EQ(t.find_device_type("uart", s.uart0), s.uart1);
  EXPECT_EQ(t.find_device_type("serial"), kNoNode);
}

TEST(Fdt, CellsAndReg) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_EQ(t.address_cells(t.root()), 2u);
  EXPECT_EQ(t.size_cells(t.root()), 2u);
  EXPECT_EQ(t.address_cells(s.cpus), 1u);
  EXPECT_EQ(t.size_cells(s.cpus), 0u);
  EXPECT_EQ(t.address_cells(s.empty), 2u);  // the defaults
  EXPECT_EQ(t.size_cells(s.empty), 1u);

  uint64_t base = 0, size = 0;
  ASSERT_TRUE(t.reg(s.memory, 0, base, size));
  EXPECT_EQ(base, 0x80000000u);
  EXPECT_EQ(size, 0x10000000u);
  ASSERT_TRUE(t.reg(s.memory, 1, base, size));
  EXPECT_EQ(base, 0x100000000u);
  EXPECT_EQ(size, 0x8000000u);
  EXPECT_FALSE(t.reg(s.memory, 2, base, size));

  ASSERT_TRUE(t.reg(s.cpu1, 0, base, size));
  EXPECT_EQ(base, 1u);
  EXPECT_EQ(size, 0u);
  EXPECT_FALSE(t.reg(s.cpu1, 1, base, size));

  ASSERT_TRUE(t.reg(s.uart0, 0, base, size));
  EXPECT_EQ(base, 0x9000000u);
  EXPECT_EQ(size, 0x1000u);
  ASSERT_TRUE(t.reg(s.intc, 1, base, size));
  EXPECT_EQ(base, 0x8010000u);
  EXPECT_EQ(size, 0x10000u);

  EXPECT_FALSE(t.reg(t.root(), 0, base, size));  // no parent
  EXPECT_FALSE(t.reg(s.chosen, 0, base, size));  // no reg
  EXPECT_FALSE(t.reg(kNoNode, 0, base, size));
  // Far out of range: false, not a wrapped-around index.
  for (uint32_t i : {0x20000000u, 0x40000000u, 0x80000000u, 0xffffffffu}) {
    SCOPED_TRACE(i);
    EXPECT_FALSE(t.reg(s.memory, i, base, size));
    EXPECT_FALSE(t.reg(s.uart0, i, base, size));
    EXPECT_FALSE(t.reg(s.cpu0, i, base, size));
  }
}

TEST(Fdt, RegRejectsUnusableCellCounts) {
  for (uint32_t ac : {0u, 3u, 0xffffffffu}) {
    SCOPED_TRACE(ac);
    FdtBuilder b;
    b.begin("").prop_cells("#address-cells", {ac}).prop_cells("#size-cells", {1});
    Node dev = b.here();
    b.begin("dev").prop_cells("reg", {1, 2, 3, 4, 5, 6, 7, 8}).end().end();
    Opened o(b.build().bytes);
    ASSERT_EQ(o.err, Error::kOk);
    uint64_t base, size;
    EXPECT_FALSE(o.tree.reg(dev, 0, base, size));
  }
  FdtBuilder b;
  b.begin("").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {3});
  Node dev = b.here();
  b.begin("dev").prop_cells("reg", {1, 2, 3, 4, 5, 6, 7, 8}).end().end();
  Opened o(b.build().bytes);
  ASSERT_EQ(o.err, Error::kOk);
  uint64_t base, size;
  EXPECT_FALSE(o.tree.reg(dev, 0, base, size));
}

// reg() translates through each bus's "ranges" as the Pi's /soc needs: bus
// addresses 0x7e000000.. are CPU addresses 0x3f000000..; an empty ranges is
// 1:1; an address no range covers is unreachable; a bus without ranges ends
// the walk (reg as it stands).
TEST(Fdt, RegTranslatesThroughRanges) {
  FdtBuilder b;
  b.begin("").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {1});
  b.begin("soc")
      .prop_cells("#address-cells", {1})
      .prop_cells("#size-cells", {1})
      .prop_cells("ranges", {0x7e000000, 0x3f000000, 0x1000000, 0x40000000, 0x40000000, 0x1000});
  Node uart = b.here();
  b.begin("serial@7e215040").prop_cells("reg", {0x7e215040, 0x40}).end();
  Node local = b.here();
  b.begin("local_intc@40000000").prop_cells("reg", {0x40000000, 0x100}).end();
  Node outside = b.here();
  b.begin("dev@50000000").prop_cells("reg", {0x50000000, 0x100}).end();
  b.begin("bus")
      .prop_cells("#address-cells", {1})
      .prop_cells("#size-cells", {1})
      .prop_cells("ranges", {0x0, 0x7e100000, 0x1000});
  Node nested = b.here();
  b.begin("dev@24").prop_cells("reg", {0x24, 0x4}).end();
  b.end();  // bus
  b.begin("flat").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {1}).prop_empty("ranges");
  Node flat = b.here();
  b.begin("dev@7e201000").prop_cells("reg", {0x7e201000, 0x1000}).end();
  b.end();  // flat
  b.begin("i2c").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {0});
  Node client = b.here();
  b.begin("sensor@48").prop_cells("reg", {0x48}).end();
  b.end();  // i2c
  b.end();  // soc
  b.end();
  Opened o(b.build().bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  uint64_t base = 0, size = 0;
  ASSERT_TRUE(t.reg(uart, 0, base, size));
  EXPECT_EQ(base, 0x3f215040u);
  EXPECT_EQ(size, 0x40u);
  ASSERT_TRUE(t.reg(local, 0, base, size));
  EXPECT_EQ(base, 0x40000000u);
  EXPECT_FALSE(t.reg(outside, 0, base, size));
  ASSERT_TRUE(t.reg(nested, 0, base, size));  // bus -> soc -> root
  EXPECT_EQ(base, 0x3f100024u);
  ASSERT_TRUE(t.reg(flat, 0, base, size));  // empty ranges, then soc's
  EXPECT_EQ(base, 0x3f201000u);
  ASSERT_TRUE(t.reg(client, 0, base, size));  // i2c has no ranges: as written
  EXPECT_EQ(base, 0x48u);
}

TEST(Fdt, MemoryReservations) {
  Sample s = make_sample();
  Opened o(s.blob.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  ASSERT_EQ(t.memreserve_count(), 2u);
  uint64_t base = 0, size = 0;
  ASSERT_TRUE(t.memreserve(0, base, size));
  EXPECT_EQ(base, 0x80000000u);
  EXPECT_EQ(size, 0x200000u);
  ASSERT_TRUE(t.memreserve(1, base, size));
  EXPECT_EQ(base, 0x100000000u);
  EXPECT_EQ(size, 0x1000u);
  EXPECT_FALSE(t.memreserve(2, base, size));
  EXPECT_FALSE(t.memreserve(0xffffffff, base, size));

  // The map may also come after the other blocks.
  FdtBuilder::Options last;
  last.rsvmap_last = true;
  Opened o2(make_sample(last).blob.bytes);
  ASSERT_EQ(o2.err, Error::kOk);
  EXPECT_EQ(o2.tree.memreserve_count(), 2u);
  ASSERT_TRUE(o2.tree.memreserve(1, base, size));
  EXPECT_EQ(base, 0x100000000u);

  // No reservations.
  Opened o3(minimal().build().bytes);
  ASSERT_EQ(o3.err, Error::kOk);
  EXPECT_EQ(o3.tree.memreserve_count(), 0u);
  EXPECT_FALSE(o3.tree.memreserve(0, base, size));
}

TEST(Fdt, AcceptedVariants) {
  // Smallest tree: an empty root.
  FdtBuilder b;
  b.begin("").end();
  Opened o(b.build().bytes);
  ASSERT_EQ(o.err, Error::kOk);
  EXPECT_EQ(o.tree.first_child(o.tree.root()), kNoNode);
  EXPECT_EQ(walk_tree(o.tree, true).nodes, 1u);

  // Version 16 has no size_dt_struct: the structure block runs to the end.
  FdtBuilder::Options v16;
  v16.version = 16;
  Blob blob = make_sample(v16).blob;
  blob.set_header(kSizeStruct, 0xdeadbeef);  // ignored
  Opened o16(blob.bytes);
  ASSERT_EQ(o16.err, Error::kOk);
  EXPECT_EQ(walk_tree(o16.tree, true).nodes, 12u);

  // A later version that stays compatible with 16/17.
  FdtBuilder::Options v20;
  v20.version = 20;
  v20.last_comp_version = 17;
  EXPECT_EQ(open_error(make_sample(v20).blob.bytes), Error::kOk);

  // Free space at the end, and more readable bytes than the tree needs.
  FdtBuilder::Options padded;
  padded.padding = 100;
  EXPECT_EQ(open_error(make_sample(padded).blob.bytes), Error::kOk);
  std::vector<uint8_t> more = make_sample().blob.bytes;
  more.resize(more.size() + 64, 0xa5);
  Opened om(more);
  ASSERT_EQ(om.err, Error::kOk);
  EXPECT_EQ(om.tree.total_size(), more.size() - 64);

  // A blob at an odd address (the reader must not assume alignment).
  std::vector<uint8_t> shifted(1, 0);
  Blob sample = make_sample().blob;
  shifted.insert(shifted.end(), sample.bytes.begin(), sample.bytes.end());
  ExactBuffer buf(shifted);
  fdt::Tree t;
  ASSERT_EQ(t.open(buf.data() + 1, buf.size() - 1), Error::kOk);
  EXPECT_EQ(walk_tree(t, true).nodes, 12u);
}

TEST(Fdt, DeepNesting) {
  // A chain deeper than any real tree, then a sibling back at the top.
  constexpr int kDepth = 100;
  FdtBuilder b;
  b.begin("").prop_cells("#address-cells", {1}).prop_cells("#size-cells", {1});
  std::vector<Node> chain;
  for (int i = 0; i < kDepth; i++) {
    chain.push_back(b.here());
    b.begin("n@" + std::to_string(i)).prop_cells("reg", {uint32_t(i), 1}).prop_cells("#address-cells", {1});
  }
  for (int i = 0; i < kDepth; i++) b.end();
  Node after = b.here();
  b.begin("after").prop_cells("reg", {0x1000, 0x10}).end();
  b.end();
  Opened o(b.build().bytes);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  EXPECT_EQ(t.parent(chain[0]), t.root());
  for (int i = 1; i < kDepth; i++) ASSERT_EQ(t.parent(chain[i]), chain[i - 1]) << "depth " << i;
  EXPECT_EQ(t.parent(after), t.root());
  uint64_t base = 0, size = 0;
  ASSERT_TRUE(t.reg(after, 0, base, size));
  EXPECT_EQ(base, 0x1000u);
  EXPECT_EQ(size, 0x10u);
  ASSERT_TRUE(t.reg(chain[kDepth - 1], 0, base, size));
  EXPECT_EQ(base, uint64_t(kDepth - 1));
  EXPECT_EQ(t.next_sibling(chain[0]), after);
  std::string path;
  for (int i = 0; i < kDepth; i++) path += "/n@" + std::to_string(i);
  EXPECT_EQ(t.find(path.c_str()), chain.back());
  EXPECT_EQ(walk_tree(t, true).nodes, size_t(kDepth + 2));
}

TEST(Fdt, UnopenedTreeIsEmpty) {
  fdt::Tree t;
  EXPECT_FALSE(t.valid());
  EXPECT_EQ(t.blob(), nullptr);
  EXPECT_EQ(t.root(), kNoNode);
  EXPECT_EQ(t.find("/"), kNoNode);
  EXPECT_EQ(t.first_child(0), kNoNode);
  EXPECT_EQ(t.next_sibling(0), kNoNode);
  EXPECT_EQ(t.parent(8), kNoNode);
  EXPECT_STREQ(t.name(0), "");
  fdt::Property p;
  EXPECT_FALSE(t.prop(0, "reg", p));
  uint32_t cursor = 0;
  EXPECT_FALSE(t.next_prop(0, cursor, p));
  EXPECT_FALSE(t.is_compatible(0, "x"));
  EXPECT_EQ(t.find_compatible("x"), kNoNode);
  EXPECT_EQ(t.find_phandle(1), kNoNode);
  EXPECT_EQ(t.find_device_type("memory"), kNoNode);
  uint64_t base, size;
  EXPECT_FALSE(t.reg(0, 0, base, size));
  EXPECT_EQ(t.memreserve_count(), 0u);
  EXPECT_FALSE(t.memreserve(0, base, size));
}

TEST(Fdt, FailedOpenForgetsThePreviousTree) {
  Sample s = make_sample();
  ExactBuffer good(s.blob.bytes);
  fdt::Tree t;
  ASSERT_EQ(t.open(good.data(), good.size()), Error::kOk);
  ASSERT_EQ(t.memreserve_count(), 2u);
  std::vector<uint8_t> bad = s.blob.bytes;
  set_be32(bad, kMagicField, 0);
  ExactBuffer badbuf(bad);
  EXPECT_EQ(t.open(badbuf.data(), badbuf.size()), Error::kBadMagic);
  EXPECT_FALSE(t.valid());
  EXPECT_EQ(t.blob(), nullptr);
  EXPECT_EQ(t.root(), kNoNode);
  EXPECT_EQ(t.total_size(), 0u);
  EXPECT_EQ(t.memreserve_count(), 0u);
  EXPECT_EQ(t.find("/chosen"), kNoNode);
  EXPECT_EQ(t.find_compatible("arm,pl011"), kNoNode);
  // A failure late in the walk too.
  ASSERT_EQ(t.open(good.data(), good.size()), Error::kOk);
  Blob late = s.blob;
  late.set_struct_word(uint32_t(s.empty), 0x77);
  ExactBuffer latebuf(late.bytes);
  EXPECT_EQ(t.open(latebuf.data(), latebuf.size()), Error::kBadToken);
  EXPECT_FALSE(t.valid());
  EXPECT_EQ(t.memreserve_count(), 0u);
  EXPECT_EQ(t.find("/chosen"), kNoNode);
}

TEST(Fdt, ErrorNames) {
  for (int e = 0; e <= int(Error::kTruncated); e++) {
    const char* n = fdt::error_name(Error(e));
    ASSERT_NE(n, nullptr);
    EXPECT_STRNE(n, "unknown error") << e;
  }
  EXPECT_STREQ(fdt::error_name(Error::kOk), "ok");
  EXPECT_STREQ(fdt::error_name(Error(200)), "unknown error");
}

// --- Malformed blobs: each gives its own error ------------------------------

TEST(FdtMalformed, NullPointer) {
  fdt::Tree t;
  EXPECT_EQ(t.open(nullptr, 1000), Error::kNull);
  EXPECT_EQ(t.open(nullptr, 0), Error::kNull);
  EXPECT_FALSE(t.valid());
}

TEST(FdtMalformed, SmallerThanAHeader) {
  std::vector<uint8_t> bytes = minimal().build().bytes;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4}, size_t{8}, kHeaderSize - 1}) {
    SCOPED_TRACE(n);
    Opened o(bytes.data(), n);
    EXPECT_EQ(o.err, Error::kTooSmall);
    EXPECT_FALSE(o.tree.valid());
  }
}

TEST(FdtMalformed, BadMagic) {
  Blob b = minimal().build();
  for (uint32_t magic : {0u, 0xedfe0dd0u, 0xd00dfeeeu, 0xffffffffu}) {
    b.set_header(kMagicField, magic);
    EXPECT_EQ(open_error(b.bytes), Error::kBadMagic) << std::hex << magic;
  }
  EXPECT_EQ(open_error(std::vector<uint8_t>(64, 0)), Error::kBadMagic);
}

TEST(FdtMalformed, BadVersion) {
  for (auto [version, last_comp] : {std::pair{15u, 15u}, {1u, 1u}, {0u, 0u}, {17u, 18u}, {32u, 32u}}) {
    SCOPED_TRACE(version);
    Blob b = minimal().build();
    b.set_header(kVersion, version);
    b.set_header(kLastCompVersion, last_comp);
    EXPECT_EQ(open_error(b.bytes), Error::kBadVersion);
  }
}

TEST(FdtMalformed, TotalSizeBeyondAvailable) {
  Blob b = minimal().build();
  uint32_t total = uint32_t(b.bytes.size());
  // The blob says it is longer than the bytes there are.
  Opened short_by_one(b.bytes.data(), total - 1);
  EXPECT_EQ(short_by_one.err, Error::kTooSmall);
  for (uint32_t bad : {total + 1, total * 2, 0x7fffffffu, 0xffffffffu}) {
    SCOPED_TRACE(bad);
    Blob c = b;
    c.set_header(kTotalSize, bad);
    EXPECT_EQ(open_error(c.bytes), Error::kTooSmall);
  }
  // And a totalsize that does not even cover the header.
  for (uint32_t bad : {0u, 1u, uint32_t(kHeaderSize - 1)}) {
    Blob c = b;
    c.set_header(kTotalSize, bad);
    EXPECT_EQ(open_error(c.bytes), Error::kTooSmall) << bad;
  }
}

TEST(FdtMalformed, BlocksOutsideTheBlob) {
  const Blob good = minimal().build();
  const uint32_t total = uint32_t(good.bytes.size());
  struct Case {
    const char* what;
    HeaderField field;
    uint32_t value;
  };
  const Case cases[] = {
      {"struct past the end", kOffStruct, total + 4},
      {"struct far past the end", kOffStruct, 0xfffffffc},
      {"struct in the header", kOffStruct, 0},
      {"struct in the header (2)", kOffStruct, 36},
      {"struct misaligned", kOffStruct, good.off_struct + 1},
      {"struct misaligned (2)", kOffStruct, good.off_struct + 2},
      {"struct size past the end", kSizeStruct, total},
      {"struct size huge", kSizeStruct, 0xfffffff0},
      {"struct size 0", kSizeStruct, 0},
      {"struct size < one token", kSizeStruct, 3},
      {"strings past the end", kOffStrings, total + 1},
      {"strings in the header", kOffStrings, 4},
      {"strings size past the end", kSizeStrings, total},
      {"strings offset+size wraps", kSizeStrings, 0xffffffff},
      {"rsvmap past the end", kOffRsvmap, total + 8},
      {"rsvmap far past the end", kOffRsvmap, 0xfffffff8},
      {"rsvmap in the header", kOffRsvmap, 8},
      {"rsvmap at 0", kOffRsvmap, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Blob b = good;
    b.set_header(c.field, c.value);
    EXPECT_EQ(open_error(b.bytes), Error::kBadLayout);
  }
  // Version 16 derives the struct size: a struct offset past the end must
  // not wrap around into a huge size.
  FdtBuilder::Options v16;
  v16.version = 16;
  Blob b = minimal().build(v16);
  b.set_header(kOffStruct, total + 4);
  EXPECT_EQ(open_error(b.bytes), Error::kBadLayout);
}

TEST(FdtMalformed, ReserveMap) {
  FdtBuilder builder = minimal();
  builder.reserve(0x1000, 0x1000);
  {
    Blob b = builder.build();
    b.set_header(kOffRsvmap, b.off_rsvmap + 4);  // 4-aligned, not 8-aligned
    EXPECT_EQ(open_error(b.bytes), Error::kBadReserveMap);
    b.set_header(kOffRsvmap, b.off_rsvmap + 1);
    EXPECT_EQ(open_error(b.bytes), Error::kBadReserveMap);
  }
  FdtBuilder::Options last;
  last.rsvmap_last = true;
  {
    // The terminating entry is missing: the map runs to the end of the blob.
    Blob b = builder.build(last);
    ASSERT_EQ(open_error(b.bytes), Error::kOk);
    set_be32(b.bytes, b.bytes.size() - 4, 1);  // terminator -> size 1
    EXPECT_EQ(open_error(b.bytes), Error::kBadReserveMap);
    set_be32(b.bytes, b.bytes.size() - 4, 0);
    set_be32(b.bytes, b.bytes.size() - 16, 0x10);  // terminator -> base 1 << 36
    EXPECT_EQ(open_error(b.bytes), Error::kBadReserveMap);
  }
  {
    // Cut inside the terminator: half an entry left.
    Blob b = builder.build(last);
    b.bytes.resize(b.bytes.size() - 8);
    b.set_header(kTotalSize, uint32_t(b.bytes.size()));
    EXPECT_EQ(open_error(b.bytes), Error::kBadReserveMap);
  }
  {
    // The map starts exactly at the end of the blob.
    Blob b = builder.build(last);
    b.bytes.resize(b.off_rsvmap);
    b.set_header(kTotalSize, uint32_t(b.bytes.size()));
    EXPECT_EQ(open_error(b.bytes), Error::kBadReserveMap);
  }
}

TEST(FdtMalformed, UnknownToken) {
  for (uint32_t tok : {0u, 5u, 6u, 8u, 10u, 0x01000000u, 0xffffffffu}) {
    SCOPED_TRACE(tok);
    FdtBuilder b;
    b.begin("").prop_str("compatible", {"x"}).word(tok).begin("child").end().end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadToken);
  }
  // Before the root, and in place of FDT_END.
  FdtBuilder b;
  b.word(7).begin("").end();
  EXPECT_EQ(open_error(b.build().bytes), Error::kBadToken);
  FdtBuilder c;
  c.begin("").end().word(0x09000000);
  FdtBuilder::Options no_end;
  no_end.end_token = false;
  EXPECT_EQ(open_error(c.build(no_end).bytes), Error::kBadToken);
}

TEST(FdtMalformed, UnterminatedNodeName) {
  FdtBuilder::Options no_end;
  no_end.end_token = false;
  // The name runs to the end of the structure block; the strings block that
  // follows has NULs, which must not count.
  for (std::string_view name : {"abcd", "abcdefg", "a"}) {
    SCOPED_TRACE(name);
    FdtBuilder b;
    b.begin("").prop_str("compatible", {"x"}).word(kBeginNode).raw(name);
    Blob blob = b.build(no_end);
    blob.set_header(kSizeStruct, blob.header(kSizeStruct) & ~3u);
    EXPECT_EQ(open_error(blob.bytes), Error::kBadName);
  }
  // BEGIN_NODE as the very last word.
  FdtBuilder b;
  b.begin("").word(kBeginNode);
  EXPECT_EQ(open_error(b.build(no_end).bytes), Error::kBadName);
  // The root's own name.
  FdtBuilder r;
  r.word(kBeginNode).raw("root");
  EXPECT_EQ(open_error(r.build(no_end).bytes), Error::kBadName);
}

TEST(FdtMalformed, PropertyRunsOffTheEnd) {
  FdtBuilder::Options no_end;
  no_end.end_token = false;
  // The data may run 16 bytes: lengths just past that are the boundary.
  for (uint32_t len : {9u, 12u, 16u, 17u, 20u, 28u, 29u, 100u, 0x7fffffffu, 0xfffffff4u, 0xfffffffcu, 0xffffffffu}) {
    SCOPED_TRACE(len);
    FdtBuilder b;
    b.begin("");
    b.prop_header(len, b.string("reg"), 8).end();
    // 8 data bytes, END_NODE and FDT_END follow: 16 bytes. A length of 9 or
    // 12 still fits, but then the nesting is wrong; only lengths beyond
    // the block are kBadProperty.
    Error e = open_error(b.build().bytes);
    if (len <= 16) {
      EXPECT_NE(e, Error::kOk);
    } else {
      EXPECT_EQ(e, Error::kBadProperty);
    }
  }
  // The property header itself is cut off.
  for (int extra : {0, 1}) {
    SCOPED_TRACE(extra);
    FdtBuilder b;
    b.begin("").word(kProp);
    for (int i = 0; i < extra; i++) b.word(0);
    EXPECT_EQ(open_error(b.build(no_end).bytes), Error::kBadProperty);
  }
}

TEST(FdtMalformed, PropertyNameOutsideStrings) {
  Blob good = minimal().build();
  const uint32_t size_strings = good.header(kSizeStrings);
  for (uint32_t nameoff : {size_strings, size_strings + 1, 0x10000u, 0xffffffffu}) {
    SCOPED_TRACE(nameoff);
    FdtBuilder c;
    c.begin("").prop_str("compatible", {"x"}).prop_header(4, nameoff, 4).end();
    // Same strings block size as minimal() so the offsets above are outside.
    c.string("reg");
    EXPECT_EQ(open_error(c.build().bytes), Error::kBadString);
  }
  // The strings block is smaller than its contents: the last name is cut.
  Blob b = good;
  b.set_header(kSizeStrings, size_strings - 1);  // "reg" loses its NUL
  EXPECT_EQ(open_error(b.bytes), Error::kBadString);
  b.set_header(kSizeStrings, 0);
  EXPECT_EQ(open_error(b.bytes), Error::kBadString);
  // An unterminated last string.
  Blob u = good;
  u.bytes[u.off_strings + size_strings - 1] = 'x';
  EXPECT_EQ(open_error(u.bytes), Error::kBadString);
}

TEST(FdtMalformed, UnbalancedNesting) {
  {
    FdtBuilder b;  // an extra END_NODE
    b.begin("").begin("a").end().end().end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // END_NODE before anything
    b.end().begin("").end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // the root is never closed
    b.begin("").begin("a").end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // a child is never closed
    b.begin("").begin("a").begin("b").end().end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // two roots
    b.begin("").end().begin("").end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // two roots with a NOP between
    b.begin("").prop_str("compatible", {"x"}).end().nop().begin("again").end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // no root at all
    b.nop();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
    FdtBuilder e;
    EXPECT_EQ(open_error(e.build().bytes), Error::kBadNesting);
  }
  {
    FdtBuilder b;  // a property outside any node
    b.prop_cells("x", {1}).begin("").end();
    EXPECT_EQ(open_error(b.build().bytes), Error::kBadNesting);
    FdtBuilder c;
    c.begin("").end().prop_cells("x", {1});
    EXPECT_EQ(open_error(c.build().bytes), Error::kBadNesting);
  }
}

TEST(FdtMalformed, MissingEnd) {
  FdtBuilder::Options no_end;
  no_end.end_token = false;
  {
    FdtBuilder b;
    b.begin("").prop_str("compatible", {"x"}).end();
    EXPECT_EQ(open_error(b.build(no_end).bytes), Error::kTruncated);
  }
  {
    FdtBuilder b;
    b.begin("").end().nop().nop();
    EXPECT_EQ(open_error(b.build(no_end).bytes), Error::kTruncated);
  }
  {
    FdtBuilder b;  // the block ends right after a property
    b.begin("").prop_cells("x", {1});
    EXPECT_EQ(open_error(b.build(no_end).bytes), Error::kTruncated);
  }
  {
    FdtBuilder b;  // just a NOP
    b.nop();
    EXPECT_EQ(open_error(b.build(no_end).bytes), Error::kTruncated);
  }
  {
    // The structure block size stops short of FDT_END, mid-tree.
    Blob blob = minimal().build();
    const uint32_t size = blob.header(kSizeStruct);
    for (uint32_t cut = 4; cut < size; cut += 4) {
      SCOPED_TRACE(cut);
      Blob c = blob;
      c.set_header(kSizeStruct, cut);
      Error e = open_error(c.bytes);
      EXPECT_NE(e, Error::kOk);
      if (cut == size - 4) {
        EXPECT_EQ(e, Error::kTruncated);
      }
    }
  }
}

// --- The device trees QEMU gives the kernel --------------------------------

struct RealDtb {
  const char* board;
  uint64_t mem_base, mem_size;
  const char* uart_compatible;
  uint64_t uart_base;
  const char* intc_compatible;  // the UART's interrupt parent
  const char* stdout_path;
};

void PrintTo(const RealDtb& d, std::ostream* os) { *os << d.board; }

const RealDtb kRealDtbs[] = {
    {"qemu-virt-arm64", 0x40000000, 512u << 20, "arm,pl011", 0x9000000, "arm,cortex-a15-gic", "/pl011@9000000"},
    {"qemu-virt-arm", 0x40000000, 512u << 20, "arm,pl011", 0x9000000, "arm,cortex-a15-gic", "/pl011@9000000"},
    {"qemu-virt-riscv64", 0x80000000, 512u << 20, "ns16550a", 0x10000000, "riscv,plic0", "/soc/serial@10000000"},
};

std::vector<uint8_t> load_dtb(const char* board) {
  std::string path = std::string(MAGPIE_TEST_DATA_DIR) + "/" + board + ".dtb";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Counts memory reservation entries straight from the bytes.
uint32_t count_reservations(const std::vector<uint8_t>& b) {
  uint32_t n = 0;
  for (size_t off = get_be32(b, kOffRsvmap); off + 16 <= b.size(); off += 16, n++) {
    if (fdt::be64(b.data() + off) == 0 && fdt::be64(b.data() + off + 8) == 0) return n;
  }
  ADD_FAILURE() << "unterminated reservation map";
  return n;
}

class FdtReal : public ::testing::TestWithParam<RealDtb> {
 protected:
  void SetUp() override {
    bytes_ = load_dtb(GetParam().board);
    ASSERT_GE(bytes_.size(), kHeaderSize);
    ASSERT_EQ(get_be32(bytes_, kMagicField), kFdtMagic);
    ASSERT_EQ(get_be32(bytes_, kTotalSize), bytes_.size());
  }
  std::vector<uint8_t> bytes_;
};

TEST_P(FdtReal, Opens) {
  Opened o(bytes_);
  ASSERT_EQ(o.err, Error::kOk) << fdt::error_name(o.err);
  EXPECT_EQ(o.tree.total_size(), bytes_.size());
  WalkStats st = walk_tree(o.tree, true);
  EXPECT_GT(st.nodes, 30u);
  EXPECT_GT(st.props, 150u);
}

TEST_P(FdtReal, Memory) {
  const RealDtb& d = GetParam();
  Opened o(bytes_);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  Node mem = t.find("/memory");
  ASSERT_NE(mem, kNoNode);
  EXPECT_EQ(t.find_device_type("memory"), mem);
  EXPECT_EQ(t.find_device_type("memory", mem), kNoNode);  // one bank
  char path[64];
  std::snprintf(path, sizeof path, "/memory@%llx", static_cast<unsigned long long>(d.mem_base));
  EXPECT_EQ(t.find(path), mem);
  fdt::Property p;
  ASSERT_TRUE(t.prop(mem, "device_type", p));
  EXPECT_STREQ(p.str(), "memory");
  EXPECT_EQ(t.address_cells(t.root()), 2u);
  EXPECT_EQ(t.size_cells(t.root()), 2u);
  uint64_t base = 0, size = 0;
  ASSERT_TRUE(t.reg(mem, 0, base, size));
  EXPECT_EQ(base, d.mem_base);
  EXPECT_EQ(size, d.mem_size);
  EXPECT_FALSE(t.reg(mem, 1, base, size));
}

TEST_P(FdtReal, Cpus) {
  Opened o(bytes_);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  Node cpus = t.find("/cpus");
  ASSERT_NE(cpus, kNoNode);
  EXPECT_EQ(t.parent(cpus), t.root());
  EXPECT_EQ(t.address_cells(cpus), 1u);
  EXPECT_EQ(t.size_cells(cpus), 0u);
  std::vector<Node> cpu_nodes;
  for (Node c = t.first_child(cpus); c != kNoNode; c = t.next_sibling(c)) {
    EXPECT_EQ(t.parent(c), cpus);
    fdt::Property p;
    if (t.prop(c, "device_type", p) && p.str() && std::string_view(p.str()) == "cpu") {
      EXPECT_EQ(std::string_view(t.name(c)).substr(0, 4), "cpu@");
      cpu_nodes.push_back(c);
    }
  }
  ASSERT_EQ(cpu_nodes.size(), 4u);
  for (uint32_t i = 0; i < 4; i++) {
    SCOPED_TRACE(i);
    uint64_t id = 99, size = 99;
    ASSERT_TRUE(t.reg(cpu_nodes[i], 0, id, size));
    EXPECT_EQ(id, i);
    EXPECT_EQ(size, 0u);
    std::string path = "/cpus/cpu@" + std::to_string(i);
    EXPECT_EQ(t.find(path.c_str()), cpu_nodes[i]);
  }
  EXPECT_EQ(t.find("/cpus/cpu@0"), cpu_nodes[0]);
  EXPECT_EQ(t.find("/cpus/cpu"), cpu_nodes[0]);
  EXPECT_EQ(t.find("/cpus/cpu@4"), kNoNode);
  // find_device_type("cpu") yields the same four.
  std::vector<Node> by_type;
  for (Node c = t.find_device_type("cpu"); c != kNoNode; c = t.find_device_type("cpu", c)) by_type.push_back(c);
  EXPECT_EQ(by_type, cpu_nodes);
}

TEST_P(FdtReal, ChosenAndUart) {
  const RealDtb& d = GetParam();
  Opened o(bytes_);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  Node chosen = t.find("/chosen");
  ASSERT_NE(chosen, kNoNode);
  EXPECT_EQ(t.parent(chosen), t.root());

  Node uart = t.find_compatible(d.uart_compatible);
  ASSERT_NE(uart, kNoNode);
  uint64_t base = 0, size = 0;
  ASSERT_TRUE(t.reg(uart, 0, base, size));
  EXPECT_EQ(base, d.uart_base);
  EXPECT_GT(size, 0u);
  EXPECT_EQ(t.find_compatible(d.uart_compatible, uart), kNoNode);  // just one

  // /chosen's stdout-path names the same node.
  fdt::Property sp;
  ASSERT_TRUE(t.prop(chosen, "stdout-path", sp));
  ASSERT_NE(sp.str(), nullptr);
  EXPECT_STREQ(sp.str(), d.stdout_path);
  EXPECT_EQ(t.find(sp.str()), uart);

  // The UART's interrupt parent (its own or inherited) is the interrupt
  // controller; find_phandle resolves it.
  uint32_t phandle = 0;
  for (Node n = uart; n != kNoNode && !phandle; n = t.parent(n)) {
    fdt::Property ip;
    if (t.prop(n, "interrupt-parent", ip)) {
      ASSERT_EQ(ip.len, 4u);
      phandle = ip.u32();
    }
  }
  ASSERT_NE(phandle, 0u);
  Node intc = t.find_phandle(phandle);
  ASSERT_NE(intc, kNoNode);
  EXPECT_TRUE(t.is_compatible(intc, d.intc_compatible));
  fdt::Property ic;
  EXPECT_TRUE(t.prop(intc, "interrupt-controller", ic));
  EXPECT_EQ(t.find_compatible(d.intc_compatible), intc);
}

TEST_P(FdtReal, TreeShape) {
  Opened o(bytes_);
  ASSERT_EQ(o.err, Error::kOk);
  const fdt::Tree& t = o.tree;
  Node root = t.root();
  EXPECT_STREQ(t.name(root), "");
  EXPECT_EQ(t.parent(root), kNoNode);
  EXPECT_EQ(t.next_sibling(root), kNoNode);
  EXPECT_EQ(t.find("/"), root);
  // The root's children are siblings of each other, each with the root as
  // parent, and the last has no next sibling.
  Node last = kNoNode;
  size_t n = 0;
  for (Node c = t.first_child(root); c != kNoNode; c = t.next_sibling(c), n++) {
    EXPECT_EQ(t.parent(c), root);
    last = c;
  }
  EXPECT_GT(n, 5u);
  EXPECT_EQ(t.next_sibling(last), kNoNode);
  EXPECT_NE(t.find("/cpus"), kNoNode);
  EXPECT_NE(t.find("/chosen"), kNoNode);
  fdt::Property compat;
  ASSERT_TRUE(t.prop(root, "compatible", compat));
  EXPECT_NE(compat.str(), nullptr);
}

TEST_P(FdtReal, MemoryReservations) {
  Opened o(bytes_);
  ASSERT_EQ(o.err, Error::kOk);
  // QEMU's virt boards reserve nothing in the map (the firmware reserves in
  // /reserved-memory, when at all).
  EXPECT_EQ(o.tree.memreserve_count(), count_reservations(bytes_));
  EXPECT_EQ(o.tree.memreserve_count(), 0u);
  uint64_t base, size;
  EXPECT_FALSE(o.tree.memreserve(0, base, size));
}

TEST_P(FdtReal, Version16) {
  // The same tree read as version 16 (no structure block size).
  Blob b;
  b.bytes = bytes_;
  b.set_header(kVersion, 16);
  b.set_header(kSizeStruct, 0);
  Opened o(b.bytes);
  ASSERT_EQ(o.err, Error::kOk);
  Opened ref(bytes_);
  ASSERT_EQ(ref.err, Error::kOk);
  WalkStats a = walk_tree(o.tree, true), r = walk_tree(ref.tree, true);
  EXPECT_EQ(a.nodes, r.nodes);
  EXPECT_EQ(a.props, r.props);
  EXPECT_EQ(a.checksum, r.checksum);
}

// --- Robustness on the real trees ------------------------------------------

// The end of the last block the header names: open() needs every byte of it.
uint32_t used_end(const std::vector<uint8_t>& b) {
  uint32_t end = get_be32(b, kOffStruct) + get_be32(b, kSizeStruct);
  end = std::max(end, get_be32(b, kOffStrings) + get_be32(b, kSizeStrings));
  end = std::max(end, get_be32(b, kOffRsvmap) + 16 * (count_reservations(b) + 1));
  return end;
}

TEST_P(FdtReal, EveryTruncation) {
  const uint32_t total = uint32_t(bytes_.size());
  const uint32_t end = used_end(bytes_);
  ASSERT_LE(end, total);
  for (uint32_t len = 0; len < total; len++) {
    // The bytes stop short of what the header says.
    {
      Opened o(bytes_.data(), len);
      ASSERT_EQ(o.err, Error::kTooSmall) << "length " << len;
      ASSERT_FALSE(o.tree.valid());
    }
    // The header is patched to claim the shorter size.
    if (len >= 8) {
      std::vector<uint8_t> cut(bytes_.begin(), bytes_.begin() + len);
      set_be32(cut, kTotalSize, len);
      Opened o(cut);
      if (len < end) {
        ASSERT_NE(o.err, Error::kOk) << "length " << len;
      } else if (o.err == Error::kOk) {
        walk_tree(o.tree, false);
      }
      if (len < kHeaderSize) {
        ASSERT_EQ(o.err, Error::kTooSmall);
      }
    }
  }
}

TEST_P(FdtReal, EveryTruncatedStructBlock) {
  // size_dt_struct cut at every length: the walk must stop at the block's
  // end even though the bytes after it (the strings) are readable.
  const uint32_t size = get_be32(bytes_, kSizeStruct);
  for (uint32_t cut = 0; cut < size; cut++) {
    std::vector<uint8_t> b = bytes_;
    set_be32(b, kSizeStruct, cut);
    Opened o(b);
    ASSERT_NE(o.err, Error::kOk) << "struct size " << cut;
  }
}

TEST_P(FdtReal, EveryByteFlipped) {
  size_t accepted = 0;
  std::vector<uint8_t> b = bytes_;
  for (size_t i = 0; i < bytes_.size(); i++) {
    b[i] ^= 0xff;
    Opened o(b);
    if (o.err == Error::kOk) {
      accepted++;
      walk_tree(o.tree, false);
      if (HasFailure()) FAIL() << "walk failed with byte " << i << " flipped";
    }
    b[i] ^= 0xff;
  }
  RecordProperty("accepted", int(accepted));
  // Flips in property values leave a valid tree; in the header or in
  // tokens they do not.
  EXPECT_GT(accepted, bytes_.size() / 4);
  EXPECT_LT(accepted, bytes_.size());
  // Spot checks of which error a flip gives.
  b[0] ^= 0xff;
  EXPECT_EQ(open_error(b), Error::kBadMagic);
  b[0] ^= 0xff;
  b[kLastCompVersion + 3] ^= 0xff;
  EXPECT_EQ(open_error(b), Error::kBadVersion);
  b[kLastCompVersion + 3] ^= 0xff;
  const uint32_t off_struct = get_be32(b, kOffStruct);
  b[off_struct + 3] ^= 0xff;  // the root's FDT_BEGIN_NODE
  EXPECT_EQ(open_error(b), Error::kBadToken);
}

TEST_P(FdtReal, RandomCorruption) {
  std::mt19937 rng(0x6d616770);  // fixed seed: "magp"
  const uint32_t total = uint32_t(bytes_.size());
  const uint32_t off_struct = get_be32(bytes_, kOffStruct);
  const uint32_t size_struct = get_be32(bytes_, kSizeStruct);
  const uint32_t interesting[] = {0,          1,          2,          3,         4,           8,
                                  9,          12,         0x10,       0x7f,      0x80,        0xff,
                                  0x100,      total - 1,  total,      total + 1, size_struct, 0x7fffffff,
                                  0x80000000, 0xfffffff0, 0xfffffffc, 0xffffffff};
  auto pick = [&](uint32_t n) { return uint32_t(rng() % n); };
  size_t accepted = 0;
  constexpr int kRounds = 4000;
  for (int round = 0; round < kRounds; round++) {
    std::vector<uint8_t> b = bytes_;
    const int edits = 1 + int(pick(6));
    for (int e = 0; e < edits; e++) {
      switch (pick(4)) {
        case 0:  // a random byte anywhere
          b[pick(total)] = uint8_t(rng());
          break;
        case 1:  // an interesting word in the structure block (tokens, lengths, name offsets)
          set_be32(b, off_struct + 4 * pick(size_struct / 4), interesting[pick(std::size(interesting))]);
          break;
        case 2:  // a token swapped for another
          set_be32(b, off_struct + 4 * pick(size_struct / 4), 1 + pick(9));
          break;
        case 3:  // a header field (not the magic)
          set_be32(b, 4 + 4 * pick(9),
                   pick(2) ? interesting[pick(std::size(interesting))] : get_be32(b, 4 + 4 * pick(9)) + pick(16) - 8);
          break;
      }
    }
    // Sometimes also cut the bytes short.
    size_t avail = pick(8) == 0 ? pick(total + 1) : total;
    Opened o(b.data(), avail);
    if (o.err == Error::kOk) {
      accepted++;
      walk_tree(o.tree, false);
      if (HasFailure()) FAIL() << "walk failed in round " << round;
    }
  }
  RecordProperty("accepted", int(accepted));
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, size_t(kRounds));
}

INSTANTIATE_TEST_SUITE_P(Qemu, FdtReal, ::testing::ValuesIn(kRealDtbs),
                         [](const ::testing::TestParamInfo<RealDtb>& info) {
                           std::string s = info.param.board;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
