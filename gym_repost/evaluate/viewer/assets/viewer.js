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

  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  apply();
})();
