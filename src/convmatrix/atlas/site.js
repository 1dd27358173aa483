// convmatrix atlas: the filters and the search of index.html, from file:// (no fetch, no server).
// The measured rows are data (the "rows" block: what each filter reads, and the row's html, escaped
// when the site was written); the table holds only the first SHOWN rows that match, so a filter
// over 10,000 rows lays out a few hundred. The rows from sources are few and stay in the page.
(function () {
  "use strict";
  var table = document.getElementById("atlas");
  var block = document.getElementById("rows");
  if (!table || !block) { return; }
  var $ = function (id) { return document.getElementById(id); };
  var SHOWN = 150;  // site.SHOWN_ROWS
  // Each row: [torch, cuDNN key, " families ", " generations ", search text, html] (site.ROW_FIELDS).
  var measured = JSON.parse(block.textContent).map(function (r) {
    return {torch: r[0], ck: r[1], families: r[2], gens: r[3], search: r[4], html: r[5]};
  });
  var body = $("measured"), more = $("more"), limit = SHOWN;
  var sources = Array.prototype.map.call(table.querySelectorAll("tr.row.source"), function (tr) {
    var d = tr.dataset;
    return {
      tr: tr, tlo: +d.tlo || 0, thi: +d.thi || 0, clo: +d.clo || 0, chi: +d.chi || 0,
      families: " " + (d.families || "") + " ", anyFamily: !d.families,
      gens: " " + (d.gens || "") + " ", search: d.search || ""
    };
  });
  // A version as one number that orders as versions do (sources.version_key): "9.10.2" -> 9010002;
  // for the top of a range the parts left out count as 999, so "9.10" covers 9.10.x.
  function key(text, high) {
    var found = /^\s*v?(\d+(?:\.\d+)*)/.exec(text || "");
    if (!found) { return null; }
    var parts = found[1].split(".").map(Number), out = 0;
    for (var i = 0; i < 3; i++) {
      out = out * 1000 + (i < parts.length ? Math.min(parts[i], 999) : (high ? 999 : 0));
    }
    return out;
  }
  function filters() {
    var low = key($("f-cudnn-min").value, false), high = key($("f-cudnn-max").value, true);
    var torch = $("f-torch").value;
    return {
      gen: $("f-gen").value, torch: torch, torchKey: key(torch, false), family: $("f-family").value,
      ranged: low !== null || high !== null, low: low === null ? 0 : low, high: high === null ? Infinity : high,
      terms: $("f-search").value.toLowerCase().split(/\s+/).filter(Boolean)
    };
  }
  function common(r, f) {
    if (f.gen && r.gens.indexOf(" " + f.gen + " ") < 0) { return false; }
    for (var i = 0; i < f.terms.length; i++) {
      if (r.search.indexOf(f.terms[i]) < 0) { return false; }
    }
    return true;
  }
  function measuredMatch(r, f) {
    if (f.torch && r.torch !== f.torch) { return false; }
    if (f.ranged && !(r.ck > 0 && r.ck >= f.low && r.ck <= f.high)) { return false; }
    if (f.family && r.families.indexOf(" " + f.family + " ") < 0) { return false; }
    return common(r, f);
  }
  function sourceMatch(r, f) {
    if (f.torch && !(f.torchKey >= r.tlo && f.torchKey < r.thi)) { return false; }
    if (f.ranged && !(r.clo <= f.high && r.chi > f.low)) { return false; }
    if (f.family && !r.anyFamily && r.families.indexOf(" " + f.family + " ") < 0) { return false; }
    return common(r, f);
  }
  function apply(keep, first) {
    var f = filters(), hits = [], html = [], shown = 0;
    if (!keep) { limit = SHOWN; }
    table.className = table.className.replace(/\s*gsel-\d+/g, "") + (f.gen ? " gsel-" + f.gen : "");
    for (var i = 0; i < measured.length; i++) {
      if (measuredMatch(measured[i], f)) { hits.push(i); }
    }
    for (var j = 0; j < hits.length && j < limit; j++) { html.push(measured[hits[j]].html); }
    // On load with no filter set, the page already holds these rows (written for a reader without
    // JS): only the line saying how many more there are goes.
    var fresh = first && hits.length === measured.length;
    if (fresh) {
      Array.prototype.forEach.call(body.querySelectorAll("tr.group"), function (tr) { tr.remove(); });
    } else {
      body.innerHTML = html.join("");
    }
    sources.forEach(function (r) {
      var ok = sourceMatch(r, f);
      r.tr.hidden = !ok;
      if (ok) { shown++; }
    });
    more.hidden = hits.length <= limit;
    more.textContent = "show " + Math.min(SHOWN, hits.length - limit) + " more (" + (hits.length - limit) +
      " not listed)";
    $("shown").textContent = String(hits.length + shown);
  }
  ["f-gen", "f-torch", "f-family"].forEach(function (id) {
    $(id).addEventListener("change", function () { apply(false); });
  });
  ["f-cudnn-min", "f-cudnn-max", "f-search"].forEach(function (id) {
    $(id).addEventListener("input", function () { apply(false); });
  });
  more.addEventListener("click", function () { limit += SHOWN; apply(true); });
  apply(false, true);
}());
