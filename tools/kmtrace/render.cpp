// SPDX-License-Identifier: Apache-2.0
// kmtrace output formats: see render.h.
#include "render.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace kmtrace {
namespace {

using kmemtrace::type_name;

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::string num(uint64_t v) { return std::to_string(v); }

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string human_bytes(uint64_t v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double d = static_cast<double>(v);
  int u = 0;
  while (d >= 1024 && u < 4) {
    d /= 1024;
    u++;
  }
  char b[32];
  snprintf(b, sizeof b, u ? "%.1f %s" : "%.0f %s", d, units[u]);
  return b;
}

// One chart: series of y values over tl.x, as an SVG <g> at (ox, oy).
std::string chart(const Timeline& tl, const std::string& title, const std::vector<std::string>& names,
                  const std::vector<const std::vector<uint64_t>*>& series, int ox, int oy) {
  const int w = 900, h = 260, left = 80, top = 30;
  uint64_t ymax = 1, xmax = std::max<uint64_t>(1, tl.events);
  for (auto* s : series)
    for (uint64_t v : *s) ymax = std::max(ymax, v);
  std::string o = "<g transform=\"translate(" + std::to_string(ox) + "," + std::to_string(oy) + ")\">\n";
  o += "<text x=\"" + std::to_string(left) + "\" y=\"18\" font-size=\"15\" font-weight=\"bold\">" + xml_escape(title) +
       "</text>\n";
  o += "<rect x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(top) + "\" width=\"" + std::to_string(w) +
       "\" height=\"" + std::to_string(h) + "\" fill=\"#fafafa\" stroke=\"#888\"/>\n";
  for (int i = 0; i <= 4; i++) {  // y grid and labels
    int y = top + h - h * i / 4;
    o += "<line x1=\"" + std::to_string(left) + "\" y1=\"" + std::to_string(y) + "\" x2=\"" + std::to_string(left + w) +
         "\" y2=\"" + std::to_string(y) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(y + 4) +
         "\" font-size=\"11\" text-anchor=\"end\">" + human_bytes(ymax * i / 4) + "</text>\n";
  }
  for (int i = 0; i <= 4; i++) {  // x labels
    int x = left + w * i / 4;
    o += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(top + h + 16) +
         "\" font-size=\"11\" text-anchor=\"middle\">" + num(xmax * i / 4) + "</text>\n";
  }
  o += "<text x=\"" + std::to_string(left + w / 2) + "\" y=\"" + std::to_string(top + h + 32) +
       "\" font-size=\"12\" text-anchor=\"middle\">events (merged sequence order)</text>\n";
  for (size_t k = 0; k < series.size(); k++) {
    std::string pts;
    char b[48];
    for (size_t i = 0; i < tl.x.size() && i < series[k]->size(); i++) {
      double x = left + static_cast<double>(w) * static_cast<double>(tl.x[i]) / static_cast<double>(xmax);
      double y = top + h - static_cast<double>(h) * static_cast<double>((*series[k])[i]) / static_cast<double>(ymax);
      snprintf(b, sizeof b, "%.1f,%.1f ", x, y);
      pts += b;
    }
    const char* color = kColors[k % (sizeof kColors / sizeof kColors[0])];
    o +=
        "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" + std::string(color) + "\" points=\"" + pts + "\"/>\n";
    int ly = top + 14 + static_cast<int>(k) * 16;
    o += "<rect x=\"" + std::to_string(left + w + 12) + "\" y=\"" + std::to_string(ly - 9) +
         "\" width=\"10\" height=\"10\" fill=\"" + color + "\"/>";
    o += "<text x=\"" + std::to_string(left + w + 26) + "\" y=\"" + std::to_string(ly) + "\" font-size=\"11\">" +
         xml_escape(names[k]) + "</text>\n";
  }
  return o + "</g>\n";
}

}  // namespace

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o;
}

std::string site_label(uint64_t caller, const SymbolMap& syms) {
  auto it = syms.find(caller);
  if (it == syms.end()) return hex(caller);
  return it->second.function + " (" + it->second.location() + ")";
}

