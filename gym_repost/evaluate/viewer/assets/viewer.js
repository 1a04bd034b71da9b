// gym-repost run viewer: the overview's tables, drawn from rows.js a page at a time; the
// filters over them (status, task name, full text over failures and code); sorting by any
// column. Tables written into the page itself (the comparison's, the list of runs) are
// filtered and sorted in place. No network, no libraries.
(function () {
  "use strict";
  var PAGE = 200;
  var DATA = window.GYM_REPOST_ROWS || {};
  var form = document.getElementById("filters");
  var count = document.getElementById("filter-count");
  var tables = Array.prototype.slice.call(document.querySelectorAll("table.filterable, table.sortable"));
  var shown = {};  // rows drawn per data table
  var sorts = {};  // table id -> {key, desc}
  var searchState = "none";  // the full-text index (search.js): none, loading, ready, missing

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

  // ------------------------------------------------------------ filtering

  function field(name) { return form ? form.querySelector('input[name="' + name + '"]') : null; }

  function filters() {
    var chosen = null;
    if (form) {
      var boxes = form.querySelectorAll('input[name="status"]');
      if (boxes.length) {
        chosen = {};
        for (var i = 0; i < boxes.length; i++) { if (boxes[i].checked) { chosen[boxes[i].value] = true; } }
      }
    }
    var task = field("task"), text = field("text"), differs = field("differs");
    return {
      statuses: chosen,
      task: task ? task.value.trim().toLowerCase() : "",
      text: text ? text.value.trim().toLowerCase() : "",
      onlyDiffering: differs ? differs.checked : false
    };
  }

  function keep(f, task, statuses, differs) {
    if (f.task && task.toLowerCase().indexOf(f.task) < 0) { return false; }
    if (f.onlyDiffering && differs !== "1") { return false; }
    if (f.statuses) {
      for (var i = 0; i < statuses.length; i++) { if (f.statuses[statuses[i]]) { return true; } }
      return false;
    }
    return true;
  }

  // The full-text index is a script of its own, loaded on the first search: the overview
  // of a large run opens without it.
  function searchIndex() {
    if (window.GYM_REPOST_SEARCH) { searchState = "ready"; return window.GYM_REPOST_SEARCH; }
    if (searchState === "none") {
      searchState = "loading";
      var script = document.createElement("script");
      script.src = "search.js";
      script.onload = function () { searchState = window.GYM_REPOST_SEARCH ? "ready" : "missing"; apply(); };
      script.onerror = function () { searchState = "missing"; apply(); };
      document.body.appendChild(script);
    }
    return null;
  }

  function textMatches(f, indexes) {
    if (!f.text) { return true; }
    var index = searchIndex();
    if (!index) { return searchState === "missing"; }
    for (var i = 0; i < indexes.length; i++) {
      if ((index[indexes[i]] || "").indexOf(f.text) >= 0) { return true; }
    }
    return false;
  }

  var EPISODES_OF = {
    tasks: function (t) { return t.episodes.map(function (e) { return e.index; }); },
    episodes: function (e) { return [e.index]; }
  };

  function matching(name, f) {
    return (DATA[name] || []).filter(function (r) {
      return keep(f, r.task, r.statuses, "1") && textMatches(f, EPISODES_OF[name](r));
    });
  }

  // ------------------------------------------------------------ sorting

  function numeric(value) {
    if (typeof value === "number") { return value; }
    var n = parseFloat(String(value).replace(/,/g, ""));
    return isNaN(n) ? null : n;
  }

  function sortRows(table, rows, value) {
    var state = sorts[table.id];
    if (!state) { return rows; }
    var th = table.querySelector('th[data-key="' + state.key + '"]');
    var isNumber = th !== null && th.getAttribute("data-type") === "num";
    var missing = function (v) { return v === null || v === undefined || v === "" || (isNumber && numeric(v) === null); };
    var sign = state.desc ? -1 : 1;
    return rows.map(function (r, i) { return [r, i, value(r, state.key)]; }).sort(function (a, b) {
      var ma = missing(a[2]), mb = missing(b[2]);
      if (ma || mb) { return ma === mb ? a[1] - b[1] : ma ? 1 : -1; }  // no value: last either way
      var order = isNumber ? numeric(a[2]) - numeric(b[2])
        : String(a[2]).localeCompare(String(b[2]), undefined, { numeric: true, sensitivity: "base" });
      return sign * order || a[1] - b[1];
    }).map(function (p) { return p[0]; });
  }

  function markHeaders(table) {
    var state = sorts[table.id];
    var ths = table.querySelectorAll("th[data-key]");
    for (var i = 0; i < ths.length; i++) {
      var on = state && ths[i].getAttribute("data-key") === state.key;
      ths[i].setAttribute("aria-sort", on ? (state.desc ? "descending" : "ascending") : "none");
    }
  }

  // ------------------------------------------------------------ drawing

  function drawTable(table, f) {
    var name = table.getAttribute("data-source");
    var rows = sortRows(table, matching(name, f), function (r, key) { return r[key]; });
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

  function cellValue(row, key) {
    var td = row.querySelector('td[data-key="' + key + '"]');
    if (!td) { return ""; }
    return td.hasAttribute("data-value") ? td.getAttribute("data-value") : td.textContent.trim();
  }

  function filterTable(table, f) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    if (sorts[table.id]) {
      if (!table.original) { table.original = rows.slice(); }
      sortRows(table, table.original, cellValue).forEach(function (r) { body.appendChild(r); });
    }
    var visible = 0;
    rows.forEach(function (r) {
      var ok = !table.classList.contains("filterable") ||
        keep(f, r.getAttribute("data-task") || "", (r.getAttribute("data-status") || "").split(" "),
             r.getAttribute("data-differs"));
      r.classList.toggle("hidden", !ok);
      if (ok) { visible += 1; }
    });
    return table.id + ": " + visible + " of " + rows.length;
  }

  function apply() {
    var f = filters();
    var parts = tables.map(function (t) {
      markHeaders(t);
      return t.hasAttribute("data-source") ? drawTable(t, f) : filterTable(t, f);
    }).filter(function (p, i) { return tables[i].classList.contains("filterable"); });
    var loading = f.text && searchState === "loading" ? " (loading the search index…)" : "";
    var missing = f.text && searchState === "missing" ? " (no search index: search.js is missing)" : "";
    if (count) { count.textContent = "showing " + parts.join(", ") + loading + missing; }
  }

  // ------------------------------------------------------------ the address
  // Filters and sorting live in the address's fragment (#status=failed&task=sort&text=keyerror
  // &sort=episodes.steps.desc), so a view can be bookmarked or sent as a link.

  function readHash() {
    var params = new URLSearchParams(window.location.hash.slice(1));
    sorts = {};
    (params.get("sort") || "").split(",").forEach(function (item) {
      var parts = item.split(".");
      if (parts.length === 3 && document.getElementById(parts[0])) {
        sorts[parts[0]] = { key: parts[1], desc: parts[2] === "desc" };
      }
    });
    if (!form) { return; }
    var boxes = form.querySelectorAll('input[name="status"]');
    if (params.has("status")) {
      var wanted = params.get("status").split(",");
      for (var i = 0; i < boxes.length; i++) { boxes[i].checked = wanted.indexOf(boxes[i].value) >= 0; }
    }
    ["task", "text"].forEach(function (name) {
      var input = field(name);
      if (input && params.has(name)) { input.value = params.get(name); }
    });
    var differs = field("differs");
    if (differs && params.has("differs")) { differs.checked = params.get("differs") === "1"; }
  }

  function writeHash() {
    var params = new URLSearchParams();
    if (form) {
      var boxes = form.querySelectorAll('input[name="status"]');
      var chosen = [];
      for (var i = 0; i < boxes.length; i++) { if (boxes[i].checked) { chosen.push(boxes[i].value); } }
      if (boxes.length && chosen.length < boxes.length) { params.set("status", chosen.join(",")); }
      ["task", "text"].forEach(function (name) {
        var input = field(name);
        if (input && input.value.trim()) { params.set(name, input.value.trim()); }
      });
      var differs = field("differs");
      if (differs && differs.checked) { params.set("differs", "1"); }
    }
    var order = Object.keys(sorts).map(function (id) { return id + "." + sorts[id].key + "." + (sorts[id].desc ? "desc" : "asc"); });
    if (order.length) { params.set("sort", order.join(",")); }
    var hash = "#" + params.toString();
    if (hash === window.location.hash || (hash === "#" && !window.location.hash)) { return; }
    try {
      history.replaceState(null, "", hash);
    } catch (err) {  // browsers that refuse history changes on file:// pages
      window.location.replace(hash);
    }
  }

  function changed() { shown = {}; writeHash(); apply(); }

  tables.forEach(function (table) {
    var ths = table.querySelectorAll("th[data-key]");
    for (var i = 0; i < ths.length; i++) {
      ths[i].title = "sort by this column (again: the other way)";
      ths[i].tabIndex = 0;
      var toggle = function (th) {
        return function (event) {
          if (event.type === "keydown" && event.key !== "Enter" && event.key !== " ") { return; }
          event.preventDefault();
          var key = th.getAttribute("data-key"), state = sorts[table.id];
          var desc = state && state.key === key ? !state.desc : th.getAttribute("data-type") === "num";
          sorts[table.id] = { key: key, desc: desc };
          changed();
        };
      }(ths[i]);
      ths[i].addEventListener("click", toggle);
      ths[i].addEventListener("keydown", toggle);
    }
  });
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
