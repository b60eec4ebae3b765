// The HTML failure report (report_html.hpp).
#include "report_html.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "campaign.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/judge.hpp"

namespace replayssm::cli {

using nlohmann::json;

namespace {

// Slot -> request id of every resident request of the oracle engine.
std::map<std::int32_t, std::int32_t> occupancy(const ref::Engine& e) {
  std::map<std::int32_t, std::int32_t> m;
  for (const auto& [id, r] : e.requests())
    if (r.slot != kPadSlot) m[r.slot] = id;
  return m;
}

// The failing comparison's tensors per head: the heads with the largest error first, at most kMaxHeads.
json tensor_of(const ModelConfig& cfg, const ref::Judge::FailedValues& v, const CompareReport& rep) {
  const int HV = cfg.HV, V = cfg.V, K = cfg.K;
  const std::size_t n = v.ref.size();
  json t;
  t["what"] = v.state ? "committed state" : "outputs";
  int rows = 0, cols = 0;
  std::string row_name, col_name;
  if (v.state) {
    const bool kv = cfg.layout == StateLayout::KV;
    rows = kv ? K : V, cols = kv ? V : K;
    row_name = kv ? "k" : "v", col_name = kv ? "v" : "k";
  } else {
    rows = static_cast<int>(n / (static_cast<std::size_t>(HV) * V)), cols = V;
    row_name = "token", col_name = "v";
  }
  require(static_cast<std::size_t>(rows) * cols * HV == n, "report", "a failed tensor of ", n,
          " values does not divide into ", HV, " heads");
  // Element (head, r, c) -> flat index.
  auto at = [&](int h, int r, int c) -> std::size_t {
    return v.state ? (static_cast<std::size_t>(h) * rows + r) * cols + c : (static_cast<std::size_t>(r) * HV + h) * V + c;
  };
  std::vector<std::pair<double, int>> err;
  for (int h = 0; h < HV; ++h) {
    double m = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const double d = std::fabs(static_cast<double>(v.got[at(h, r, c)]) - v.ref[at(h, r, c)]);
        m = std::max(m, std::isnan(d) ? HUGE_VAL : d);
      }
    err.emplace_back(m, h);
  }
  std::stable_sort(err.begin(), err.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  json heads = json::array();
  for (int i = 0; i < HV && i < kMaxHeads; ++i) {
    const int h = err[static_cast<std::size_t>(i)].second;
    json e = json::array(), g = json::array();
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        e.push_back(v.ref[at(h, r, c)]);
        g.push_back(v.got[at(h, r, c)]);
      }
    heads.push_back({{"head", h}, {"max_abs_diff", std::isinf(err[static_cast<std::size_t>(i)].first) ? -1.0 : err[static_cast<std::size_t>(i)].first},
                     {"expected", e}, {"obtained", g}});
  }
  t["rows"] = rows, t["cols"] = cols, t["row_name"] = row_name, t["col_name"] = col_name;
  t["heads_total"] = HV;
  t["heads"] = heads;
  t["comparison"] = rep.str();
  return t;
}

}  // namespace

json html_data_from_dump(const std::string& dump_path) {
  const auto c = fuzz::load_dump(dump_path);
  json data;
  data["title"] = "replayssm failure: " + c.target + (c.fault == ref::Fault::None ? "" : " (fault " + ref::to_string(c.fault) + ")");
  json cs;
  cs["dump"] = dump_path;
  cs["target"] = c.target;
  cs["fault"] = ref::to_string(c.fault);
  cs["num_slots"] = c.setup.num_slots;
  cs["config"] = c.setup.cfg.name + " H=" + std::to_string(c.setup.cfg.H) + " HV=" + std::to_string(c.setup.cfg.HV) +
                 " K=" + std::to_string(c.setup.cfg.K) + " V=" + std::to_string(c.setup.cfg.V) + " state " +
                 std::string(dtype_name(c.setup.cfg.state_dtype)) + ", " + to_string(c.setup.cfg.layout);
  ref::Judge judge(c.setup, c.target, c.fault);
  json cmds = json::array();
  long divergent = -1;
  for (std::size_t i = 0; i < c.commands.size() && divergent < 0; ++i) {
    const auto& cmd = c.commands[i];
    const auto before = occupancy(judge.oracle());
    std::string why;
    try {
      why = judge.apply(cmd);
    } catch (const Error& e) {
      why = std::string("the command itself is invalid: ") + e.what();
    }
    const auto after = occupancy(judge.oracle());
    json rows = json::array();  // slots a step ran rows on
    if (cmd.kind == ref::Cmd::Kind::Step)
      for (const auto& r : judge.oracle().last_rows()) {
        if (r.req < 0) continue;
        for (const auto& [slot, id] : before)
          if (id == r.req) rows.push_back({{"slot", slot}, {"T", r.T}, {"prefill", r.prefill}, {"accepted", r.accepted}});
      }
    json occ = json::object();
    for (const auto& [slot, id] : after) occ[std::to_string(slot)] = id;
    cmds.push_back({{"index", i}, {"kind", ref::to_string(cmd.kind)}, {"text", cmd.str()}, {"slots", occ}, {"rows", rows}});
    if (!why.empty()) {
      divergent = static_cast<long>(i);
      cs["reason"] = why;
      cs["call"] = judge.failed_call();
      if (judge.failed_check()) cs["check"] = ref::to_string(*judge.failed_check());
      if (judge.failed_values() && judge.failed_comparison())
        data["tensor"] = tensor_of(c.setup.cfg, *judge.failed_values(), *judge.failed_comparison());
    }
  }
  cs["commands"] = cmds;
  cs["divergent"] = divergent;
  cs["commands_in_dump"] = c.commands.size();
  data["case"] = cs;
  return data;
}

