// A step's evidence cut to a preview opens whole in place: its API answer replaces the preview.
// Without scripts the link opens the step's own page, which holds it whole.
(function () {
  document.addEventListener("click", async (event) => {
    const link = event.target.closest && event.target.closest("a.whole[data-api]");
    if (!link) return;
    event.preventDefault();
    const box = link.closest("details.evidence");
    try {
      const answer = await fetch(link.dataset.api, { headers: { Accept: "application/json" } });
      if (!answer.ok) throw new Error(String(answer.status));
      const whole = await answer.json();
      for (const part of ["arguments", "result"]) {
        const pre = box.querySelector(`pre[data-part="${part}"]`);
        if (pre) pre.textContent = whole[part];
      }
      link.parentElement.textContent = "Shown whole.";
    } catch (_) {
      window.location.href = link.href;
    }
  });
})();
