// A run's page, live: Claude's words as they stream, the run's state in words, and its figures
// (turn, steps, tokens, cost) as steps finish. Reads the run's Server-Sent Events; the browser
// reconnects and resumes by Last-Event-ID. The stream replays the run's past first: the state
// shown follows it, and only a change that comes after that replay offers a reload (the page's
// forms may be out of date then). A decision on a call this page offers to decide makes it out
// of date whenever it comes. Tolerant by design: an event type it does not know, or a field an
// event lacks, is passed over.
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource || live.dataset.ended === "1") return;
  const state = document.getElementById("state");
  const means = document.getElementById("means");
  const stale = document.getElementById("stale");
  let words = {};
  try { words = JSON.parse(document.getElementById("state-words").textContent); } catch (_) {}
  const offered = new Set(
    Array.from(document.querySelectorAll("section.approval[id^='approval-']"), (s) => s.id.slice(9))
  );
  // Figures: what the page was rendered with, plus what steps it did not count yet add.
  const figure = (id) => document.getElementById(id);
  const known = new Set(); // every step id the page knows of
  const counted = new Set(); // steps whose tokens and cost the rendered figures hold
  document.querySelectorAll("tr[data-step]").forEach((row) => {
    known.add(row.dataset.step);
    if (row.dataset.status === "completed") counted.add(row.dataset.step);
  });
  const number = (id) => Number((figure(id) && figure(id).textContent.replace(/[^0-9.]/g, "")) || 0);
  const totals = { turn: number("fig-turn"), steps: number("fig-steps"), tokens: number("fig-tokens"), cost: number("fig-cost") };
  const money = (usd) => "$" + usd.toLocaleString("en-US", { minimumFractionDigits: 4, maximumFractionDigits: 4 });
  const put = (id, text) => { const el = figure(id); if (el && el.textContent !== text) el.textContent = text; };
  const figures = () => {
    put("fig-turn", String(totals.turn));
    put("fig-steps", String(totals.steps));
    put("fig-tokens", String(totals.tokens));
    if (figure("fig-cost") && figure("fig-cost").textContent !== "n/a") put("fig-cost", money(totals.cost));
  };

  const source = new EventSource("/api/runs/" + encodeURIComponent(live.dataset.run) + "/events");
  const spoken = new Map(); // step/attempt/kind -> the last piece's seq (a reconnect resends a step)
  const streamed = new Set(); // steps whose text came as it was written
  let current = null;
  let caughtUp = false;
  let quiet = setTimeout(() => { caughtUp = true; }, 1500);
  const parse = (e) => {
    if (!caughtUp) { clearTimeout(quiet); quiet = setTimeout(() => { caughtUp = true; }, 800); }
    try { return JSON.parse(e.data) || {}; } catch (_) { return {}; }
  };
  const show = (name) => {
    if (!state || !name) return;
    const said = words[name] || {};
    state.textContent = said.label || name;
    state.dataset.state = name;
    state.className = "state " + name;
    if (means) means.textContent = said.means || "";
  };
  const outdated = () => { if (stale) stale.hidden = false; };
  const changed = () => { if (caughtUp) outdated(); };
  const say = (key, kind, text) => {
    if (!current || current.dataset.key !== key) {
      current = document.createElement("span");
      current.dataset.key = key;
      if (kind === "thinking") current.className = "thinking";
      if (live.textContent) live.appendChild(document.createTextNode("\n"));
      live.appendChild(current);
    }
    current.textContent += text;
  };
  source.addEventListener("text_delta", (e) => {
    const d = parse(e);
    if (d.final || !d.text) return;
    const key = d.step_id + "/" + d.attempt + "/" + (d.kind || "text");
    if (d.seq && (spoken.get(key) || 0) >= d.seq) return;
    spoken.set(key, d.seq || 0);
    if (d.kind !== "thinking") streamed.add(d.step_id);
    say(key, d.kind, d.text);
  });
  source.addEventListener("step_scheduled", (e) => {
    const d = parse(e);
    if (d.turn > totals.turn) totals.turn = d.turn;
    if (d.step_id && !known.has(d.step_id)) { known.add(d.step_id); totals.steps += 1; }
    figures();
  });
  source.addEventListener("step_completed", (e) => {
    const d = parse(e);
    if (d.step_id && !counted.has(d.step_id)) {
      counted.add(d.step_id);
      totals.tokens += d.tokens || 0;
      totals.cost += d.cost_usd || 0;
      figures();
    }
    // What a model step said, for a reader who was not there while it streamed.
    if (d.kind === "model" && d.text && !streamed.has(d.step_id)) say(d.step_id + "/done", "text", d.text);
  });
  source.addEventListener("state_changed", (e) => { show(parse(e).state); changed(); });
  source.addEventListener("approval_requested", (e) => { parse(e); changed(); });
  source.addEventListener("approval_decided", (e) => {
    if (offered.has(parse(e).step_id)) outdated(); else changed();
  });
  source.addEventListener("run_ended", (e) => {
    const d = parse(e);
    show(d.state);
    // The run's own totals, whatever the page counted.
    if (d.turns) totals.turn = d.turns;
    if (d.total_tokens) totals.tokens = d.total_tokens;
    if (d.cost_usd) totals.cost = d.cost_usd;
    figures();
    if (offered.size) outdated(); else changed();
  });
  source.addEventListener("end", () => source.close());
})();
