// convmatrix html report: a click on a grid cell opens that cell's cases; the filter hides the
// cases whose id and family do not match, and dims the grid cells with no failing match. The
// page reads without this script too (every panel shown); no data comes from anywhere else.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var panels = Array.prototype.slice.call(document.querySelectorAll(".panel"));
  var cells = Array.prototype.slice.call(document.querySelectorAll(".grid td.v"));

  function show(id) {
    var panel = id ? document.getElementById(id) : null;
    if (!panel || !panel.classList.contains("panel")) return;
    panels.forEach(function (p) { p.classList.toggle("open", p === panel); });
    cells.forEach(function (td) { td.classList.toggle("selected", td.getAttribute("data-panel") === id); });
    panel.querySelectorAll("details.evidence[open] pre").forEach(toFailure);
  }

  // Evidence ends at the failure (its line marked "NNN>"), after 100 lines of lead-up: show that line.
  function toFailure(pre) {
    var lines = pre.textContent.split("\n");
    var at = lines.findIndex(function (line) { return /^\s*\d+>/.test(line); });
    if (at >= 0) pre.scrollTop = pre.scrollHeight * at / lines.length - pre.clientHeight / 2;
  }

  // The link's own navigation then scrolls to the panel, now shown; back and forward work too.
  cells.forEach(function (td) {
    var link = td.querySelector("a.cellref");
    if (link) link.addEventListener("click", function () { show(td.getAttribute("data-panel")); });
  });
  window.addEventListener("hashchange", function () { show(location.hash.slice(1)); });
  show(location.hash.slice(1));

  // A case is an li.case (each with its details), or on a fleet's compact page a code in a p.ids
  // line whose data-family is its family.
  function matches(item, query) {
    var id = (item.getAttribute("data-case") || item.textContent || "").toLowerCase();
    var holder = item.hasAttribute("data-family") ? item : item.parentNode;
    var family = ((holder && holder.getAttribute && holder.getAttribute("data-family")) || "").toLowerCase();
    return !query || id.indexOf(query) >= 0 || family.indexOf(query) >= 0;
  }

  var box = document.getElementById("filter");
  function filter() {
    var query = box.value.trim().toLowerCase();
    panels.forEach(function (panel) {
      var shown = 0, notable = 0;
      panel.querySelectorAll("li.case, p.ids code").forEach(function (item) {
        var hit = matches(item, query);
        item.hidden = !hit;
        if (hit) shown += 1;
        if (hit && (item.classList.contains("noteworthy") || item.tagName === "CODE")) notable += 1;
      });
      var count = panel.querySelector(".shown");
      if (count) count.textContent = String(shown);
      cells.forEach(function (td) {
        if (td.getAttribute("data-panel") === panel.id) td.classList.toggle("nomatch", query !== "" && notable === 0);
      });
    });
  }
  if (box) box.addEventListener("input", filter);
})();
