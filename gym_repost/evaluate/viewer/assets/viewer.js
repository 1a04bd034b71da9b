// gym-repost run viewer: filters over the tables of a page (no network, no libraries).
(function () {
  "use strict";
  var form = document.getElementById("filters");
  if (!form) { return; }
  var tables = Array.prototype.slice.call(document.querySelectorAll("table.filterable"));
  var count = document.getElementById("filter-count");

  function chosenStatuses() {
    var boxes = form.querySelectorAll('input[name="status"]');
    var chosen = {};
    for (var i = 0; i < boxes.length; i++) { if (boxes[i].checked) { chosen[boxes[i].value] = true; } }
    return boxes.length ? chosen : null;
  }

  function visible(row, statuses, text, onlyDiffering) {
    if (text && row.getAttribute("data-task").indexOf(text) < 0) { return false; }
    if (onlyDiffering && row.getAttribute("data-differs") !== "1") { return false; }
    if (statuses) {
      var own = (row.getAttribute("data-status") || "").split(" ");
      for (var i = 0; i < own.length; i++) { if (statuses[own[i]]) { return true; } }
      return false;
    }
    return true;
  }

  function apply() {
    var statuses = chosenStatuses();
    var search = form.querySelector('input[name="task"]');
    var text = search ? search.value.trim().toLowerCase() : "";
    var differs = form.querySelector('input[name="differs"]');
    var onlyDiffering = differs ? differs.checked : false;
    var parts = [];
    tables.forEach(function (table) {
      var rows = table.tBodies[0].rows;
      var shown = 0;
      for (var i = 0; i < rows.length; i++) {
        var keep = visible(rows[i], statuses, text, onlyDiffering);
        rows[i].classList.toggle("hidden", !keep);
        if (keep) { shown += 1; }
      }
      parts.push(table.id + ": " + shown + " of " + rows.length);
    });
    if (count) { count.textContent = "showing " + parts.join(", "); }
  }

  // The filters live in the address's fragment (#status=failed,infra_error&task=sort), so a
  // filtered view can be bookmarked or sent as a link.
  function readHash() {
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

  function changed() { writeHash(); apply(); }

  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  window.addEventListener("hashchange", function () { readHash(); apply(); });
  readHash();
  apply();
})();
