"""What the page carries once, whatever its number of GPUs: the tooltip element, the stylesheet of the
interactive blocks, and the script that drives them (tooltips, highlighting, filters) from the data-*
attributes the plots and the table rows carry."""

from __future__ import annotations

NEAR = 6.0  # points closer than this (user units) are listed together in one tooltip
NEAR_NAMES = 8  # the most of them a tooltip names; the rest are counted


TOOLTIP = (
    '<div id="rooflint-tip" class="tip" role="tooltip" hidden><div class="tip-title"></div>'
    '<div class="tip-body"></div><code class="tip-cmd"></code><div class="tip-near"></div></div>'
)

STYLE = """
.roofline-section{margin:.5em 0 1.5em}
.filters{display:flex;flex-wrap:wrap;gap:.3em 1em;align-items:flex-start;font-size:13px}
.filters fieldset{border:1px solid #ddd;padding:.2em .6em;margin:0}
.filters legend{font-weight:600}
.filters label{display:inline-flex;align-items:center;gap:3px;margin-right:.8em;white-space:nowrap}
.filters button{font-size:11px;padding:0 4px;margin-left:3px}
.count{flex-basis:100%;margin:.2em 0}
svg.key{width:14px;height:14px;fill:#666}
.plots{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
figure.plot{margin:0;flex:1 1 560px;max-width:860px}
figure.plot figcaption{font-size:12px;color:#555}
figure.plot.noenergy{flex:0 1 280px;border:1px dashed #bbb;display:flex;align-items:center;min-height:160px}
figure.noenergy p{color:#666;padding:1em;max-width:30em}
svg.roofline{width:100%;height:auto;font-family:system-ui,sans-serif;background:#fff}
svg.roofline .frame{fill:none;stroke:#999}
svg.roofline .grid{stroke:#eee}
svg.roofline .tick{font-size:11px;fill:#555}
svg.roofline .axis{font-size:12px;fill:#333}
svg.roofline .roof{fill:none;stroke:#333;stroke-width:1.5}
svg.roofline .roof-label{font-size:11px;fill:#444;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg.roofline .strip-label{font-size:11px;fill:#555}
svg.roofline .point{fill-opacity:.85;stroke-width:1;cursor:pointer}
svg.roofline .ncu{fill:#fff;fill-opacity:.6;stroke-width:1.6;cursor:pointer}
svg.roofline .link{stroke-dasharray:2 2;stroke-width:1.2}
svg.roofline .hl{stroke:#000;stroke-width:2.5}
.hidden{display:none}
tr.hl td{background:#fff3c4}
.offplot-list{font-size:13px}
.tip{position:fixed;z-index:10;max-width:34em;background:#fffffb;border:1px solid #888;border-radius:4px;
 padding:6px 8px;font-size:12px;box-shadow:0 2px 8px rgba(0,0,0,.25);pointer-events:none}
.tip.pinned{pointer-events:auto;border-color:#333}
.tip-title{font-weight:700}
.tip-body{white-space:pre-line;overflow-wrap:anywhere}
.tip-cmd{display:block;margin-top:4px;background:#f3f3f3;padding:2px 4px;user-select:all;overflow-wrap:anywhere}
.tip-cmd span{white-space:nowrap}
.tip-cmd:empty{display:none}
.tip-near{color:#555;margin-top:3px}
"""

