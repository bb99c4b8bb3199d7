// The live panel: one EventSource to /live/events; the server sends the whole (downsampled)
// picture on connect, then a small message per change. Nothing here polls: smoothing, the log
// scale and the grid's size are this page's own business and cost the server nothing.
const FINAL = new Set(["done", "stopped", "failed"]);
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c"];
const MAX_KEPT = 2000;          // points per series kept in the page; halved when exceeded
const Y_AXES = { losses: "loss", extra: "value", quality: "distance" };
const series = {};
const compareSeries = {};       // an earlier run's points (Compare runs), drawn dashed beside the live run's
const marks = [];                // the host's settings changes: [step, "D's learning rate 0.001"], drawn on every chart
let lastRun = null, lastState = null, lastMessage = null;
let pressedAt = null;   // the run's state and step when the host last pressed a control
const panel = element.querySelector(".live");
const smoothing = element.querySelector(".live-smoothing");
const logScale = element.querySelector(".live-log");
const grid = element.querySelector(".live-grid img.fakes");
const realGrid = element.querySelector(".live-grid img.reals");
const showVerdicts = element.querySelector(".live-verdicts");
const beforeGrid = element.querySelector(".live-grid img.before");
const compared = element.querySelector(".live-grid img.compared");
// What D's verdict on an image is, and where "real" begins (core/gans.py, a GAN type's verdict).
const LEGENDS = {
  probability: "Frames: D's verdict on each image, the probability that it is real: green above 0.5 (D says real), red below.",
  logit: "Frames: D's score for each image (a logit; above 0 D says real): green above 0, red below.",
  pair: "Frames: D compares pairs; each image's verdict is the probability that D takes it for the real one "
    + "beside an average image of the other grid: green above 0.5 (D says real), red below.",
  score: "Frames: the critic's score for each image (higher means more real; not a probability): green above the "
    + "midpoint between the real and the fake images' average score, red below.",
};

if (new URLSearchParams(window.location.search).get("view") === "watch") {
  document.body.classList.add("blink-watch");      // the student's view: no form, grid first
}

function fmt(v, spacing) {
  // Enough decimals to tell neighbouring ticks apart (spacing: the distance between them).
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
  const decimals = spacing ? Math.min(Math.max(0, 1 - Math.floor(Math.log10(spacing))), 6) : 3;
  return String(+v.toFixed(decimals));
}

// Symmetric log: losses can be negative (WGAN), and its early swings of tens would flatten the rest.
const toLog = (y) => Math.sign(y) * Math.log10(1 + Math.abs(y));
const fromLog = (t) => Math.sign(t) * (10 ** Math.abs(t) - 1);

function smoothed(points, weight) {
  // A trailing exponential moving average, debiased at the start: no look-ahead, so the last
  // point is never moved by values that do not exist yet.
  if (!weight) return points;
  let num = 0, den = 0;
  return points.map(([x, y]) => { num = weight * num + (1 - weight) * y; den = weight * den + (1 - weight); return [x, num / den]; });
}

function roundTicks(lo, hi) {
  // Round numbers, 1, 2 or 5 times a power of ten (whole, as steps are): the widest such spacing
  // that still puts three ticks on the axis (an axis one step wide gets its two ends).
  const count = (s) => Math.floor(hi / s) - Math.ceil(lo / s) + 1;
  let spacing = 1;
  for (let power = 1; power <= hi; power *= 10)
    for (const m of [1, 2, 5]) if (count(m * power) >= 3) spacing = m * power;
  const ticks = [];
  for (let t = Math.ceil(lo / spacing) * spacing; t <= hi; t += spacing) ticks.push(t);
  return ticks;
}

// A step count short enough to sit under the axis: 250000 reads as 250k, 1000000 as 1M.
const stepLabel = (t) => (t >= 1e6 && t % 1e6 === 0 ? `${t / 1e6}M` : t >= 1e4 && t % 1e3 === 0 ? `${t / 1e3}k` : String(t));

