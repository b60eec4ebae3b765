// JSON request parsing and the positions report of `replayssm mrope positions`.
#include "replayssm/mrope/mrope_json.hpp"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::mrope {

namespace {

using ojson = nlohmann::ordered_json;

std::string key_field(const std::string& field, const std::string& key) { return field + "." + key; }

std::int64_t get_int(const nlohmann::json& v, const std::string& field) {
  require(v.is_number_integer(), field, "must be an integer, got ", v.dump());
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    require(u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), field, "is too large");
    return static_cast<std::int64_t>(u);
  }
  return v.get<std::int64_t>();
}

double get_number(const nlohmann::json& v, const std::string& field) {
  require(v.is_number(), field, "must be a number, got ", v.dump());
  return v.get<double>();
}

void only_keys(const nlohmann::json& obj, const std::set<std::string>& allowed, const std::string& field) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!allowed.count(it.key())) {
      std::ostringstream known;
      for (const auto& k : allowed) known << (known.tellp() > 0 ? ", " : "") << k;
      fail(key_field(field, it.key()), "unknown key (allowed here: ", known.str(), ")");
    }
  }
}

Segment segment_from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_object(), field, "must be an object like {\"type\": \"text\", \"length\": 3}");
  require(j.contains("type"), key_field(field, "type"), "is missing (text, image or video)");
  require(j.at("type").is_string(), key_field(field, "type"), "must be a string");
  const std::string type = j.at("type").get<std::string>();
  Segment s;
  if (type == "text") {
    only_keys(j, {"type", "length"}, field);
    require(j.contains("length"), key_field(field, "length"), "is missing");
    s = Segment::text(get_int(j.at("length"), key_field(field, "length")));
    return s;
  }
  if (type != "image" && type != "video") fail(key_field(field, "type"), "must be text, image or video, got '", type, "'");
  if (type == "image") {
    only_keys(j, {"type", "grid"}, field);
  } else {
    only_keys(j, {"type", "grid", "second_per_grid", "fps", "frame_text"}, field);
  }
  const std::string gf = key_field(field, "grid");
  require(j.contains("grid"), gf, "is missing ([T, H, W] in patches before the spatial merge)");
  require(j.at("grid").is_array() && j.at("grid").size() == 3, gf, "must be an array [T, H, W]");
  std::array<std::int64_t, 3> g{};
  for (std::size_t a = 0; a < 3; ++a) g[a] = get_int(j.at("grid")[a], gf + "[" + std::to_string(a) + "]");
  if (type == "image") return Segment::image(g[0], g[1], g[2]);
  s = Segment::video(g[0], g[1], g[2]);
  if (j.contains("second_per_grid")) {
    s.second_per_grid = get_number(j.at("second_per_grid"), key_field(field, "second_per_grid"));
  }
  if (j.contains("fps")) s.fps = get_number(j.at("fps"), key_field(field, "fps"));
  if (j.contains("frame_text")) {
    const std::string ff = key_field(field, "frame_text");
    require(j.at("frame_text").is_array(), ff, "must be an array with one text length per frame");
    for (std::size_t f = 0; f < j.at("frame_text").size(); ++f) {
      s.frame_text.push_back(get_int(j.at("frame_text")[f], ff + "[" + std::to_string(f) + "]"));
    }
  }
  return s;
}

