// taskq dashboard: live blocks and confirmations. No framework, no build step.
// An element with data-live="URL" data-live-block="NAME" is refreshed every 2 s from
// URL?part=live: server-rendered, escaped HTML that the server marks with the header
// "x-taskq-live: NAME". Any other answer (a JSON endpoint, another page's block, another
// origin's) is refused, and fetched text never goes through innerHTML: the block is parsed
// into an inert document and its nodes moved in. A button with data-confirm="..." asks
// before its form is sent.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var status = document.getElementById("live-status");

  function show(text, ok) {
    if (!status) return;
    status.textContent = text;
    status.className = "live-status " + (ok ? "ok" : "down");
  }

  function liveBlock(r, name) {
    if (!r.ok) throw new Error("HTTP " + r.status);
    var type = r.headers.get("content-type") || "";
    if (new URL(r.url).origin !== location.origin || r.headers.get("x-taskq-live") !== name ||
        type.indexOf("text/html") !== 0) {
      throw new Error("not this page's live block");
    }
    return r.text();
  }

  function swap(el, html) {
    var parsed = new DOMParser().parseFromString(html, "text/html");
    el.replaceChildren.apply(el, Array.from(parsed.body.childNodes));
  }

  function refresh(el) {
    if (document.hidden) return;
    var name = el.getAttribute("data-live-block");
    var url = new URL(el.getAttribute("data-live"), location.href);
    url.searchParams.set("part", "live");
    fetch(url, { credentials: "same-origin", redirect: "error", headers: { "Accept": "text/html" } })
      .then(function (r) { return liveBlock(r, name); })
      .then(function (html) {
        swap(el, html);
        show("live · " + new Date().toLocaleTimeString(), true);
      })
      .catch(function (err) { show("offline (" + err.message + ")", false); });
  }

  document.querySelectorAll("[data-live]").forEach(function (el) {
    show("live", true);
    setInterval(function () { refresh(el); }, PERIOD_MS);
  });

  // A job page's live view: Server-Sent Events of its progress, output and logs (JSON; the
  // text goes in through textContent and text nodes only). Stops at the job's end.
  var MAX_LINES = 2000;
  function appendLine(el, text) {
    el.appendChild(document.createTextNode(text + "\n"));
    while (el.childNodes.length > MAX_LINES) el.removeChild(el.firstChild);
  }
  document.querySelectorAll("[data-telemetry]").forEach(function (el) {
    if (!window.EventSource) return;
    var url = new URL(el.getAttribute("data-telemetry"), location.href);
    if (url.origin !== location.origin) return;
    var source = new EventSource(url);
    var bar = document.getElementById("job-progress");
    var label = document.getElementById("job-progress-text");
    var output = document.getElementById("job-output");
    var logs = document.getElementById("job-logs");
    source.addEventListener("progress", function (ev) {
      var p = JSON.parse(ev.data);
      if (p.total) { bar.max = p.total; bar.value = p.done; } else { bar.removeAttribute("value"); }
      label.textContent = p.done + (p.total !== null ? " / " + p.total : "") +
        (p.message ? " · " + p.message : "");
    });
    source.addEventListener("chunk", function (ev) {
      var c = JSON.parse(ev.data);
      appendLine(output, c.attempt > 1 ? "[" + c.attempt + "] " + c.text : c.text);
    });
    source.addEventListener("log", function (ev) {
      var r = JSON.parse(ev.data);
      appendLine(logs, new Date(r.time_ms).toISOString() + " " + r.level + " " + r.message);
    });
    source.addEventListener("end", function (ev) {
      el.setAttribute("data-ended", JSON.parse(ev.data).state);
      source.close();
    });
  });

  document.addEventListener("submit", function (ev) {
    var button = ev.submitter || ev.target.querySelector("[data-confirm]");
    var question = button && button.getAttribute("data-confirm");
    if (question && !window.confirm(question)) ev.preventDefault();
  });
})();
