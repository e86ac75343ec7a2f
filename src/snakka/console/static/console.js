// snakka console: live throughput charts (inline SVG) and confirmations of destructive forms.
// No libraries; served from the broker with the pages (Content-Security-Policy: 'self').
"use strict";
(function () {
  var POLL_MS = 2000;
  var SVG = "http://www.w3.org/2000/svg";
  // Which series of /api/throughput each chart draws.
  var CHARTS = { bytes: [1, 3], records: [2, 4] };

  function api(path) {
    // location.origin, not a relative URL: a page opened as http://user:pass@host/ has a
    // base URL with credentials, which fetch() refuses.
    return fetch(location.origin + path, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(path + ": " + r.status); } return r.json(); });
  }

  function human(v, bytes) {
    var units = bytes ? ["B", "KiB", "MiB", "GiB"] : ["", "k", "M", "G"];
    var step = bytes ? 1024 : 1000, i = 0;
    while (Math.abs(v) >= step && i < units.length - 1) { v /= step; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + (units[i] ? " " + units[i] : "");
  }

  function el(name, attrs) {
    var n = document.createElementNS(SVG, name);
    for (var k in attrs) { n.setAttribute(k, attrs[k]); }
    return n;
  }

  function draw(fig, data) {
    var svg = fig.querySelector("svg");
    var cols = CHARTS[fig.getAttribute("data-chart")];
    var pts = data.points || [];
    var W = 600, H = 160, top = 8, bottom = 16;
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var max = 1;
    pts.forEach(function (p) { cols.forEach(function (c) { if (p[c] > max) { max = p[c]; } }); });
    for (var g = 0; g <= 2; g++) {
      var y = top + (H - top - bottom) * g / 2;
      svg.appendChild(el("line", { x1: 0, x2: W, y1: y, y2: y, "class": "grid" }));
    }
    var label = el("text", { x: 4, y: top + 10 });
    label.textContent = human(max, fig.getAttribute("data-chart") === "bytes") + "/s";
    svg.appendChild(label);
    if (pts.length < 2) { return; }
    var t0 = pts[0][0], t1 = pts[pts.length - 1][0], span = Math.max(1, t1 - t0);
    cols.forEach(function (c, i) {
      var s = pts.map(function (p) {
        var x = (p[0] - t0) / span * W;
        var y = H - bottom - (p[c] / max) * (H - top - bottom);
        return x.toFixed(1) + "," + y.toFixed(1);
      }).join(" ");
      svg.appendChild(el("polyline", { points: s, "class": "s" + i }));
    });
    var last = pts[pts.length - 1], bytes = fig.getAttribute("data-chart") === "bytes";
    fig.querySelector(".chart-now").textContent = "now: " + cols.map(function (c) {
      return human(last[c], bytes) + "/s";
    }).join(" · ");
  }

  function poll(figs) {
    api("/api/throughput").then(function (data) {
      figs.forEach(function (f) { draw(f, data); });
    }).catch(function () { /* the broker stopped or restarted: try again next tick */ })
      .then(function () { setTimeout(function () { poll(figs); }, POLL_MS); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var figs = Array.prototype.slice.call(document.querySelectorAll("[data-chart]"));
    if (figs.length) { poll(figs); }
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (ev) {
        if (!window.confirm(f.getAttribute("data-confirm"))) { ev.preventDefault(); }
      });
    });
  });
})();