std::string summary_json(const Summary& s, const kmemtrace::Trace& t) {
  std::string o = "{\n";
  auto kv = [&](const char* k, uint64_t v, bool comma = true) {
    o += std::string("  \"") + k + "\": " + num(v) + (comma ? ",\n" : "\n");
  };
  o += "  \"abi_version\": " + num(t.abi_version) + ",\n";
  kv("events", s.events);
  kv("allocs", s.allocs);
  kv("frees", s.frees);
  kv("clock_events", s.clock_events);
  o += "  \"by_type\": {";
  for (unsigned k = 0; k < kTypeCount; k++)
    o += std::string(k ? ", " : "") + "\"" + type_name(k) + "\": {\"allocs\": " + num(s.by_type[k].allocs) +
         ", \"frees\": " + num(s.by_type[k].frees) + "}";
  o += "},\n";
  kv("bytes_requested", s.bytes_requested);
  kv("bytes_allocated", s.bytes_allocated);
  kv("fragmentation_bytes", s.bytes_allocated - s.bytes_requested);
  kv("live_objects", s.live_objects);
  kv("live_bytes", s.live_bytes);
  kv("unmatched_frees", s.unmatched_frees);
  kv("failed_allocs", s.failed_allocs);
  kv("replaced_allocs", s.replaced_allocs);
  kv("unknown_events", s.unknown_events);
  o += "  \"per_cpu\": {";
  bool first = true;
  for (auto& [cpu, n] : s.per_cpu) {
    o += std::string(first ? "" : ", ") + "\"" + num(cpu) + "\": " + num(n);
    first = false;
  }
  o += "},\n";
  kv("bad_frames", t.capture.bad_frames);
  kv("crc_errors", t.capture.crc_errors);
  kv("rejected_frames", t.capture.rejected_frames);
  kv("frames", t.capture.frames);
  kv("gaps", t.gaps.size());
  kv("missing_bytes", t.missing_bytes);
  kv("truncated_events", t.parse.truncated_events);
  kv("features", t.parse.features);
  uint64_t overrun = 0, dropped = 0;
  for (auto& [cpu, st] : t.cpu_stats) {
    overrun += st.overrun_bytes;
    dropped += st.dropped_events;
  }
  kv("total_overruns", overrun);
  kv("dropped_events", dropped);
  kv("boot_id", t.boot_id, false);
  return o + "}\n";
}

std::string summary_text(const Summary& s, const kmemtrace::Trace& t) {
  char b[256];
  std::string o;
  snprintf(b, sizeof b, "events %" PRIu64 ": %" PRIu64 " allocs, %" PRIu64 " frees", s.events, s.allocs, s.frees);
  o += b;
  if (s.clock_events) o += ", " + num(s.clock_events) + " clock anchors";
  o += "\n";
  for (unsigned k = 0; k < kTypeCount; k++) {
    snprintf(b, sizeof b, "  %-8s %10" PRIu64 " allocs %10" PRIu64 " frees\n", type_name(k), s.by_type[k].allocs,
             s.by_type[k].frees);
    o += b;
  }
  o += "bytes requested " + num(s.bytes_requested) + ", allocated " + num(s.bytes_allocated) +
       " (internal fragmentation " + num(s.bytes_allocated - s.bytes_requested) + ")\n";
  o += "live at the end: " + num(s.live_objects) + " objects, " + num(s.live_bytes) + " bytes\n";
  o += "unmatched frees " + num(s.unmatched_frees) + ", failed allocs " + num(s.failed_allocs) + ", unknown events " +
       num(s.unknown_events) + "\n";
  o += "per cpu:";
  for (auto& [cpu, n] : s.per_cpu) o += " cpu" + num(cpu) + "=" + num(n);
  o += "\n";
  uint64_t overrun = 0, dropped = 0;
  for (auto& [cpu, st] : t.cpu_stats) {
    overrun += st.overrun_bytes;
    dropped += st.dropped_events;
  }
  if (!t.cpu_stats.empty())
    o += "ring overruns: " + num(overrun) + " bytes (" + num(dropped) + " events dropped by full rings)\n";
  o += "frames: " + num(t.capture.frames) + " good, " + num(t.capture.bad_frames) + " damaged, " +
       num(t.capture.rejected_frames) + " rejected; " + num(t.missing_bytes) + " stream bytes missing\n";
  return o;
}