# Tooltips (hover; click pins one so its command can be copied; Esc closes), highlighting a row's
# twins in both plots and its table line, and the filters with their count of shown rows. A tooltip
# names NEAR_NAMES of the other points under the mouse and counts the rest: in a crowd (thousands of
# rows) the whole list outgrew the window and hid the row's own numbers.
SCRIPT = """
(function () {
  var tip = document.getElementById("rooflint-tip"), pinned = null, NEAR = NEAR_UNITS;
  if (!tip) return;
  function source(el) {  // energy points: the tip is on the time twin
    return el.dataset.tip !== undefined ? el :
      document.querySelector('svg[data-plot="time"] [data-tip][data-point="' + el.dataset.point + '"]') || el;
  }
  function fill(el) {
    var src = source(el);
    tip.querySelector(".tip-title").textContent = src.dataset.title || "";
    tip.querySelector(".tip-body").textContent = src.dataset.tip || "";
    var cmd = tip.querySelector(".tip-cmd");  // short words kept whole: no line breaks inside "--dtype"
    cmd.textContent = "";
    (src.dataset.cmd ? src.dataset.cmd.split(" ") : []).forEach(function (word, i) {
      if (i) cmd.appendChild(document.createTextNode(" "));
      if (word.length > 24) cmd.appendChild(document.createTextNode(word));
      else cmd.appendChild(document.createElement("span")).textContent = word;
    });
    var x = +el.dataset.x, y = +el.dataset.y, near = [];
    el.ownerSVGElement.querySelectorAll(".point, .ncu").forEach(function (o) {
      if (o !== el && !o.classList.contains("hidden") &&
          Math.abs(o.dataset.x - x) < NEAR && Math.abs(o.dataset.y - y) < NEAR) near.push(source(o).dataset.title);
    });
    var n = near.length;
    if (n > NEAR_NAMES) near.splice(NEAR_NAMES, n, "and " + (n - NEAR_NAMES) + " more");
    tip.querySelector(".tip-near").textContent = n ? "also here: " + near.join("; ") : "";
  }
  function place(ev) {
    var w = tip.offsetWidth, h = tip.offsetHeight, x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  function highlight(el, on) {
    document.querySelectorAll('[data-point="' + el.dataset.point + '"]').forEach(function (o) {
      o.classList.toggle("hl", on);
    });
  }
  function close() { pinned = null; tip.hidden = true; tip.classList.remove("pinned"); }
  document.querySelectorAll("svg.roofline [data-tip], svg.roofline .point[data-point]").forEach(function (el) {
    el.addEventListener("mouseenter", function (ev) {
      highlight(el, true);
      if (pinned) return;
      fill(el); tip.hidden = false; place(ev);
    });
    el.addEventListener("mousemove", function (ev) { if (!pinned) place(ev); });
    el.addEventListener("mouseleave", function () { highlight(el, false); if (!pinned) tip.hidden = true; });
    el.addEventListener("click", function (ev) {
      ev.stopPropagation();
      if (pinned === el) { close(); return; }
      pinned = el; fill(el); tip.hidden = false; tip.classList.add("pinned"); place(ev);
    });
  });
  document.addEventListener("click", function (ev) { if (pinned && !tip.contains(ev.target)) close(); });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") close(); });
  document.querySelectorAll("tr[data-point]").forEach(function (tr) {
    tr.addEventListener("mouseenter", function () { highlight(tr, true); });
    tr.addEventListener("mouseleave", function () { highlight(tr, false); });
  });
  document.querySelectorAll(".roofline-section").forEach(function (section) {
    var boxes = section.querySelectorAll("input[data-filter]");
    function apply() {
      var off = {};
      boxes.forEach(function (b) { if (!b.checked) off[b.dataset.filter + "=" + b.value] = true; });
      section.querySelectorAll(".plots [data-family], .offplot-list [data-family]").forEach(function (el) {
        var d = el.dataset, hide = off["family=" + d.family] || off["kind=" + d.kind] || off["dtype=" + d.dtype];
        el.classList.toggle("hidden", !!hide);
      });
      section.querySelector(".shown").textContent =
        section.querySelectorAll('svg[data-plot="time"] .point:not(.hidden)').length;
    }
    boxes.forEach(function (b) { b.addEventListener("change", apply); });
    section.querySelectorAll("button[data-set]").forEach(function (button) {
      button.addEventListener("click", function () {
        button.closest("fieldset").querySelectorAll("input").forEach(function (b) {
          b.checked = button.dataset.set === "all";
        });
        apply();
      });
    });
    apply();
  });
})();
""".replace("NEAR_UNITS", str(NEAR)).replace("NEAR_NAMES", str(NEAR_NAMES))
