// SPDX-License-Identifier: Apache-2.0
// kmtrace output: text and JSON reports, Perfetto/Chrome trace-event JSON,
// and self-contained SVG / HTML pictures of live bytes over time.
#pragma once
#include <map>
#include <string>
#include <vector>
#include "analysis.h"
#include "symbolize.h"

namespace kmtrace {

using SymbolMap = std::map<uint64_t, SourceInfo>;  // empty: addresses only

std::string summary_json(const Summary& s, const kmemtrace::Trace& t);
std::string summary_text(const Summary& s, const kmemtrace::Trace& t);

std::string sites_text(const std::vector<Site>& sites, const SymbolMap& syms, size_t top);
std::string sites_json(const std::vector<Site>& sites, const SymbolMap& syms, size_t top);

// Allocations never freed, grouped by site (live_objects > 0 only).
std::string live_text(const std::vector<Site>& sites, const SymbolMap& syms, size_t top);
std::string live_json(const std::vector<Site>& sites, const SymbolMap& syms, size_t top);

// Chrome trace-event format (chrome://tracing, ui.perfetto.dev): counter
// tracks "live bytes by type" and "live bytes, top sites", one microsecond
// per event of the merged order.
std::string timeline_perfetto(const Timeline& tl, const kmemtrace::Trace& t, const SymbolMap& syms);
std::string timeline_svg(const Timeline& tl, const SymbolMap& syms);
std::string timeline_html(const Timeline& tl, const Summary& s, const kmemtrace::Trace& t, const SymbolMap& syms);

std::string json_escape(const std::string& s);
std::string site_label(uint64_t caller, const SymbolMap& syms);

}  // namespace kmtrace