ojson rows_json(const std::vector<Pos3>& pos) {
  ojson rows = ojson::array();
  for (int a = 0; a < 3; ++a) {
    ojson row = ojson::array();
    for (const Pos3& p : pos) row.push_back(p[static_cast<std::size_t>(a)]);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string axes_letters(const Rotary& rot) {
  std::string s;
  for (int a : frequency_axes(rot)) s += "THW"[a];
  return s;
}

// Re-raises an error of a tracker operation under the JSON path of the step.
[[noreturn]] void rethrow_step(const Error& e, const std::string& step_field, const std::string& op_key) {
  std::string msg = e.what();
  if (!e.field().empty() && msg.rfind(e.field() + ": ", 0) == 0) msg = msg.substr(e.field().size() + 2);
  std::string field = step_field;
  if (e.field() == "accepted") {
    field = key_field(step_field, "accepted");
  } else if (e.field() != "state") {
    field = key_field(step_field, op_key);
  }
  throw Error(field, msg);
}

ojson run_step(PositionTracker& tr, const nlohmann::json& st, const std::string& field, std::int64_t& budget) {
  require(st.is_object(), field, "must be an object such as {\"prefill\": 4}");
  static const std::vector<std::string> kinds = {"prefill", "verify", "draft", "stop", "restart", "turn"};
  std::string kind;
  for (const auto& k : kinds) {
    if (st.contains(k)) {
      require(kind.empty(), field, "has both '", kind, "' and '", k, "'; one operation per step");
      kind = k;
    }
  }
  require(!kind.empty(), field, "needs one of prefill, verify, draft, stop, restart, turn");
  only_keys(st, kind == "verify" ? std::set<std::string>{"verify", "accepted"} : std::set<std::string>{kind},
            field);
  ojson out;
  out["step"] = kind;
  if (kind == "turn") {
    require(st.at("turn").is_array(), key_field(field, "turn"), "must be an array of segments");
    const std::string tf = key_field(field, "turn");
    const std::vector<Segment> segs = segments_from_json(st.at("turn"), tf);
    try {
      tr.continue_turn(segs, tf);
    } catch (const Error& e) {
      if (e.field() == "state") rethrow_step(e, field, "turn");
      throw;
    }
    const PromptPlan plan(tr.preset(), tr.request());
    out["prompt_len"] = tr.prompt_len();
    out["delta"] = plan.delta();
  } else {
    const std::int64_t value = get_int(st.at(kind), key_field(field, kind));
    if (kind != "stop" && value > 0) {
      // What the step walks or emits; the whole schedule is capped so that no request runs unbounded.
      require(value <= budget, key_field(field, kind), "the schedule feeds more than ", kMaxScheduleTokens,
              " tokens in total (prefill, verify, draft and restart counts)");
      budget -= value;
    }
    try {
      if (kind == "prefill" || kind == "verify" || kind == "draft") {
        Window w;
        if (kind == "prefill") {
          w = tr.prefill(value);
        } else if (kind == "verify") {
          require(st.contains("accepted"), key_field(field, "accepted"), "is missing (1 <= accepted <= T)");
          const std::int64_t n = get_int(st.at("accepted"), key_field(field, "accepted"));
          w = tr.verify(value, n);
          out["T"] = value;
          out["accepted"] = n;
        } else {
          w = tr.draft(value);
        }
        out["begin"] = w.begin;
        out["positions"] = rows_json(w.pos);
      } else if (kind == "stop") {
        tr.stop(value);
        out["keep"] = value;
      } else {
        tr.restart_from(value);
        out["from"] = value;
      }
    } catch (const Error& e) {
      if (e.field().rfind("steps[", 0) == 0) throw;
      rethrow_step(e, field, kind);
    }
  }
  out["num_computed"] = tr.num_computed();
  out["seq_len"] = tr.seq_len();
  return out;
}

}  // namespace

std::vector<Segment> segments_from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_array(), field, "must be an array of segments");
  std::vector<Segment> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    out.push_back(segment_from_json(j[i], field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

ojson request_to_json(const Request& request) {
  ojson segs = ojson::array();
  for (const Segment& s : request.segments) {
    ojson o;
    o["type"] = to_string(s.kind);
    if (s.kind == SegmentKind::Text) {
      o["length"] = s.length;
    } else {
      o["grid"] = {s.grid[0], s.grid[1], s.grid[2]};
      if (s.second_per_grid) o["second_per_grid"] = *s.second_per_grid;
      if (s.fps) o["fps"] = *s.fps;
      if (!s.frame_text.empty()) o["frame_text"] = s.frame_text;
    }
    segs.push_back(std::move(o));
  }
  ojson out;
  out["segments"] = std::move(segs);
  return out;
}

ojson positions_report(const Preset& preset, const nlohmann::json& doc) {
  require(doc.is_object(), "request", "must be a JSON object with a \"segments\" array");
  only_keys(doc, {"description", "segments", "generated", "steps"}, "request");
  if (doc.contains("description")) require(doc.at("description").is_string(), "description", "must be a string");
  require(doc.contains("segments"), "segments", "is missing");
  Request request{segments_from_json(doc.at("segments"), "segments")};
  std::int64_t generated = 0;
  if (doc.contains("generated")) {
    generated = get_int(doc.at("generated"), "generated");
    require(generated >= 0 && generated <= kMaxTokens, "generated", "must be in [0, ", kMaxTokens, "], got ",
            generated);
  }
  const PromptPlan plan(preset, request);
  const Rotary rot = Rotary::from(preset);

  ojson out;
  out["model"] = preset.name;
  out["rotary_dim"] = rot.rotary_dim;
  out["layout"] = to_string(rot.layout);
  out["frequency_axes"] = axes_letters(rot);
  out["prompt_len"] = plan.prompt_len();
  out["delta"] = plan.delta();
  out["generated"] = generated;
  out["positions"] = rows_json(plan.positions(0, plan.prompt_len() + generated));
  if (doc.contains("steps")) {
    require(doc.at("steps").is_array(), "steps", "must be an array of steps");
    PositionTracker tr(preset, request);
    ojson steps = ojson::array();
    std::int64_t budget = kMaxScheduleTokens;
    for (std::size_t i = 0; i < doc.at("steps").size(); ++i) {
      steps.push_back(run_step(tr, doc.at("steps")[i], "steps[" + std::to_string(i) + "]", budget));
    }
    out["steps"] = std::move(steps);
  }
  return out;
}

std::string format_report(const ojson& report) {
  std::ostringstream os;
  os << "{\n";
  std::size_t i = 0;
  for (auto it = report.begin(); it != report.end(); ++it, ++i) {
    os << "  " << ojson(it.key()).dump() << ": ";
    if (it.key() == "steps") {
      os << "[\n";
      for (std::size_t s = 0; s < it.value().size(); ++s) {
        os << "    " << it.value()[s].dump() << (s + 1 < it.value().size() ? ",\n" : "\n");
      }
      os << "  ]";
    } else {
      os << it.value().dump();
    }
    os << (i + 1 < report.size() ? ",\n" : "\n");
  }
  os << "}\n";
  return os.str();
}

std::string positions_report_text(const std::string& model, const std::string& path) {
  const Preset preset = get_preset(model);
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "request", "cannot open '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = parse_request_text(text.str());
  } catch (const Error& e) {
    fail("request", "'", path, "' ", std::string(e.what()).substr(e.field().size() + 2));
  }
  return format_report(positions_report(preset, doc));
}

nlohmann::json parse_request_text(std::string_view text) { return parse_strict_json(text, "request"); }

}  // namespace replayssm::mrope