function yRange(lists, f) {
  // The untrained nets' first points would set the scale for the whole run: leave them out.
  let values = [];
  for (const points of lists) {
    const skip = points.length > 3 ? Math.max(1, Math.ceil(points.length * 0.05)) : 0;
    for (let i = skip; i < points.length; i++) values.push(f(points[i][1]));
  }
  if (!values.length) return [0, 1];
  let lo = Math.min(...values), hi = Math.max(...values);
  if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.06;
  return [lo - pad, hi + pad];
}

function drawChart(svg, name, keys, names) {
  // Drawn in the chart's own CSS pixels, so its ticks are their CSS size on every screen (a drawing
  // of fixed size, scaled to the column, shrank them below reading size on a phone).
  const W = Math.max(300, Math.round(svg.clientWidth) || 600), H = Math.round(Math.min(Math.max(W * 0.43, 160), 300));
  const L = 70, R = 12, T = 10, B = 46;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const present = keys.filter((k) => series[k] && series[k].length);
  const beside = keys.filter((k) => compareSeries[k] && compareSeries[k].length);
  const legend = svg.parentElement.querySelector(".legend");
  if (!present.length && !beside.length) {
    svg.innerHTML = `<text x="${W / 2}" y="${H / 2}" text-anchor="middle" class="empty">waiting for the first points</text>`;
    legend.innerHTML = "";
    return;
  }
  const useLog = logScale.checked, weight = +smoothing.value;
  const f = useLog ? toLog : (y) => y;
  const lists = [...present.map((k) => series[k]), ...beside.map((k) => compareSeries[k])];
  const xs = lists.flatMap((p) => [p[0][0], p[p.length - 1][0]]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);   // one point: a one-step-wide axis
  const [t0, t1] = yRange(lists, f);
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => T + (1 - (Math.min(Math.max(f(y), t0), t1) - t0) / (t1 - t0)) * (H - T - B);
  let html = `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" class="axis"/>`
    + `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" class="axis"/>`;
  for (let i = 0; i <= 3; i++) {
    const t = t0 + (t1 - t0) * i / 3, y = useLog ? fromLog(t) : t;
    const spacing = useLog ? Math.abs(fromLog(t + (t1 - t0) / 3) - y) : (t1 - t0) / 3;
    html += `<line x1="${L}" y1="${sy(y)}" x2="${W - R}" y2="${sy(y)}" class="gridline"/>`
      + `<text x="${L - 6}" y="${sy(y) + 5}" text-anchor="end" class="tick">${fmt(y, spacing)}</text>`;
  }
  for (const step of roundTicks(x0, x1)) {
    // Centred under its step, but kept inside the chart at either end.
    const x = sx(step), anchor = x > W - R - 30 ? "end" : x < L + 30 ? "start" : "middle";
    html += `<line x1="${x}" y1="${T}" x2="${x}" y2="${H - B + 5}" class="gridline"/>`
      + `<text x="${x}" y="${H - 22}" text-anchor="${anchor}" class="tick x-tick">${stepLabel(step)}</text>`;
  }
  html += `<text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle" class="axis-name">step</text>`
    + `<text transform="translate(16 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle" class="axis-name">`
    + `${Y_AXES[name] || "value"}${useLog ? " (log)" : ""}</text>`;
  // A settings change the host made mid-run: a dashed line at its step, named on the loss chart.
  for (const [step, words] of marks) {
    if (step < x0 || step > x1) continue;
    const x = sx(step).toFixed(1);
    html += `<line x1="${x}" y1="${T}" x2="${x}" y2="${H - B}" class="settings-mark"/>`;
    if (name === "losses") {
      html += `<text x="${x}" y="${T + 14}" dx="4" class="mark-label">${escapeText(words)}</text>`;   // text, never markup
    }
  }
  // The compared run: dashed, in its series' colours, under the live run's lines (shared axes).
  for (const key of beside) {
    const color = COLORS[keys.indexOf(key) % COLORS.length], points = compareSeries[key].filter((p) => !p[2]);
    const drawn = smoothed(points, weight).map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
    html += `<polyline points="${drawn}" fill="none" stroke="${color}" stroke-width="2" opacity="0.7" class="compare-line"/>`;
  }
  const bold = {}, line = {};   // the line drawn bold (smoothed when smoothing is on), and its raw points
  for (const key of present) {
    const color = COLORS[keys.indexOf(key) % COLORS.length], all = series[key];
    // Stepped updates (a third element: the host's Step while paused) are markers off the line:
    // joined in, every one logged among points a log_every apart, they drew a zigzag.
    const stepped = all.filter((p) => p[2]), points = stepped.length < all.length ? all.filter((p) => !p[2]) : all;
    for (const [x, y] of stepped)
      html += `<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="4" fill="none" stroke="${color}" stroke-width="2" class="stepped"/>`;
    line[key] = points;
    // D's verdicts on the grids, as their frames show them: a dot a grid, never smoothed (the frames are not).
    if (key.startsWith("frames_")) {
      bold[key] = points;
      html += `<polyline points="${points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ")}" `
        + `fill="none" stroke="${color}" stroke-width="1.5" stroke-dasharray="2 4" class="frames-line"/>`;
      for (const [x, y] of points)
        html += `<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3.5" fill="${color}" class="frames-dot"/>`;
      continue;
    }
    bold[key] = smoothed(points, weight);
    if (points.length === 1) {
      html += `<circle cx="${sx(points[0][0])}" cy="${sy(points[0][1])}" r="5" fill="${color}"/>`;
      continue;
    }
    const drawn = (p) => p.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
    if (weight) html += `<polyline points="${drawn(points)}" fill="none" stroke="${color}" stroke-width="1.5" opacity="0.25"/>`;
    html += `<polyline points="${drawn(bold[key])}" fill="none" stroke="${color}" stroke-width="2.5"/>`;
  }
  svg.innerHTML = html;
  // The number is the newest reading, what the room compares with the phase line; with smoothing
  // on, where the bold line ends stands beside it, named.
  legend.innerHTML = present.map((k) => {
    const newest = line[k][line[k].length - 1][1], ends = bold[k][bold[k].length - 1][1];
    return `<span class="legend-item"><span style="color:${COLORS[keys.indexOf(k) % COLORS.length]}">&#9632; `
      + `${names[k]}</span> <span class="shown">${fmt(newest)}</span>`
      + (weight && line[k].length > 1 && !k.startsWith("frames_") ? ` <span class="smoothed">(line smoothed: ${fmt(ends)})</span>` : "") + "</span>";
  }).join(" ") + (beside.length ? ` <span class="legend-item compare-legend">dashed: run ${escapeText(lastMessage.compare.run)}</span>` : "");
}

