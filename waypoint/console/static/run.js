// A run's page, live: Claude's words as they stream, and the run's state as it changes.
// Reads the run's Server-Sent Events; the browser reconnects and resumes by Last-Event-ID.
// The stream replays the run's past first: the state shown follows it, and only a change
// that comes after that replay offers a reload (the page's forms may be out of date then).
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource || live.dataset.ended === "1") return;
  const state = document.getElementById("state");
  const stale = document.getElementById("stale");
  const source = new EventSource("/api/runs/" + encodeURIComponent(live.dataset.run) + "/events");
  let current = null;
  let caughtUp = false;
  let quiet = setTimeout(() => { caughtUp = true; }, 1500);
  const parse = (e) => {
    if (!caughtUp) { clearTimeout(quiet); quiet = setTimeout(() => { caughtUp = true; }, 800); }
    try { return JSON.parse(e.data); } catch (_) { return {}; }
  };
  const show = (name) => { if (state && name) { state.textContent = name; state.className = "state " + name; } };
  const changed = () => { if (caughtUp && stale) stale.hidden = false; };
  source.addEventListener("text_delta", (e) => {
    const d = parse(e);
    if (d.final || !d.text) return;
    const key = d.step_id + "/" + d.attempt + "/" + d.kind;
    if (!current || current.dataset.key !== key) {
      current = document.createElement("span");
      current.dataset.key = key;
      if (d.kind === "thinking") current.className = "thinking";
      if (live.textContent) live.appendChild(document.createTextNode("\n"));
      live.appendChild(current);
    }
    current.textContent += d.text;
  });
  source.addEventListener("state_changed", (e) => { show(parse(e).state); changed(); });
  source.addEventListener("approval_requested", (e) => { parse(e); changed(); });
  source.addEventListener("approval_decided", (e) => { parse(e); changed(); });
  source.addEventListener("run_ended", (e) => { show(parse(e).state); changed(); });
  source.addEventListener("end", () => source.close());
})();