std::string sites_text(const std::vector<Site>& sites, const SymbolMap& syms, size_t top) {
  std::string o;
  char b[512];
  snprintf(b, sizeof b, "%-8s %9s %9s %12s %12s %10s %9s %12s  %s\n", "type", "allocs", "frees", "requested",
           "allocated", "frag", "live", "live bytes", "site");
  o += b;
  for (size_t i = 0; i < sites.size() && i < top; i++) {
    const Site& s = sites[i];
    snprintf(b, sizeof b,
             "%-8s %9" PRIu64 " %9" PRIu64 " %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %9" PRIu64 " %12" PRIu64 "  %s",
             type_name(s.type), s.allocs, s.frees, s.bytes_requested, s.bytes_allocated, s.fragmentation(),
             s.live_objects, s.live_bytes, hex(s.caller).c_str());
    o += b;
    auto it = syms.find(s.caller);
    if (it != syms.end()) {
      o += " " + it->second.function + " " + it->second.location();
      if (!it->second.inlined_in.empty()) o += " (inlined in " + it->second.inlined_in + ")";
    }
    o += "\n";
  }
  if (sites.size() > top) o += "(" + num(sites.size() - top) + " more sites; --top N)\n";
  return o;
}

namespace {
std::string site_json(const Site& s, const SymbolMap& syms) {
  std::string o = "{\"caller\": \"" + hex(s.caller) + "\", \"type\": \"" + type_name(s.type) + "\"";
  auto it = syms.find(s.caller);
  if (it != syms.end()) {
    o += ", \"function\": \"" + json_escape(it->second.function) + "\", \"file\": \"" + json_escape(it->second.file) +
         "\", \"line\": " + num(static_cast<uint64_t>(it->second.line));
    if (!it->second.inlined_in.empty()) o += ", \"inlined_in\": \"" + json_escape(it->second.inlined_in) + "\"";
  }
  o += ", \"allocs\": " + num(s.allocs) + ", \"frees\": " + num(s.frees) +
       ", \"bytes_requested\": " + num(s.bytes_requested) + ", \"bytes_allocated\": " + num(s.bytes_allocated) +
       ", \"fragmentation\": " + num(s.fragmentation()) + ", \"live_objects\": " + num(s.live_objects) +
       ", \"live_bytes\": " + num(s.live_bytes) + ", \"peak_live_bytes\": " + num(s.peak_live_bytes) + "}";
  return o;
}
}  // namespace

std::string sites_json(const std::vector<Site>& sites, const SymbolMap& syms, size_t top) {
  std::string o = "{\"sites\": [\n";
  for (size_t i = 0; i < sites.size() && i < top; i++) o += (i ? ",\n  " : "  ") + site_json(sites[i], syms);
  return o + "\n]}\n";
}

std::string live_text(const std::vector<Site>& sites, const SymbolMap& syms, size_t top) {
  std::vector<Site> live;
  for (auto& s : sites)
    if (s.live_objects) live.push_back(s);
  std::sort(live.begin(), live.end(), [](const Site& a, const Site& b) {
    if (a.live_bytes != b.live_bytes) return a.live_bytes > b.live_bytes;
    return a.caller < b.caller;
  });
  uint64_t objs = 0, bytes = 0;
  for (auto& s : live) {
    objs += s.live_objects;
    bytes += s.live_bytes;
  }
  std::string o =
      num(objs) + " allocations never freed (" + num(bytes) + " bytes) from " + num(live.size()) + " sites\n";
  char b[512];
  for (size_t i = 0; i < live.size() && i < top; i++) {
    snprintf(b, sizeof b, "%9" PRIu64 " objects %12" PRIu64 " bytes  %-7s ", live[i].live_objects, live[i].live_bytes,
             type_name(live[i].type));
    o += b + site_label(live[i].caller, syms) + "\n";
  }
  return o;
}