function escapeText(text) {
  const span = document.createElement("span");
  span.textContent = text;
  return span.innerHTML;
}

function drawCharts() {
  if (!lastMessage) return;
  for (const [name, keys] of Object.entries(lastMessage.labels)) {
    const svg = element.querySelector(`svg[data-chart="${name}"]`);
    if (!svg) continue;
    drawChart(svg, name, Object.keys(keys), keys);
    svg.parentElement.querySelector(".healthy").textContent = (lastMessage.healthy || {})[name] || "";
  }
}

function fitGrid() {
  // As big as the panel's width and the window's height allow, in whole device pixels per image
  // pixel (crisp, even digits) unless that would waste more than 15% of the room's screen.
  // Beside a compared run's grid, each has half the width, at one scale.
  const pair = !element.querySelector(".live-compare").hidden && compared.naturalWidth;
  const width = grid.closest(".live-grid").clientWidth / (pair ? 2 : 1) - (pair ? 4 : 0);
  if (!grid.naturalWidth || !width) return;   // hidden (the Sample tab is open): fit when it shows
  const dpr = window.devicePixelRatio || 1;
  const height = Math.max(window.innerHeight * (panel.classList.contains("presenting") ? 0.72 : 0.5), 160);
  const naturalWidth = Math.max(grid.naturalWidth, pair ? compared.naturalWidth : 0);
  const naturalHeight = Math.max(grid.naturalHeight, pair ? compared.naturalHeight : 0);
  const fit = Math.min(width / naturalWidth, height / naturalHeight);
  const whole = Math.floor(fit * dpr) / dpr, scale = whole >= 0.85 * fit ? whole : fit;
  grid.style.width = `${Math.floor(grid.naturalWidth * scale)}px`;
  if (pair) compared.style.width = `${Math.floor(compared.naturalWidth * scale)}px`;
  // The real images beside the fakes at the same scale: the same tiles, side by side in the mind.
  realGrid.style.width = beforeGrid.style.width = grid.style.width;
}

