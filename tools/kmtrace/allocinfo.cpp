// SPDX-License-Identifier: Apache-2.0
// kmtrace allocinfo: see allocinfo.h.
#include "allocinfo.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>
#include <tuple>

namespace kmtrace {
namespace {

bool starts_with(std::string_view s, size_t at, std::string_view what) { return s.substr(at, what.size()) == what; }

bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

bool opens(char c) { return c == '(' || c == '<' || c == '[' || c == '{'; }
bool closes(char c) { return c == ')' || c == '>' || c == ']' || c == '}'; }

// The index of the bracket closing the one at `open`, or npos.
size_t matching(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); i++) {
    if (opens(s[i])) depth++;
    if (closes(s[i]) && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// Past the operator's token at `at` (just after "operator"): "()", "[]",
// a run of operator characters, or a word ("new", "delete[]", a
// conversion's type) up to its parameter list.
size_t skip_operator(std::string_view s, size_t at) {
  if (starts_with(s, at, "()") || starts_with(s, at, "[]")) return at + 2;
  if (at < s.size() && s[at] == ' ') {
    size_t i = at + 1;
    while (i < s.size() && s[i] != '(') {
      if (s[i] == '<' || s[i] == '[') {
        size_t close = matching(s, i);
        if (close == std::string_view::npos) return s.size();
        i = close;
      }
      i++;
    }
    return i;
  }
  static constexpr std::string_view kOperatorChars = "+-*/%^&|~!=<>,";
  while (at < s.size() && kOperatorChars.find(s[at]) != std::string_view::npos) at++;
  return at;
}

// Past " const", " volatile", " &", " &&" after a parameter list.
size_t skip_qualifiers(std::string_view s, size_t at) {
  for (;;) {
    if (starts_with(s, at, " const")) {
      at += 6;
    } else if (starts_with(s, at, " volatile")) {
      at += 9;
    } else if (starts_with(s, at, " &&")) {
      at += 3;
    } else if (starts_with(s, at, " &")) {
      at += 2;
    } else {
      return at;
    }
  }
}

}  // namespace

std::string unqualified_function(const std::string& demangled) {
  std::string_view s = demangled;
  // " [clone .cold]", " [clone .constprop.0]": the compiler's copies.
  for (size_t at; !s.empty() && s.back() == ']' && (at = s.rfind(" [clone ")) != std::string_view::npos;)
    s = s.substr(0, at);
  size_t start = 0;                          // the current component
  size_t name_end = std::string_view::npos;  // where its template arguments or ABI tag begin
  size_t end = s.size();
  int depth = 0;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (depth == 0) {
      if (starts_with(s, i, "(anonymous namespace)")) {
        i += 21;
        continue;
      }
      if (starts_with(s, i, "operator") && (i == 0 || !is_identifier_char(s[i - 1])) &&
          (i + 8 == s.size() || !is_identifier_char(s[i + 8]))) {
        i = skip_operator(s, i + 8);
        if (starts_with(s, i, " <")) name_end = i++;  // "operator<< <int>"
        continue;
      }
      if (starts_with(s, i, "::")) {
        i += 2;
        start = i;
        name_end = std::string_view::npos;
        continue;
      }
      if (c == ' ') {  // the return type ends (a template function's)
        start = ++i;
        name_end = std::string_view::npos;
        continue;
      }
      if (c == '(') {
        size_t close = matching(s, i);
        if (close == std::string_view::npos) {
          end = i;
          break;
        }
        size_t after = skip_qualifiers(s, close + 1);
        if (starts_with(s, after, "::")) {  // a local scope: "foo()::{lambda()#1}"
          i = after;
          continue;
        }
        end = i;  // the parameter list
        break;
      }
      // Template arguments, an ABI tag, or a C function's clone suffix
      // ("kmem_zalloc.part.0", a name the demangler leaves as it is).
      if ((c == '<' || c == '[' || c == '.') && name_end == std::string_view::npos) name_end = i;
    }
    if (opens(c)) depth++;
    if (closes(c) && depth > 0) depth--;
    i++;
  }
  size_t stop = std::min(end, name_end);
  if (stop <= start) return "?";
  return std::string(s.substr(start, stop - start));
}

std::string relative_path(const std::string& file, const std::string& source_root) {
  std::string root = source_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root.empty()) return file;
  if (root == "/") return file.rfind('/', 0) == 0 ? file.substr(1) : file;
  if (file.size() > root.size() && file.compare(0, root.size(), root) == 0 && file[root.size()] == '/')
    return file.substr(root.size() + 1);
  return file;
}