std::string live_json(const std::vector<Site>& sites, const SymbolMap& syms, size_t top) {
  std::string o = "{\"live_sites\": [\n";
  size_t n = 0;
  std::vector<Site> live;
  for (auto& s : sites)
    if (s.live_objects) live.push_back(s);
  std::sort(live.begin(), live.end(), [](const Site& a, const Site& b) {
    if (a.live_bytes != b.live_bytes) return a.live_bytes > b.live_bytes;
    return a.caller < b.caller;
  });
  for (auto& s : live) {
    if (n == top) break;
    o += (n++ ? ",\n  " : "  ") + site_json(s, syms);
  }
  return o + "\n]}\n";
}

std::string timeline_perfetto(const Timeline& tl, const kmemtrace::Trace& t, const SymbolMap& syms) {
  std::string o = "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"generator\": \"kmtrace\", \"abi_version\": " +
                  num(t.abi_version) + ", \"boot_id\": " + num(t.boot_id) +
                  ", \"time\": \"1 us = 1 event in sequence order\"},\n\"traceEvents\": [\n";
  o += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"kmemtrace\"}}";
  for (size_t i = 0; i < tl.x.size(); i++) {
    o += ",\n{\"name\": \"live bytes by type\", \"ph\": \"C\", \"ts\": " + num(tl.x[i]) +
         ", \"pid\": 1, \"tid\": 0, \"args\": {";
    for (unsigned k = 0; k < kTypeCount; k++)
      o += std::string(k ? ", " : "") + "\"" + type_name(k) + "\": " + num(tl.by_type[k][i]);
    o += "}}";
    if (!tl.site_callers.empty()) {
      o += ",\n{\"name\": \"live bytes, top sites\", \"ph\": \"C\", \"ts\": " + num(tl.x[i]) +
           ", \"pid\": 1, \"tid\": 0, \"args\": {";
      for (size_t k = 0; k < tl.site_callers.size(); k++)
        o += std::string(k ? ", " : "") + "\"" + json_escape(site_label(tl.site_callers[k], syms)) +
             "\": " + num(tl.by_site[k][i]);
      o += "}}";
    }
  }
  return o + "\n]}\n";
}

std::string timeline_svg(const Timeline& tl, const SymbolMap& syms) {
  std::vector<std::string> names;
  std::vector<const std::vector<uint64_t>*> series;
  for (unsigned k = 0; k < kTypeCount; k++) {
    names.push_back(type_name(k));
    series.push_back(&tl.by_type[k]);
  }
  std::vector<std::string> snames;
  std::vector<const std::vector<uint64_t>*> sseries;
  for (size_t k = 0; k < tl.site_callers.size(); k++) {
    std::string label = site_label(tl.site_callers[k], syms);
    if (label.size() > 60) label = label.substr(0, 57) + "...";
    snames.push_back(label);
    sseries.push_back(&tl.by_site[k]);
  }
  int height = 360 * (sseries.empty() ? 1 : 2) + 10;
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1400\" height=\"" + std::to_string(height) +
                  "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += chart(tl, "Live bytes by type", names, series, 0, 0);
  if (!sseries.empty()) o += chart(tl, "Live bytes, top allocation sites", snames, sseries, 0, 360);
  return o + "</svg>\n";
}

std::string timeline_html(const Timeline& tl, const Summary& s, const kmemtrace::Trace& t, const SymbolMap& syms) {
  std::string o =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kmemtrace timeline</title>\n"
      "<style>body{font-family:sans-serif;margin:20px} pre{background:#f4f4f4;padding:8px}</style>\n"
      "</head><body>\n<h1>kmemtrace: live bytes over time</h1>\n";
  o += "<pre>" + xml_escape(summary_text(s, t)) + "</pre>\n";
  o += timeline_svg(tl, syms);
  return o + "</body></html>\n";
}

}  // namespace kmtrace