function mean(values) { return values.reduce((a, b) => a + b, 0) / values.length; }

function verdictLine(verdicts) {
  // The value where D's "fake" turns into "real" for this kind of verdict.
  if (verdicts.kind === "probability" || verdicts.kind === "pair") return 0.5;
  if (verdicts.kind === "logit") return 0;
  return (mean(verdicts.real) + mean(verdicts.fake)) / 2;
}

function verdictText(v) {
  // A verdict as a person reads it: a probability to two decimals; WGAN-GP's scores and hinge's
  // logits to three figures (a critic's "-11.473" says no more than "-11.5").
  const a = Math.abs(v);
  if (a >= 1e4) return `${(v / 1000).toFixed(0)}k`;
  return v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2);
}

function frameTiles(img, values, verdicts) {
  // A frame on every tile of a grid image (tiles with a 2-pixel gap, as core/images.py grid_image
  // lays them out), coloured by D's verdict. Its number is not drawn over the image (at a size the
  // back row or a phone can read it covered the digit): it is the frame's value, said on a tap.
  const layer = img.parentElement.querySelector(".verdicts");
  layer.innerHTML = "";
  if (!values || !img.naturalWidth || !showVerdicts.checked) return;
  const W = img.naturalWidth, H = img.naturalHeight, pad = 2, columns = verdicts.columns;
  const tile = (W - pad) / columns, line = verdictLine(verdicts);
  const pct = (v, total) => `${(100 * v / total).toFixed(3)}%`;
  values.forEach((v, i) => {
    const row = Math.floor(i / columns), column = i % columns;
    const frame = document.createElement("div");
    frame.className = `verdict ${v >= line ? "real" : "fake"}`;
    Object.assign(frame.style, { left: pct(pad + column * tile, W), top: pct(pad + row * tile, H),
                                 width: pct(tile - pad, W), height: pct(tile - pad, H) });
    frame.dataset.value = verdictText(v);
    frame.dataset.place = `row ${row + 1}, column ${column + 1}`;
    layer.appendChild(frame);
  });
}

// A tap (or a click) on a framed image says D's verdict on it, at a size a phone reads.
const GRID_NAMES = { fakes: "G's image", reals: "Real image", before: "Before the Step, G's image",
                     compared: "The compared run's image" };
