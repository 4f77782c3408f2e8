// Line charts drawn as SVG elements (createElementNS, never markup): series of [time ms, value] points over a
// fixed window ending now.

import { h } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  return el;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (value <= step * magnitude) return step * magnitude;
  return 10 * magnitude;
}

// series: [{label, points: [[ms, value], ...]}]; windowMs: how much history the x axis spans.
export function lineChart(title, series, windowMs = 600000, unit = "") {
  const width = 560, height = 180, left = 56, right = 10, top = 10, bottom = 24;
  const now = Date.now(), start = now - windowMs;
  const max = niceMax(Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1]))));
  const x = (t) => left + ((t - start) / windowMs) * (width - left - right);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img" });
  root.appendChild(svg("title", {}, title));
  for (const frac of [0, 0.5, 1]) {
    const v = max * frac;
    root.appendChild(svg("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" }));
    root.appendChild(svg("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end", class: "axis" },
      (Number.isInteger(v) ? String(v) : v.toFixed(1)) + unit));
  }
  for (const minutes of [10, 5, 0]) {
    const t = now - minutes * 60000;
    if (t < start) continue;
    root.appendChild(svg("text", { x: x(t), y: height - 6, "text-anchor": "middle", class: "axis" },
      minutes ? `-${minutes} min` : "now"));
  }
  series.forEach((s, i) => {
    const pts = s.points.filter((p) => p[0] >= start);
    if (pts.length) {
      const d = pts.map((p, j) => (j ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
      root.appendChild(svg("path", { d, fill: "none", stroke: COLOURS[i % COLOURS.length], "stroke-width": 1.5 }));
    }
  });
  const legend = h("ul", { class: "legend" }, series.map((s, i) => {
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    const swatch = h("span", { class: "swatch c" + (i % COLOURS.length) });
    return h("li", {}, swatch, s.label + ": " + (Number.isInteger(last) ? last : last.toFixed(1)) + unit);
  }));
  return h("figure", { class: "chart-box" }, h("figcaption", {}, title), root, legend);
}

// Counter samples [{timestamp, sample}] (newest first, as the API gives them) as rates per second.
export function ratesFrom(samples) {
  const sorted = [...samples].sort((a, b) => a.timestamp - b.timestamp);
  const out = [];
  for (let i = 1; i < sorted.length; i += 1) {
    const dt = (sorted[i].timestamp - sorted[i - 1].timestamp) / 1000;
    if (dt > 0) out.push([sorted[i].timestamp, Math.max(0, (sorted[i].sample - sorted[i - 1].sample) / dt)]);
  }
  return out;
}

export function levelsFrom(samples) {
  return [...samples].sort((a, b) => a.timestamp - b.timestamp).map((s) => [s.timestamp, s.sample]);
}

// Points gathered by the page itself while it stays open (objects without server-side history).
export class History {
  constructor(windowMs = 600000) {
    this.windowMs = windowMs;
    this.series = new Map();
  }

  add(label, value, at = Date.now()) {
    const points = this.series.get(label) || [];
    points.push([at, Number(value) || 0]);
    while (points.length && points[0][0] < at - this.windowMs) points.shift();
    this.series.set(label, points);
  }

  get(label) {
    return { label, points: this.series.get(label) || [] };
  }
}
