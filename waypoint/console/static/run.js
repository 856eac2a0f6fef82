// A run's page, live: Claude's words as they stream, and the run's state as it changes.
// Reads the run's Server-Sent Events; the browser reconnects and resumes by Last-Event-ID.
// The stream replays the run's past first: the state shown follows it, and only a change
// that comes after that replay offers a reload (the page's forms may be out of date then).
// A decision on a call this page offers to decide makes it out of date whenever it comes.
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource || live.dataset.ended === "1") return;
  const state = document.getElementById("state");
  const stale = document.getElementById("stale");
  const offered = new Set(
    Array.from(document.querySelectorAll("section.approval[id^='approval-']"), (s) => s.id.slice(9))
  );
  const source = new EventSource("/api/runs/" + encodeURIComponent(live.dataset.run) + "/events");
  const spoken = new Map(); // step/attempt/kind -> the last piece's seq (a reconnect resends a step)
  const streamed = new Set(); // steps whose text came as it was written
  let current = null;
  let caughtUp = false;
  let quiet = setTimeout(() => { caughtUp = true; }, 1500);
  const parse = (e) => {
    if (!caughtUp) { clearTimeout(quiet); quiet = setTimeout(() => { caughtUp = true; }, 800); }
    try { return JSON.parse(e.data); } catch (_) { return {}; }
  };
  const show = (name) => { if (state && name) { state.textContent = name; state.className = "state " + name; } };
  const outdated = () => { if (stale) stale.hidden = false; };
  const changed = () => { if (caughtUp) outdated(); };
  const say = (key, kind, words) => {
    if (!current || current.dataset.key !== key) {
      current = document.createElement("span");
      current.dataset.key = key;
      if (kind === "thinking") current.className = "thinking";
      if (live.textContent) live.appendChild(document.createTextNode("\n"));
      live.appendChild(current);
    }
    current.textContent += words;
  };
  source.addEventListener("text_delta", (e) => {
    const d = parse(e);
    if (d.final || !d.text) return;
    const key = d.step_id + "/" + d.attempt + "/" + d.kind;
    if (d.seq && (spoken.get(key) || 0) >= d.seq) return;
    spoken.set(key, d.seq || 0);
    if (d.kind === "text") streamed.add(d.step_id);
    say(key, d.kind, d.text);
  });
  // What a model step said, for a reader who was not there while it streamed.
  source.addEventListener("step_completed", (e) => {
    const d = parse(e);
    if (d.kind !== "model" || !d.text) return;
    if (!streamed.has(d.step_id)) say(d.step_id + "/done", "text", d.text);
  });
  source.addEventListener("state_changed", (e) => { show(parse(e).state); changed(); });
  source.addEventListener("approval_requested", (e) => { parse(e); changed(); });
  source.addEventListener("approval_decided", (e) => {
    if (offered.has(parse(e).step_id)) outdated(); else changed();
  });
  source.addEventListener("run_ended", (e) => {
    show(parse(e).state);
    if (offered.size) outdated(); else changed();
  });
  source.addEventListener("end", () => source.close());
})();