// The tile tapped last, read again from each new grid's verdicts: a readout always says the grid on screen.
let tapped = null;
function readVerdict(event) {
  const img = event.currentTarget.querySelector("img");
  const frames = [...event.currentTarget.querySelectorAll(".verdict")];
  const index = frames.findIndex((f) => {
    const box = f.getBoundingClientRect();
    return event.clientX >= box.left && event.clientX <= box.right && event.clientY >= box.top && event.clientY <= box.bottom;
  });
  if (index < 0) return;
  tapped = { img, index };
  sayVerdict();
}
function sayVerdict() {
  const readout = element.querySelector(".verdict-readout");
  const frame = tapped && tapped.img.parentElement.querySelectorAll(".verdict")[tapped.index];
  if (!frame) { readout.textContent = ""; return; }
  const verdicts = (lastMessage || {}).verdicts || {};
  const says = frame.classList.contains("real") ? "real" : "fake";
  const step = (panel.dataset.grid || "").split("/").pop();
  readout.textContent = `${GRID_NAMES[tapped.img.className] || "Image"}, ${frame.dataset.place}`
    + `${step ? ` (the grid at step ${step})` : ""}: D's verdict ${frame.dataset.value}, `
    + `so D says ${says}${verdicts.kind === "score" ? " (beside the other images' scores)" : ""}.`;
}
for (const img of [grid, realGrid, beforeGrid, compared]) img.parentElement.addEventListener("click", readVerdict);

// The students' QR code is big before a run, while the room joins; once a run is shown it folds to
// its one line (the link still readable), so the grid has the projector's first screen. Once a run:
// a click unfolds it, and it stays so until the next run. The host's join block may load after the
// first message, hence the observer.
let joinFoldedFor = null;
function foldJoin() {
  const details = document.querySelector("#join-link details");
  if (!details || !lastRun || joinFoldedFor === lastRun) return;
  details.open = false;
  joinFoldedFor = lastRun;
}
const joinBlock = document.getElementById("join-link");
if (joinBlock) new MutationObserver(foldJoin).observe(joinBlock, { childList: true, subtree: true });

function drawVerdicts() {
  const verdicts = (lastMessage || {}).verdicts;
  const legend = element.querySelector(".verdict-legend");
  legend.hidden = !verdicts || !showVerdicts.checked;
  element.querySelector(".verdict-readout").hidden = legend.hidden;
  // The numbers the frames stand for, in words the back row reads: D's mean verdict on each grid.
  if (verdicts) legend.textContent = `${LEGENDS[verdicts.kind] || ""} On average D gives these fakes `
    + `${verdictText(mean(verdicts.fake))} and the real images ${verdictText(mean(verdicts.real))}; `
    + "tap an image for its own.";
  frameTiles(grid, verdicts && verdicts.fake, verdicts || {});
  frameTiles(realGrid, verdicts && verdicts.real, verdicts || {});
  const before = (lastMessage || {}).before;
  frameTiles(beforeGrid, before && before.verdicts && before.verdicts.fake, (before && before.verdicts) || {});
  const beside = (lastMessage || {}).compare;
  frameTiles(compared, beside && beside.verdicts && beside.verdicts.fake, (beside && beside.verdicts) || {});
  if (tapped) sayVerdict();
}

// A silent trainer's line (views.silence_line) is rendered once, when it falls silent; its seconds
// count on here, once a second, by the page's own clock: no server work per tick. The browser's
// clock against the server's: a classroom's machines keep network time, a few seconds apart at most.
let silenceTimer = null;
function countSilence() {
  const since = (lastMessage || {}).silent_since;
  const words = [...element.querySelectorAll(".live-status b")]
    .find((b) => b.textContent.startsWith("Not answering for "));
  if (since && words) words.textContent = `Not answering for ${Math.max(0, Math.round(Date.now() / 1000 - since))} s`;
}