json html_data_from_report(const json& report) {
  json data;
  data["title"] = "replayssm " + report.value("command", std::string("report")) + ": " + report.value("verdict", std::string("?"));
  data["verdict"] = report.value("verdict", std::string());
  data["verdicts"] = report.value("verdicts", json::array());
  // The first failed campaign with a dump that is still there: its case drawn too.
  const json camps = report.contains("campaigns") ? report.at("campaigns") : report.value("fuzz", json::array());
  for (const auto& camp : camps) {
    if (!camp.value("failed", false)) continue;
    const std::string dump = camp.value("dump_path", std::string());
    if (!dump.empty() && std::filesystem::exists(dump)) {
      const json d = html_data_from_dump(dump);
      data["case"] = d.at("case");
      if (d.contains("tensor")) data["tensor"] = d.at("tensor");
    } else {
      data["case"] = {{"reason", camp.value("reason", std::string())}, {"dump", dump}, {"commands", json::array()},
                      {"divergent", -1}, {"note", "the campaign's dump is not here: only its reason is shown"}};
    }
    break;
  }
  return data;
}

namespace {
const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
.verdict { font-weight: bold; padding: 0.1em 0.4em; border-radius: 3px; }
.v-CONFORMANT { background: #cfc; } .v-NOT { background: #fcc; } .v-INCOMPLETE { background: #ffd9a0; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 2px 5px; font-size: 12px; }
#timeline td.row { background: #dde8ff; } #timeline td.prefill { background: #e5f5dd; }
#timeline .divergent { background: #f66 !important; color: #fff; }
#commands li.divergent { background: #fdd; font-weight: bold; }
.heads { display: flex; flex-wrap: wrap; gap: 1.2em; } .head canvas { image-rendering: pixelated; border: 1px solid #999; margin-right: 4px; }
code, pre { font-size: 12px; } pre { white-space: pre-wrap; background: #f6f6f6; padding: 0.5em; }
)CSS";

const char* kScript = R"JS(
const data = JSON.parse(document.getElementById('replayssm-data').textContent);
const el = (tag, attrs, text) => { const e = document.createElement(tag); for (const k in (attrs || {})) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text; return e; };
const main = document.getElementById('main');
main.appendChild(el('h1', {}, data.title || 'replayssm report'));
if (data.verdicts && data.verdicts.length) {
  main.appendChild(el('h2', {}, 'Verdicts'));
  for (const v of data.verdicts) {
    const p = el('p'); p.appendChild(el('span', {}, (v.target || '') + ': '));
    p.appendChild(el('span', {class: 'verdict v-' + String(v.verdict).split(' ')[0], id: 'verdict-' + (v.target || '')}, v.verdict));
    main.appendChild(p);
    if (v.unmet && v.unmet.length) { const ul = el('ul'); for (const u of v.unmet) ul.appendChild(el('li', {}, 'not exercised: ' + u)); main.appendChild(ul); }
    const m = (v.coverage || {}).matrix || {};
    const t = el('table', {class: 'coverage'}); const hr = el('tr'); hr.appendChild(el('th', {}, 'dimension')); hr.appendChild(el('th', {}, 'value: cases / rows')); t.appendChild(hr);
    for (const dim of Object.keys(m).sort()) {
      const tr = el('tr'); tr.appendChild(el('td', {}, dim));
      tr.appendChild(el('td', {}, Object.keys(m[dim]).map(k => k + ': ' + m[dim][k].cases + ' / ' + m[dim][k].rows).join(',  ')));
      t.appendChild(tr);
    }
    main.appendChild(t);
  }
}
const cs = data['case'];
if (cs) {
  main.appendChild(el('h2', {}, 'The failing case'));
  main.appendChild(el('p', {}, (cs.target ? 'target ' + cs.target + ', fault ' + cs.fault + ', ' + cs.config + '. ' : '') +
    (cs.dump ? 'dump: ' + cs.dump : '')));
  if (cs.reason) { main.appendChild(el('pre', {id: 'reason'}, (cs.check ? 'check ' + cs.check + ' (after ' + cs.call + '): ' : '') + cs.reason)); }
  if (cs.note) main.appendChild(el('p', {}, cs.note));
  const cmds = cs.commands || [];
  if (cmds.length) {
    main.appendChild(el('h2', {}, 'Timeline (slots by command; a step\u2019s rows shaded; the first divergent command marked)'));
    const t = el('table', {id: 'timeline'}); const hr = el('tr'); hr.appendChild(el('th', {}, 'slot'));
    for (const c of cmds) {
      const attrs = {title: c.text, 'data-command': String(c.index)};
      if (c.index === cs.divergent) { attrs.id = 'first-divergence'; attrs.class = 'divergent'; }
      hr.appendChild(el('th', attrs, c.index + ' ' + c.kind));
    }
    t.appendChild(hr);
    for (let s = 0; s < cs.num_slots; s++) {
      const tr = el('tr'); tr.appendChild(el('th', {}, String(s)));
      for (const c of cmds) {
        const row = (c.rows || []).find(r => r.slot === s);
        const req = c.slots[String(s)];
        const cls = [row ? (row.prefill ? 'prefill' : 'row') : '', c.index === cs.divergent ? 'divergent' : ''].join(' ').trim();
        const text = (req !== undefined ? 'r' + req : '') + (row ? ' T' + row.T + (row.prefill ? ' pf' : (row.accepted >= 0 ? ' n' + row.accepted : '')) : '');
        tr.appendChild(el('td', cls ? {class: cls} : {}, text));
      }
      t.appendChild(tr);
    }
    main.appendChild(t);
    const ol = el('ol', {id: 'commands', start: '0'});
    for (const c of cmds) ol.appendChild(el('li', c.index === cs.divergent ? {class: 'divergent', id: 'divergent-command'} : {}, c.text));
    main.appendChild(ol);
  }
}
const tn = data.tensor;
if (tn) {
  main.appendChild(el('h2', {}, 'The worst tensor of the first divergence: ' + tn.what + ' (expected, obtained, difference per head)'));
  main.appendChild(el('pre', {}, tn.comparison));
  main.appendChild(el('p', {}, 'rows: ' + tn.row_name + ', columns: ' + tn.col_name + '; ' + tn.heads.length + ' of ' + tn.heads_total + ' heads, the largest errors first; colour scale symmetric about 0 per map.'));
  const wrap = el('div', {class: 'heads', id: 'heads'});
  const color = (x, m) => { if (x === null || !isFinite(x)) return [0, 0, 0]; const a = m > 0 ? Math.max(-1, Math.min(1, x / m)) : 0;
    return a >= 0 ? [255, Math.round(255 * (1 - a)), Math.round(255 * (1 - a))] : [Math.round(255 * (1 + a)), Math.round(255 * (1 + a)), 255]; };
  const draw = (vals, title) => {
    const cell = Math.max(2, Math.min(12, Math.floor(256 / Math.max(tn.rows, tn.cols))));
    const c = el('canvas', {width: tn.cols * cell, height: tn.rows * cell, title: title, 'data-map': title});
    const g = c.getContext('2d'); let m = 0; for (const x of vals) if (x !== null && isFinite(x)) m = Math.max(m, Math.abs(x));
    for (let r = 0; r < tn.rows; r++) for (let k = 0; k < tn.cols; k++) { const [R, G, B] = color(vals[r * tn.cols + k], m); g.fillStyle = `rgb(${R},${G},${B})`; g.fillRect(k * cell, r * cell, cell, cell); }
    c.setAttribute('data-drawn', '1'); c.setAttribute('data-max-abs', String(m)); return c;
  };
  for (const h of tn.heads) {
    const d = h.expected.map((x, i) => (x === null || h.obtained[i] === null) ? null : h.obtained[i] - x);
    const box = el('div', {class: 'head', 'data-head': String(h.head)});
    box.appendChild(el('div', {}, 'head ' + h.head + ' (max |difference| ' + (h.max_abs_diff < 0 ? 'non-finite' : h.max_abs_diff.toPrecision(3)) + ')'));
    box.appendChild(draw(h.expected, 'expected')); box.appendChild(draw(h.obtained, 'obtained')); box.appendChild(draw(d, 'difference'));
    wrap.appendChild(box);
  }
  main.appendChild(wrap);
}
document.body.setAttribute('data-rendered', '1');
)JS";
}  // namespace

std::string render_html(const json& data) {
  std::string payload = data.dump();
  // The data sits in a <script> element: no "</" may end it early.
  std::string safe;
  safe.reserve(payload.size());
  for (std::size_t i = 0; i < payload.size(); ++i) {
    if (payload[i] == '<' && i + 1 < payload.size() && payload[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += payload[i];
    }
  }
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>replayssm report</title><style>" << kStyle
     << "</style></head>\n<body><div id=\"main\"></div>\n<script type=\"application/json\" id=\"replayssm-data\">" << safe
     << "</script>\n<script>" << kScript << "</script>\n</body></html>\n";
  return os.str();
}

}  // namespace replayssm::cli
