// The dashboard's live update: on every change event from /ui/events (a file changed, or the
// background memory check stored a new result), fetch the numbers from /ui/overview.json and
// redraw them in place. Text only (textContent), never HTML.
(function () {
  "use strict";
  var cards = document.querySelector("[data-live]");
  if (!cards) { return; }
  var source = cards.getAttribute("data-live");
  var status = document.getElementById("live-status");
  var pending = null;

  function percent(value) { return (value * 100).toFixed(1) + " %"; }

  function ageText(seconds) {
    var s = Math.floor(seconds);
    var d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (d) { return h ? d + " d " + h + " h" : d + " d"; }
    if (h) { return m ? h + " h " + m + " min" : h + " h"; }
    if (m) { return m + " min"; }
    return "just now";
  }

  function setText(id, text) {
    var el = document.getElementById(id);
    if (el) { el.textContent = text; }
  }

  function cell(row, text, numeric) {
    var td = document.createElement("td");
    if (numeric) { td.className = "num"; }
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function drawFolders(folders) {
    var body = document.querySelector("#folders tbody");
    if (!body) { return; }
    var rows = [];
    folders.forEach(function (f) {
      var tr = document.createElement("tr");
      var first = document.createElement("td");
      var link = document.createElement("a");
      link.href = "/queue?prefix=" + encodeURIComponent(f.folder);
      link.textContent = f.folder || "/";
      first.appendChild(link);
      tr.appendChild(first);
      cell(tr, String(f.episodic), true);
      cell(tr, String(f.merged), true);
      cell(tr, String(f.unmerged), true);
      var last = cell(tr, " " + percent(f.coverage), false);
      var meter = document.createElement("meter");
      meter.min = 0; meter.max = 1; meter.value = f.coverage;
      last.insertBefore(meter, last.firstChild);
      rows.push(tr);
    });
    body.replaceChildren.apply(body, rows);
  }

  function drawOldest(oldest) {
    var box = document.getElementById("oldest");
    if (!box) { return; }
    if (!oldest) { box.textContent = "Nothing is waiting: every episode is merged."; return; }
    var link = document.getElementById("oldest-link");
    if (!link) { return; }  // the layout changed from "nothing waiting": the next reload shows it
    link.href = "/file/" + oldest.path.split("/").map(encodeURIComponent).join("/");
    link.textContent = oldest.path;
    setText("oldest-age", ageText(oldest.age_seconds));
    setText("oldest-since", oldest.since);
    setText("oldest-source", oldest.age_from);
  }

  function fileLink(path, className) {
    var link = document.createElement("a");
    link.className = className;
    link.href = "/file/" + path.split("/").map(encodeURIComponent).join("/");
    link.textContent = path;
    return link;
  }

  function checkStatus(check) {
    if (!check.ready) { return "The first check is still running: its problems appear here when it ends."; }
    return "Found by memory check at " + check.computed_at +
      (check.current ? "" : "; files changed since, checking again") + ".";
  }

  function drawCheck(check) {
    var box = document.getElementById("problems");
    if (!box || !check) { return; }
    box.setAttribute("data-state", check.ready ? "ready" : "pending");
    box.setAttribute("data-current", check.current ? "true" : "false");
    setText("problem-count", check.ready ? String(check.total) : "\u2026");
    setText("check-status", checkStatus(check));
    var table = document.getElementById("problem-list");
    var rows = check.shown.map(function (p) {
      var tr = document.createElement("tr");
      cell(tr, p.kind, false).className = "kind";
      var where = document.createElement("td");
      where.appendChild(fileLink(p.path, "problem-path"));
      p.related.forEach(function (r) {
        where.appendChild(document.createElement("br"));
        where.appendChild(fileLink(r, "problem-related"));
      });
      tr.appendChild(where);
      cell(tr, p.message, false).className = "message";
      return tr;
    });
    var body = table.querySelector("tbody");
    body.replaceChildren.apply(body, rows);
    table.hidden = rows.length === 0;
    var more = document.getElementById("problems-more");
    more.hidden = check.total <= rows.length;
    more.textContent = "The first " + rows.length + " of " + check.total +
      " are shown; kiwifs memory check lists them all.";
  }

  function draw(data) {
    document.querySelectorAll("[data-field]").forEach(function (el) {
      var value = data[el.getAttribute("data-field")];
      if (value === undefined) { return; }
      el.textContent = el.getAttribute("data-format") === "percent" ? percent(value) : String(value);
    });
    drawFolders(data.folders || []);
    drawOldest(data.oldest_unmerged);
    drawCheck(data.check);
    document.body.setAttribute("data-updated", String(Date.now()));
  }

  function refresh() {
    pending = null;
    fetch(source, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) { draw(data); } })
      .catch(function () { /* the next event tries again */ });
  }

  function schedule() {
    if (pending === null) { pending = setTimeout(refresh, 150); }
  }

  // the broken-link count: asked once the page is shown (it reads every link of the root)
  var broken = document.getElementById("broken-count");
  if (broken) {
    fetch(broken.getAttribute("data-source"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) { broken.textContent = String(data.broken); } })
      .catch(function () { /* the count stays unknown */ });
  }

  if (!window.EventSource) { return; }
  var events = new EventSource("/ui/events");
  events.addEventListener("open", function () {
    if (status) { status.setAttribute("data-state", "live"); }
    schedule();  // catch up on what changed while (re)connecting
  });
  events.addEventListener("error", function () {
    if (status) { status.setAttribute("data-state", "offline"); }
  });
  events.addEventListener("change", schedule);
  events.addEventListener("check", schedule);  // a new memory check result was stored
})();