std::string source_root(const std::vector<std::pair<std::string, std::string>>& compile_units) {
  std::map<std::string, std::vector<std::string>> by_dir;  // compilation dir -> absolute source files
  for (auto& [dir, name] : compile_units) {
    if (name.empty() || name[0] == '<') continue;  // "<artificial>" (LTO)
    if (name[0] == '/') by_dir[dir].push_back(name);
    else if (!dir.empty() && dir[0] == '/') by_dir[dir].push_back(dir + "/" + name);
  }
  const std::vector<std::string>* project = nullptr;
  for (auto& [dir, files] : by_dir)
    if (!project || files.size() > project->size()) project = &files;
  if (!project) return "";
  std::string root = project->front().substr(0, project->front().rfind('/'));
  for (const std::string& f : *project)
    while (!root.empty() && f.compare(0, root.size() + 1, root + "/") != 0) root.resize(root.rfind('/'));
  return root;  // "" when only "/" is common
}

std::vector<AllocinfoLine> allocinfo(const std::vector<Site>& sites, const SymbolMap& syms,
                                     const AllocinfoOptions& opts) {
  using Key = std::tuple<std::string, unsigned, std::string>;  // file, line, function: the default order
  std::map<Key, AllocinfoLine> by_site;
  for (const Site& s : sites) {
    if (s.live_objects == 0) continue;
    Key key{"?", 0, "?"};
    auto it = syms.find(s.caller);
    if (it != syms.end()) {
      if (!it->second.file.empty()) {
        std::get<0>(key) = relative_path(it->second.file, opts.source_root);
        std::get<1>(key) = static_cast<unsigned>(it->second.line);
      }
      std::get<2>(key) = unqualified_function(it->second.function);
    }
    AllocinfoLine& l = by_site[key];
    std::tie(l.file, l.line, l.function) = key;
    l.bytes += s.live_bytes;
    l.calls += s.live_objects;
  }
  std::vector<AllocinfoLine> out;
  for (auto& [_, l] : by_site)
    if (!opts.nonzero || l.calls) out.push_back(l);
  auto field = [&](const AllocinfoLine& l) { return opts.sort == AllocinfoSort::kBytes ? l.bytes : l.calls; };
  if (opts.sort != AllocinfoSort::kSite)  // stable: ties keep the site order
    std::stable_sort(out.begin(), out.end(),
                     [&](const AllocinfoLine& a, const AllocinfoLine& b) { return field(a) > field(b); });
  if (opts.top && out.size() > opts.top) out.resize(opts.top);
  return out;
}

std::string allocinfo_text(const std::vector<AllocinfoLine>& lines) {
  std::string o = "allocinfo - version: 1.0\n#     <size>  <calls> <tag info>\n";
  for (const AllocinfoLine& l : lines) {
    // Linux's alloc_tag_to_text: "%12lli %8llu ", the code tag "%s:%u func:%s", ' ', '\n'.
    char numbers[48];
    snprintf(numbers, sizeof numbers, "%12lli %8llu ", static_cast<long long>(l.bytes),
             static_cast<unsigned long long>(l.calls));
    o += numbers + l.file + ":" + std::to_string(l.line) + " func:" + l.function + " \n";
  }
  return o;
}

}  // namespace kmtrace
