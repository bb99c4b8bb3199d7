// The live panel: one EventSource to /live/events; the server sends the whole (downsampled)
// picture on connect, then a small message per change. Nothing here polls.
const FINAL = new Set(["done", "stopped", "failed"]);
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c"];
const MAX_KEPT = 2000;          // points per series kept in the page; halved when exceeded
const series = {};
let lastRun = null, lastState = null;

if (new URLSearchParams(window.location.search).get("view") === "watch") {
  document.body.classList.add("blink-watch");      // the student's view: no form, grid first
}

function fmt(v) {
  const a = Math.abs(v);
  return a !== 0 && (a >= 1e4 || a < 1e-2) ? v.toExponential(1) : String(+v.toPrecision(3));
}

function yRange(lists) {
  // The first few points (untrained nets) would set the scale for the whole run: leave them out.
  let values = [];
  for (const points of lists) {
    const skip = points.length > 20 ? Math.ceil(points.length * 0.05) : 0;
    for (let i = skip; i < points.length; i++) values.push(points[i][1]);
  }
  if (!values.length) return [0, 1];
  let lo = Math.min(...values), hi = Math.max(...values);
  if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function drawChart(svg, keys, names) {
  const W = 600, H = 240, L = 56, R = 10, T = 10, B = 34;
  const lists = keys.filter((k) => series[k] && series[k].length).map((k) => series[k]);
  let html = "";
  if (!lists.length) {
    svg.innerHTML = `<text x="${W / 2}" y="${H / 2}" text-anchor="middle" class="empty">waiting for the first points</text>`;
    return;
  }
  const xs = lists.flatMap((p) => [p[0][0], p[p.length - 1][0]]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);   // one point: a one-step-wide axis
  const [y0, y1] = yRange(lists);
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => T + (1 - (Math.min(Math.max(y, y0), y1) - y0) / (y1 - y0)) * (H - T - B);
  html += `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" class="axis"/>`;
  html += `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" class="axis"/>`;
  for (const y of [y0, (y0 + y1) / 2, y1]) {
    html += `<text x="${L - 6}" y="${sy(y) + 5}" text-anchor="end" class="tick">${fmt(y)}</text>`;
  }
  html += `<text x="${L}" y="${H - 8}" class="tick">${x0}</text>`;
  html += `<text x="${W - R}" y="${H - 8}" text-anchor="end" class="tick">step ${x1}</text>`;
  keys.forEach((key, i) => {
    const points = series[key];
    if (!points || !points.length) return;
    const color = COLORS[i % COLORS.length];
    if (points.length === 1) {
      html += `<circle cx="${sx(points[0][0])}" cy="${sy(points[0][1])}" r="4" fill="${color}"/>`;
      return;
    }
    const d = points.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    html += `<polyline points="${d}" fill="none" stroke="${color}" stroke-width="2"/>`;
  });
  svg.innerHTML = html;
  svg.parentElement.querySelector(".legend").innerHTML = keys.filter((k) => series[k])
    .map((k, i) => `<span style="color:${COLORS[keys.indexOf(k) % COLORS.length]}">&#9632; ${names[k]}</span>`).join(" ");
}

function apply(message) {
  if (message.reset) for (const key of Object.keys(series)) delete series[key];
  for (const [key, points] of Object.entries(message.points)) {
    const kept = (series[key] = (series[key] || []).concat(points));
    if (kept.length > MAX_KEPT) series[key] = kept.filter((_, i) => i % 2 === 0 || i === kept.length - 1);
  }
  element.querySelector(".live-status").innerHTML = message.status_html;
  const img = element.querySelector(".live-grid img");
  if (message.grid && img.getAttribute("src") !== message.grid) img.setAttribute("src", message.grid);
  img.hidden = !message.grid;
  element.querySelector(".live-grid .placeholder").hidden = !!message.grid;
  for (const [name, keys] of Object.entries(message.labels)) {
    const svg = element.querySelector(`svg[data-chart="${name}"]`);
    if (svg) drawChart(svg, Object.keys(keys), keys);
  }
  element.querySelector(".live-diagnostics tbody").innerHTML = message.diagnostics
    .map(([what, value]) => `<tr><td>${what}</td><td>${value}</td></tr>`).join("");
  // A run this page watched has just ended well: go to the Sample tab (the server samples).
  if (message.run === lastRun && lastState && !FINAL.has(lastState)
      && (message.state === "done" || message.state === "stopped")) trigger("click");
  lastRun = message.run;
  lastState = message.state;
  const panel = element.querySelector(".live");   // what a page (or a browser test) can read
  panel.dataset.version = message.version;
  panel.dataset.state = message.state;
  panel.dataset.points = Object.values(series).reduce((n, p) => n + p.length, 0);
  panel.dataset.grid = message.grid || "";
}

const source = new EventSource("live/events");
source.onmessage = (event) => apply(JSON.parse(event.data));
