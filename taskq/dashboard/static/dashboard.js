// taskq dashboard: live blocks and confirmations. No framework, no build step.
// An element with data-live="URL" is refreshed every 2 s from URL?part=live (server-rendered,
// escaped HTML); a button with data-confirm="..." asks before its form is sent.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var status = document.getElementById("live-status");

  function show(text, ok) {
    if (!status) return;
    status.textContent = text;
    status.className = "live-status " + (ok ? "ok" : "down");
  }

  function refresh(el) {
    if (document.hidden) return;
    var url = el.getAttribute("data-live");
    url += (url.indexOf("?") < 0 ? "?" : "&") + "part=live";
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        el.innerHTML = html;
        show("live · " + new Date().toLocaleTimeString(), true);
      })
      .catch(function (err) { show("offline (" + err.message + ")", false); });
  }

  document.querySelectorAll("[data-live]").forEach(function (el) {
    show("live", true);
    setInterval(function () { refresh(el); }, PERIOD_MS);
  });

  document.addEventListener("submit", function (ev) {
    var button = ev.submitter || ev.target.querySelector("[data-confirm]");
    var question = button && button.getAttribute("data-confirm");
    if (question && !window.confirm(question)) ev.preventDefault();
  });
})();