function showCompared(message) {
  // An earlier run beside this one (the host's Compare runs): its grid at this grid's step, what
  // differs, its curves (sent when it changes). Text only: names come from the runs folder.
  const compare = message.compare;
  if ("compare_points" in message || !compare) for (const key of Object.keys(compareSeries)) delete compareSeries[key];
  if (compare && message.compare_points) Object.assign(compareSeries, message.compare_points);
  element.querySelector(".live-compare").hidden = !(compare && compare.grid);
  if (compare && compare.grid && compared.getAttribute("src") !== compare.grid) compared.setAttribute("src", compare.grid);
  // Each grid captioned by what differs between the two runs, its own values; then which run and step.
  const caption = (differs, where) => (differs ? `${differs} (${where})` : where);
  element.querySelector(".compare-caption").textContent =
    compare ? caption(compare.caption, `run ${compare.run}, step ${compare.grid_step}`) : "";
  const own = element.querySelector(".own-caption");
  own.textContent = compare ? caption(compare.own_caption, `this run, step ${(message.grid || "").split("/").pop()}`) : "";
  own.hidden = !compare;
  const note = element.querySelector(".live-compare-note");
  note.textContent = [compare ? `Beside run ${compare.run} (right grid, dashed lines): ${compare.differences}.` : "",
                      message.compare_note || ""].filter(Boolean).join(" ");
  note.hidden = !note.textContent;
  panel.dataset.compare = compare ? compare.run : "";
}

function apply(message) {
  if (message.reset) for (const key of Object.keys(series)) delete series[key];
  if (message.reset) marks.length = 0;
  marks.push(...(message.marks || []));
  for (const [key, points] of Object.entries(message.points)) {
    const kept = (series[key] = (series[key] || []).concat(points));
    if (kept.length > MAX_KEPT) series[key] = kept.filter((_, i) => i % 2 === 0 || i === kept.length - 1);
  }
  // Each GAN type starts on its own scale (core/gans.py log_scale); the viewer's choice holds until the type changes.
  if (message.gan !== (lastMessage || {}).gan) logScale.checked = message.log_scale;
  lastMessage = message;
  element.querySelector(".live-status").innerHTML = message.status_html;
  clearInterval(silenceTimer);
  silenceTimer = message.silent_since ? setInterval(countSilence, 1000) : null;
  if (message.grid && grid.getAttribute("src") !== message.grid) grid.setAttribute("src", message.grid);
  grid.hidden = !message.grid;
  if (message.real_grid && realGrid.getAttribute("src") !== message.real_grid) realGrid.setAttribute("src", message.real_grid);
  element.querySelector(".live-real").hidden = !message.real_grid;
  const before = message.before;
  element.querySelector(".live-before").hidden = !before;
  if (before) {
    element.querySelector(".before-step").textContent = before.step;
    if (beforeGrid.getAttribute("src") !== before.grid) beforeGrid.setAttribute("src", before.grid);
  }
  element.querySelector(".live-grid .placeholder").hidden = !!message.grid;
  showCompared(message);
  drawCharts();
  // Rows as text (textContent): a value the trainer wrote may carry a folder's or a class's name.
  element.querySelector(".live-diagnostics tbody").replaceChildren(...message.diagnostics.map((cells) => {
    const row = document.createElement("tr");
    for (const cell of cells) row.appendChild(document.createElement("td")).textContent = cell;
    return row;
  }));
  // Once there is a run, the page presents it: the grid first and large, the form folded away.
  const presenting = !!message.run;
  panel.classList.toggle("presenting", presenting);
  document.body.classList.toggle("blink-presenting", presenting);
  fitGrid();
  drawVerdicts();
  // A new run moved the panel and the controls above the form: show them (Start was below).
  if (presenting && message.run !== lastRun) window.scrollTo({ top: 0 });
  // A run this page watched has just finished: go to the Sample tab (the server samples). Not
  // after a Stop: the lesson goes on at the grid, and the host may Resume.
  if (message.run === lastRun && lastState && !FINAL.has(lastState) && message.state === "done") trigger("click");
  // The host's answer to a press ("Pausing...") is news until the run moves on from where it was
  // pressed (its state, or its step while paused, for Step); then the status says what happened.
  if (pressedAt && (message.state !== pressedAt.state || (message.state === "paused" && message.step !== pressedAt.step))) {
    document.getElementById("blink-message")?.classList.add("blink-stale");
    pressedAt = null;
  }
  lastRun = message.run;
  lastState = message.state;
  foldJoin();
  panel.dataset.version = message.version;       // what a page (or a browser test) can read
  panel.dataset.state = message.state;
  // The primer shows the watched run's GAN type alone; before a run, what every GAN shares alone.
  panel.dataset.gan = message.run ? message.gan || "" : "";
  for (const section of panel.querySelectorAll(".primer-gan")) section.hidden = section.dataset.gan !== panel.dataset.gan;
  markControls(message.run ? message.state : "");
  panel.dataset.step = message.step;
  panel.dataset.points = Object.values(series).reduce((n, p) => n + p.length, 0);
  panel.dataset.grid = message.grid || "";
}

