// gym-repost run viewer: the overview's tables, drawn from rows.js a page at a time, and
// the filters over them (no network, no libraries). Tables written into the page itself
// (the comparison's) are filtered by hiding rows.
(function () {
  "use strict";
  var PAGE = 200;
  var DATA = window.GYM_REPOST_ROWS || {};
  var form = document.getElementById("filters");
  var count = document.getElementById("filter-count");
  var tables = Array.prototype.slice.call(document.querySelectorAll("table.filterable"));
  var shown = {};  // rows drawn per data table

  function cell(row, text, className) {
    var td = row.insertCell(-1);
    if (className) { td.className = className; }
    td.textContent = text === null || text === undefined ? "" : String(text);
    return td;
  }

  function link(parent, href, text, className, title) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (className) { a.className = className; }
    if (title) { a.title = title; }
    parent.appendChild(a);
    return a;
  }

  var DRAW = {
    tasks: function (row, t) {
      cell(row, t.task);
      cell(row, t.samples, "num");
      cell(row, t.passed, "num");
      cell(row, t.rate, "num");
      cell(row, t.infra, "num");
      cell(row, t.mean, "num");
      var dots = cell(row, "");
      t.episodes.forEach(function (e) {
        link(dots, "episodes/" + e.index + ".html", String(e.sample), "dot " + e.status, "sample " + e.sample + ": " + e.label);
      });
      cell(row, t.failure, "failure");
    },
    episodes: function (row, e) {
      link(cell(row, ""), "episodes/" + e.index + ".html", e.task);
      cell(row, e.sample, "num");
      var badge = document.createElement("span");
      badge.className = "badge " + e.status;
      badge.textContent = e.label;
      cell(row, "").appendChild(badge);
      cell(row, e.reward, "num");
      cell(row, e.submissions, "marks");
      cell(row, e.test_runs, "marks");
      cell(row, e.steps, "num");
      cell(row, e.tokens, "num");
      cell(row, e.seconds, "num");
      cell(row, e.failure, "failure");
    }
  };

  function filters() {
    var chosen = null;
    var text = "";
    var onlyDiffering = false;
    if (form) {
      var boxes = form.querySelectorAll('input[name="status"]');
      if (boxes.length) {
        chosen = {};
        for (var i = 0; i < boxes.length; i++) { if (boxes[i].checked) { chosen[boxes[i].value] = true; } }
      }
      var search = form.querySelector('input[name="task"]');
      text = search ? search.value.trim().toLowerCase() : "";
      var differs = form.querySelector('input[name="differs"]');
      onlyDiffering = differs ? differs.checked : false;
    }
    return { statuses: chosen, text: text, onlyDiffering: onlyDiffering };
  }

  function keep(f, task, statuses, differs) {
    if (f.text && task.toLowerCase().indexOf(f.text) < 0) { return false; }
    if (f.onlyDiffering && differs !== "1") { return false; }
    if (f.statuses) {
      for (var i = 0; i < statuses.length; i++) { if (f.statuses[statuses[i]]) { return true; } }
      return false;
    }
    return true;
  }

  function matching(name, f) {
    return (DATA[name] || []).filter(function (r) { return keep(f, r.task, r.statuses, "1"); });
  }

  function drawTable(table, f) {
    var name = table.getAttribute("data-source");
    var rows = matching(name, f);
    var body = table.tBodies[0];
    body.textContent = "";
    var limit = Math.min(rows.length, shown[name] || PAGE);
    for (var i = 0; i < limit; i++) {
      var tr = body.insertRow(-1);
      tr.setAttribute("data-task", rows[i].task.toLowerCase());
      tr.setAttribute("data-status", rows[i].statuses.join(" "));
      DRAW[name](tr, rows[i]);
    }
    var more = document.getElementById(name + "-more");
    if (more) {
      more.hidden = limit >= rows.length;
      more.textContent = "show " + Math.min(PAGE, rows.length - limit) + " more of " + (rows.length - limit);
    }
    return table.id + ": " + rows.length + " of " + (DATA[name] || []).length;
  }

  function filterTable(table, f) {
    var rows = table.tBodies[0].rows;
    var visible = 0;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var ok = keep(f, r.getAttribute("data-task") || "", (r.getAttribute("data-status") || "").split(" "),
                    r.getAttribute("data-differs"));
      r.classList.toggle("hidden", !ok);
      if (ok) { visible += 1; }
    }
    return table.id + ": " + visible + " of " + rows.length;
  }

  function apply() {
    var f = filters();
    var parts = tables.map(function (t) { return t.hasAttribute("data-source") ? drawTable(t, f) : filterTable(t, f); });
    if (count) { count.textContent = "showing " + parts.join(", "); }
  }

  // The filters live in the address's fragment (#status=failed,infra_error&task=sort), so a
  // filtered view can be bookmarked or sent as a link.
  function readHash() {
    if (!form) { return; }
    var params = new URLSearchParams(window.location.hash.slice(1));
    var boxes = form.querySelectorAll('input[name="status"]');
    if (params.has("status")) {
      var wanted = params.get("status").split(",");
      for (var i = 0; i < boxes.length; i++) { boxes[i].checked = wanted.indexOf(boxes[i].value) >= 0; }
    }
    var search = form.querySelector('input[name="task"]');
    if (search && params.has("task")) { search.value = params.get("task"); }
    var differs = form.querySelector('input[name="differs"]');
    if (differs && params.has("differs")) { differs.checked = params.get("differs") === "1"; }
  }

  function writeHash() {
    var params = new URLSearchParams();
    var boxes = form.querySelectorAll('input[name="status"]');
    var chosen = [];
    for (var i = 0; i < boxes.length; i++) { if (boxes[i].checked) { chosen.push(boxes[i].value); } }
    if (boxes.length && chosen.length < boxes.length) { params.set("status", chosen.join(",")); }
    var search = form.querySelector('input[name="task"]');
    if (search && search.value.trim()) { params.set("task", search.value.trim()); }
    var differs = form.querySelector('input[name="differs"]');
    if (differs && differs.checked) { params.set("differs", "1"); }
    var hash = "#" + params.toString();
    if (hash === window.location.hash || (hash === "#" && !window.location.hash)) { return; }
    try {
      history.replaceState(null, "", hash);
    } catch (err) {  // browsers that refuse history changes on file:// pages
      window.location.replace(hash);
    }
  }

  function changed() { shown = {}; writeHash(); apply(); }

  Object.keys(DRAW).forEach(function (name) {
    var more = document.getElementById(name + "-more");
    if (more) {
      more.addEventListener("click", function () { shown[name] = (shown[name] || PAGE) + PAGE; apply(); });
    }
  });
  if (form) {
    form.addEventListener("input", changed);
    form.addEventListener("change", changed);
  }
  window.addEventListener("hashchange", function () { readHash(); apply(); });
  readHash();
  apply();
})();
