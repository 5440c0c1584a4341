/* warmcast dashboard charts: plain SVG, no dependencies (the service runs offline). */
(function () {
"use strict";
const SVGNS = "http://www.w3.org/2000/svg";

function el(name, attrs, parent) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

/* Axis ticks from the data: a step of 1, 2, 2.5 or 5 times a power of ten giving about `target`
   intervals, and the top the first step at or above the maximum (5,300 gives 6,000, not 10,000). */
function niceTicks(max, target, integer) {
  const raw = Math.max(max, integer ? 1 : 1e-9) / target;
  const e = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / e;
  let step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * e;
  if (integer) step = Math.max(1, Math.ceil(step));
  const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
  const ticks = [];
  for (let i = 0; i * step <= top + step * 1e-9; i++) ticks.push(i * step);
  return { top, ticks };
}

function parseTime(t) { return Date.parse(t.replace(" ", "T") + "Z"); }

/* "YYYY-MM-DD HH:MM" UTC: a time without its date made a 2014 log look live (issue 46). */
function fmtTime(ms) {
  const d = new Date(ms);
  return d.toISOString().slice(0, 16).replace("T", " ");
}

/* A time chart: x = time (ms), y = value. Series are drawn in the order added. */
class TimeChart {
  constructor(svg, opts) {
    this.svg = svg;
    this.w = opts.width || 960;
    this.h = opts.height || 300;
    // left margin: the rotated axis title, then tick labels; top margin: the event markers
    this.m = { l: 64, r: 16, t: 22, b: 28 };
    this.xmin = opts.xmin; this.xmax = opts.xmax;
    const y = niceTicks(opts.ymax || 1, 4, opts.integer);
    this.ymax = y.top; this.yticks = y.ticks;
    this.yLabel = opts.yLabel || "";
    svg.setAttribute("viewBox", `0 0 ${this.w} ${this.h}`);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    this.drawn = 0;
    this.axes();
  }
  x(t) { return this.m.l + (t - this.xmin) / Math.max(this.xmax - this.xmin, 1) * (this.w - this.m.l - this.m.r); }
  y(v) { return this.h - this.m.b - v / this.ymax * (this.h - this.m.t - this.m.b); }
  axes() {
    const g = el("g", { class: "axes" }, this.svg);
    el("line", { x1: this.m.l, x2: this.w - this.m.r, y1: this.y(0), y2: this.y(0), stroke: "#888" }, g);
    for (const v of this.yticks) {
      const yy = this.y(v);
      el("line", { x1: this.m.l, x2: this.w - this.m.r, y1: yy, y2: yy, stroke: "#eee" }, g);
      el("text", { x: this.m.l - 6, y: yy + 4, "text-anchor": "end", "font-size": 11, fill: "#555", class: "ytick" }, g)
        .textContent = Number.isInteger(v) ? String(v) : v.toFixed(1);
    }
    const span = this.xmax - this.xmin, step = [5, 10, 15, 30, 60, 120, 240, 480, 1440]
      .map(m => m * 60000).find(s => span / s <= 8) || 86400000;
    let day = null;  // the first tick and each tick on a new day carry the date, the others the time only
    for (let t = Math.ceil(this.xmin / step) * step; t <= this.xmax; t += step) {
      el("line", { x1: this.x(t), x2: this.x(t), y1: this.m.t, y2: this.y(0), stroke: "#f2f2f2" }, g);
      const label = fmtTime(t);
      el("text", { x: this.x(t), y: this.h - 8, "text-anchor": "middle", "font-size": 11, fill: "#555", class: "xtick" }, g)
        .textContent = label.slice(0, 10) === day ? label.slice(11) : label;
      day = label.slice(0, 10);
    }
    // the axis title runs along the axis, left of the tick labels, so it never sits on a tick
    const mid = (this.m.t + this.y(0)) / 2;
    el("text", { x: 14, y: mid, "text-anchor": "middle", "font-size": 11, fill: "#333", class: "ytitle",
                 transform: `rotate(-90 14 ${mid})` }, g).textContent = this.yLabel;
  }
  line(points, style, cls) {
    const pts = points.filter(p => p[1] !== null && isFinite(p[1]));
    if (!pts.length) return 0;
    // NaN gaps split the line: a missing minute is not a zero
    let d = "", prev = null;
    for (const p of points) {
      if (p[1] === null || !isFinite(p[1])) { prev = null; continue; }
      d += (prev === null ? "M" : "L") + this.x(p[0]).toFixed(1) + " " + this.y(p[1]).toFixed(1) + " ";
      prev = p;
    }
    el("path", { d, fill: "none", class: cls, ...style }, this.svg);
    this.drawn += pts.length;
    return pts.length;
  }
  step(points, style, cls) {
    const out = [];
    points.forEach((p, i) => {
      out.push(p);
      if (i + 1 < points.length) out.push([points[i + 1][0], p[1]]);
    });
    this.line(out, style, cls);
    return points.filter(p => p[1] !== null).length;
  }
  band(times, lo, hi, style, cls) {
    if (!times.length) return 0;
    let d = "M";
    times.forEach((t, i) => { d += `${this.x(t).toFixed(1)} ${this.y(hi[i]).toFixed(1)} L`; });
    for (let i = times.length - 1; i >= 0; i--) d += `${this.x(times[i]).toFixed(1)} ${this.y(lo[i]).toFixed(1)} L`;
    d = d.slice(0, -1) + "Z";
    el("path", { d, class: cls, ...style }, this.svg);
    return times.length;
  }
  vline(t, style, label) {
    el("line", { x1: this.x(t), x2: this.x(t), y1: this.m.t, y2: this.y(0), ...style }, this.svg);
    if (label) el("text", { x: this.x(t) + 3, y: this.m.t + 10, "font-size": 10, fill: "#666" }, this.svg).textContent = label;
  }
  /* Events as markers on the time axis, styled by category (styles: {category: {color}}).
     A new kind of event (alerts) is a new category in the styles table, nothing here. */
  markers(events, styles) {
    let n = 0;
    for (const e of events) {
      const t = parseTime(e.time);
      if (t < this.xmin || t > this.xmax) continue;
      const x = this.x(t), c = (styles[e.category] || {}).color || "#444";
      el("line", { x1: x, x2: x, y1: this.m.t, y2: this.y(0), stroke: c, "stroke-dasharray": "2 3", "stroke-width": 1 }, this.svg);
      const m = el("path", { d: `M${x - 6} ${this.m.t - 12} L${x + 6} ${this.m.t - 12} L${x} ${this.m.t - 2} Z`,
                             fill: c, class: `marker marker-${e.category}` }, this.svg);
      el("title", {}, m).textContent = `${e.time} ${e.category}: ${e.decision} — ${e.reason}`;
      n++;
    }
    return n;
  }
}
window.WarmcastChart = { TimeChart, parseTime, fmtTime };
})();