// The states in which each of the host's controls can act; in any other it looks it (live.css's
// .blink-cannot) and says why on hover. A press is still answered, in words, by the server.
const CAN_ACT = { "blink-pause": ["running", "compiling"], "blink-resume": ["paused", "stopped", "done", "failed"],
                  "blink-step": ["paused"], "blink-step-10": ["paused"],
                  "blink-stop": ["starting", "preparing", "waiting", "running", "compiling", "paused"] };
function markControls(state) {
  for (const [id, states] of Object.entries(CAN_ACT)) {
    const button = document.getElementById(id);
    if (!button) continue;
    const can = states.includes(state);
    button.classList.toggle("blink-cannot", !can);
    button.title = can ? "" : `Nothing to do now: ${state ? `the run is ${state}` : "no run yet"}.`;
  }
}

smoothing.value = localStorage.getItem("blink-smoothing") ?? "0.6";
smoothing.addEventListener("input", () => { localStorage.setItem("blink-smoothing", smoothing.value); drawCharts(); });
logScale.addEventListener("change", drawCharts);
grid.addEventListener("load", () => { fitGrid(); drawVerdicts(); });
realGrid.addEventListener("load", drawVerdicts);
beforeGrid.addEventListener("load", drawVerdicts);
compared.addEventListener("load", () => { fitGrid(); drawVerdicts(); });
showVerdicts.addEventListener("change", drawVerdicts);
element.querySelector(".live-primer-link").addEventListener("click", (event) => {
  event.preventDefault();
  const primer = element.querySelector(".live-primer");
  primer.open = true;
  primer.scrollIntoView({ behavior: "smooth", block: "start" });
});
window.addEventListener("resize", () => { fitGrid(); drawCharts(); });
// The panel shown again (back from the Sample tab) after a resize while it was hidden.
new ResizeObserver(fitGrid).observe(grid.closest(".live-grid"));

// Stop and Pause say so on the click, before the server answers: on a busy machine its answer and
// the trainer's next status can take seconds. The next push replaces the word; a refusal (a wrong
// host key) puts the last pushed status back (ui.py, the buttons' failure events).
const PENDING = { "blink-stop": ["stopping...", ["preparing", "waiting", "running", "compiling", "paused"]],
                  "blink-pause": ["pausing...", ["running", "compiling"]] };
document.addEventListener("click", (event) => {
  if (event.target.closest && event.target.closest("#blink-controls button")) {
    pressedAt = { state: panel.dataset.state, step: Number(panel.dataset.step) };
    document.getElementById("blink-message")?.classList.remove("blink-stale");
  }
  const button = event.target.closest && event.target.closest("#blink-stop, #blink-pause");
  const [word, states] = button ? PENDING[button.id] : [null, []];
  const state = element.querySelector(".live-status b");
  if (word && state && states.includes(panel.dataset.state)) state.textContent = word;
}, true);
panel.addEventListener("blink-refused", () => {
  if (lastMessage) element.querySelector(".live-status").innerHTML = lastMessage.status_html;
});

const source = new EventSource("live/events");
source.onmessage = (event) => apply(JSON.parse(event.data));
