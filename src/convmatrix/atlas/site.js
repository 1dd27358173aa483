// convmatrix atlas: the filters and the search of index.html, from file:// (no fetch, no server).
// Each row's facts are read from its data- attributes once; a filter change only sets `hidden`.
(function () {
  "use strict";
  var table = document.getElementById("atlas");
  if (!table) { return; }
  var $ = function (id) { return document.getElementById(id); };
  var rows = Array.prototype.map.call(table.querySelectorAll("tr.row"), function (tr) {
    var d = tr.dataset;
    return {
      tr: tr, source: tr.classList.contains("source"), torch: d.torch || "", ck: +d.ck || 0,
      tlo: +d.tlo || 0, thi: +d.thi || 0, clo: +d.clo || 0, chi: +d.chi || 0,
      families: " " + (d.families || "") + " ", anyFamily: !d.families,
      gens: " " + (d.gens || "") + " ", search: d.search || "", hidden: false
    };
  });
  // A version as one number that orders as versions do (sources.version_key): "9.10.2" -> 9010002;
  // for the top of a range the parts left out count as 999, so "9.10" covers 9.10.x.
  function key(text, high) {
    var found = /^\s*v?(\d+(?:\.\d+)*)/.exec(text || "");
    if (!found) { return null; }
    var parts = found[1].split(".").map(Number);
    var out = 0;
    for (var i = 0; i < 3; i++) {
      var part = i < parts.length ? Math.min(parts[i], 999) : (high ? 999 : 0);
      out = out * 1000 + part;
    }
    return out;
  }
  function apply() {
    var gen = $("f-gen").value, torch = $("f-torch").value, family = $("f-family").value;
    var low = key($("f-cudnn-min").value, false), high = key($("f-cudnn-max").value, true);
    var terms = $("f-search").value.toLowerCase().split(/\s+/).filter(Boolean);
    var torchKey = key(torch, false), shown = 0;
    table.className = table.className.replace(/\s*gsel-\d+/g, "") + (gen ? " gsel-" + gen : "");
    rows.forEach(function (r) {
      var ok = !gen || r.gens.indexOf(" " + gen + " ") >= 0;
      if (ok && torch) { ok = r.source ? torchKey >= r.tlo && torchKey < r.thi : r.torch === torch; }
      if (ok && (low !== null || high !== null)) {
        var lo = low === null ? 0 : low, hi = high === null ? Infinity : high;
        ok = r.source ? r.clo <= hi && r.chi > lo : r.ck > 0 && r.ck >= lo && r.ck <= hi;
      }
      if (ok && family) { ok = (r.source && r.anyFamily) || r.families.indexOf(" " + family + " ") >= 0; }
      for (var i = 0; ok && i < terms.length; i++) { ok = r.search.indexOf(terms[i]) >= 0; }
      if (r.hidden === ok) { r.tr.hidden = !ok; r.hidden = !ok; }
      if (ok) { shown++; }
    });
    $("shown").textContent = String(shown);
  }
  ["f-gen", "f-torch", "f-family"].forEach(function (id) { $(id).addEventListener("change", apply); });
  ["f-cudnn-min", "f-cudnn-max", "f-search"].forEach(function (id) { $(id).addEventListener("input", apply); });
  apply();
}());
