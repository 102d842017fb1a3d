/* The live and replay view of a fes-hil run (README "Live view").
 *
 * The server sends samples (hil/view/scene.py) in radians and SI units: live over server-sent events
 * (/api/stream), a replay in chunks (/api/chunk?i=K) that this page plays with its own clock. Every
 * animation frame with a new sample redraws the canvases; degrees and microseconds appear only on screen.
 * window.hilView holds what is drawn (the sample, the points on the canvases, the GH marker) for tests and
 * for a look from the browser's console.
 */
"use strict";
(() => {
  const DEG = 180 / Math.PI;
  const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
                   "#7f7f7f"];
  const MARKER = {stable: "rgb(0, 150, 60)", unstable: "rgb(214, 32, 32)"};
  const ARM_MARGIN = 0.04;                // m shown around the thorax and the arm
  const ARM_SHRINK_S = 3;                 // s: how slowly the arm's box shrinks back after a wide movement
  const ARM_TOP_PX = 26, ARM_BOTTOM_PX = 18;  // room for the scale bar above the arm and the side below it
  const GLENOID_LIM = 60 / DEG;           // rad shown on each side of the glenoid centre
  const TRACE_INTERVAL_MS = 100;          // the traces, stimulation bars and alarms are redrawn this often
  const ALARMS = [  // status bit, label, index into sample.counts (the counter shown next to it)
    ["watchdog", "watchdog tripped", 0, "trips"], ["gh_unstable", "GH unstable", 1, "ticks"],
    ["rom_alarm", "range-of-motion alarm", 2, "ticks"], ["gh_zeroed", "GH action: stimulation zero"],
    ["rom_zeroed", "ROM action: stimulation zero"], ["overrun", "previous tick overran"],
    ["stopping", "safety stop"]];

  const view = {info: null, latest: null, history: [], drawn: null, first: null, dirty: false, hold: false,
                draws: 0, samples: 0, fps: 0, drawTimes: [], px: {}, glenoid: null, replay: null, nextTraces: 0,
                armBox: {}, extent: {}, labels: {}, charts: {}};
  window.hilView = view;
  const $ = id => document.getElementById(id);
  const landmark = {};

  function point(s, name) {
    const i = 3 * landmark[name];
    return [s.pts[i], s.pts[i + 1], s.pts[i + 2]];
  }

  function setText(id, text, value) {
    // only what changed: every change of the page's text costs the browser a layout
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
    const data = value === undefined ? undefined : value === null ? "" : String(value);
    if (data !== undefined && el.dataset.value !== data) el.dataset.value = data;
  }

  function fixed(x, digits) {
    return x === null || x === undefined ? "–" : x.toFixed(digits);
  }

  function setConn(text, ok) {
    const el = $("conn");
    el.textContent = text;
    el.className = ok ? "ok" : "bad";
  }

  // ---------------------------------------------------------------------------------------------
  // drawing helpers

  function path(ctx, pts) {
    ctx.beginPath();
    pts.forEach((p, i) => (i ? ctx.lineTo(p[0], p[1]) : ctx.moveTo(p[0], p[1])));
  }

  function line(ctx, pts, colour, width) {
    path(ctx, pts);
    ctx.strokeStyle = colour;
    ctx.lineWidth = width;
    ctx.lineCap = ctx.lineJoin = "round";
    ctx.stroke();
  }

  function dot(ctx, p, r, colour) {
    ctx.beginPath();
    ctx.arc(p[0], p[1], r, 0, 2 * Math.PI);
    ctx.fillStyle = colour;
    ctx.fill();
  }

  function clear(ctx) {
    // a new drawing of the canvas: its label boxes (view.labels, where tests look for overlaps) start again
    ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
    view.labels[ctx.canvas.id] = [];
  }

  function label(ctx, text, x, y, align = "left", colour = "#4b5563") {
    ctx.fillStyle = colour;
    ctx.font = "11px system-ui, sans-serif";
    ctx.textAlign = align;
    ctx.fillText(text, x, y);
    const w = ctx.measureText(text).width, x0 = align === "left" ? x : align === "right" ? x - w : x - w / 2;
    view.labels[ctx.canvas.id].push({text, x0, x1: x0 + w, y0: y - 9, y1: y + 2});
  }

  function sizeCanvases() {
    // each canvas as wide as its card, in CSS pixels, its height from its data-aspect
    for (const canvas of document.querySelectorAll("canvas[data-aspect]")) {
      const w = Math.floor(canvas.clientWidth), h = Math.round(w * Number(canvas.dataset.aspect));
      if (w > 0 && (canvas.width !== w || canvas.height !== h)) [canvas.width, canvas.height] = [w, h];
    }
    view.dirty = true;
  }

  function niceStep(span) {
    const p = Math.pow(10, Math.floor(Math.log10(span)));
    const f = span / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
  }

  // ---------------------------------------------------------------------------------------------
  // the arm: two orthogonal projections of the model's points

  function armBox(plane, a, s) {
    // the (across, up) extent, m, of the thorax and the arm: it grows at once to take in the drawing and
    // shrinks back to it with the time constant ARM_SHRINK_S, so the arm fills its card and the scale changes
    // only slowly
    const th = view.info.thorax;
    const lo = [th.centre[a] - th.radii[a], th.centre[1] - th.radii[1]];
    const hi = [th.centre[a] + th.radii[a], th.centre[1] + th.radii[1]];
    for (const name of view.info.landmarks) {
      const p = point(s, name);
      [p[a], p[1]].forEach((v, i) => { lo[i] = Math.min(lo[i], v); hi[i] = Math.max(hi[i], v); });
    }
    const box = view.armBox[plane];
    if (!box) return (view.armBox[plane] = {lo, hi, t: s.t});
    const f = Math.min(1, Math.abs(s.t - box.t) / ARM_SHRINK_S);
    box.t = s.t;
    for (const i of [0, 1]) {
      box.lo[i] = Math.min(lo[i], box.lo[i] + (lo[i] - box.lo[i]) * f);
      box.hi[i] = Math.max(hi[i], box.hi[i] + (hi[i] - box.hi[i]) * f);
    }
    return box;
  }

  function projection(canvas, plane, s) {
    // frontal, seen from the front: the subject's right (+x) on the viewer's left; sagittal, seen from the
    // right: anterior (-z) on the viewer's right; up (+y) up in both; armBox's box fills the canvas
    const a = plane === "frontal" ? 0 : 2, box = armBox(plane, a, s), H = canvas.height - ARM_TOP_PX - ARM_BOTTOM_PX;
    const k = Math.min(canvas.width / (box.hi[0] - box.lo[0] + 2 * ARM_MARGIN),
                       H / (box.hi[1] - box.lo[1] + 2 * ARM_MARGIN));
    const mid = [(box.lo[0] + box.hi[0]) / 2, (box.lo[1] + box.hi[1]) / 2];
    return {k, a, at: p => [canvas.width / 2 - (p[a] - mid[0]) * k, ARM_TOP_PX + H / 2 - (p[1] - mid[1]) * k]};
  }

  function drawArm(plane, s) {
    const canvas = $(plane), ctx = canvas.getContext("2d"), {k, a, at} = projection(canvas, plane, s);
    clear(ctx);
    const th = view.info.thorax, c = at(th.centre);
    ctx.beginPath();
    ctx.ellipse(c[0], c[1], th.radii[a] * k, th.radii[1] * k, 0, 0, 2 * Math.PI);
    ctx.fillStyle = "#e9ecf1";
    ctx.fill();
    ctx.strokeStyle = "#9aa3b5";
    ctx.lineWidth = 1.5;
    ctx.stroke();
    const P = {};
    for (const name of view.info.landmarks) P[name] = at(point(s, name));
    path(ctx, [P.AC, P.TS, P.AI, P.GH]);
    ctx.closePath();
    ctx.fillStyle = "rgba(110, 130, 200, 0.35)";
    ctx.fill();
    ctx.strokeStyle = "#5b6fb0";
    ctx.lineWidth = 1.5;
    ctx.stroke();
    line(ctx, [P.SC, P.AC], "#8c564b", 5);
    line(ctx, [P.GH, P.EL], "#34495e", 7);
    line(ctx, [P.EL, P.PRU, P.WR], "#4a6076", 5);
    line(ctx, [P.WR, P.HAND], "#7f8c8d", 5);
    const gh = point(s, "GH");
    line(ctx, [P.GH, at(gh.map((x, i) => x + 0.05 * s.gax[i]))], "#5b6fb0", 2);
    for (const name of ["SC", "AC", "GH", "EL", "WR"]) dot(ctx, P[name], 3.5, "#1d2330");
    dot(ctx, P.HAND, 6, "#7f8c8d");
    label(ctx, plane === "frontal" ? "← subject's right" : "anterior →", plane === "frontal" ? 8 : canvas.width - 8,
          canvas.height - 8, plane === "frontal" ? "left" : "right");
    label(ctx, "10 cm", 8, 16);
    line(ctx, [[8, 22], [8 + 0.1 * k, 22]], "#4b5563", 2);
    view.px[plane] = P;
    const xs = [...Object.values(P).map(p => p[0]), c[0] - th.radii[a] * k, c[0] + th.radii[a] * k];
    const ys = [...Object.values(P).map(p => p[1]), c[1] - th.radii[1] * k, c[1] + th.radii[1] * k];
    view.extent[plane] = [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];  // px drawn
  }

  // ---------------------------------------------------------------------------------------------
  // the glenoid: rim ellipse, GH force direction (theta up, phi across) and its trail

  function drawGlenoid(s, trail) {
    const canvas = $("glenoid"), ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
    const k = (w / 2 - 12) / GLENOID_LIM, cx = w / 2, cy = h / 2;
    const at = (theta, phi) => [Math.min(w, Math.max(0, cx + phi * k)), Math.min(h, Math.max(0, cy - theta * k))];
    clear(ctx);
    line(ctx, [[0, cy], [w, cy]], "#d5d9e0", 1);
    line(ctx, [[cx, 0], [cx, h]], "#d5d9e0", 1);
    for (const d of [-40, -20, 20, 40]) {
      label(ctx, `${d}°`, cx + d / DEG * k, cy + 12, "center", "#9aa3b5");
      label(ctx, `${d}°`, cx + 3, cy - d / DEG * k + 4, "left", "#9aa3b5");
    }
    // theta up (superior), phi across: the glenoid's z axis (x_g cross y_g) points anterior
    label(ctx, "θ superior ↑", 4, 12);
    label(ctx, "φ anterior →", w - 4, h - 5, "right");
    label(ctx, "← posterior", 4, h - 5);
    const [rimTheta, rimPhi] = view.info.rim;
    ctx.beginPath();
    ctx.ellipse(cx, cy, rimPhi * k, rimTheta * k, 0, 0, 2 * Math.PI);
    ctx.strokeStyle = "#1d2330";
    ctx.lineWidth = 2;
    ctx.stroke();
    if (!view.info.has_gh) {
      label(ctx, "no GH joint in this plant", cx, cy + 30, "center");
      return;
    }
    const pts = trail.filter(x => x.gh).map(x => at(x.gh[0], x.gh[1]));
    if (pts.length > 1) line(ctx, pts, "rgba(70, 110, 190, 0.6)", 2);
    view.glenoid = {cx, cy, k, marker: null, colour: null};
    if (!s.gh) return;
    const unstable = s.status & statusBit("gh_unstable");
    const colour = unstable ? MARKER.unstable : MARKER.stable;
    const m = at(s.gh[0], s.gh[1]);
    dot(ctx, m, 6, colour);
    Object.assign(view.glenoid, {marker: m, colour});
  }

  function showGlenoidValues(s) {
    const g = s.gh || [null, null, null];
    setText("gh-theta", fixed(g[0] === null ? null : g[0] * DEG, 1), g[0]);
    setText("gh-phi", fixed(g[1] === null ? null : g[1] * DEG, 1), g[1]);
    setText("gh-stability", fixed(g[2], 3), g[2]);
  }

  // ---------------------------------------------------------------------------------------------
  // traces of the last seconds

  function drawChart(id, hist, series, tNow, minSpan, digits) {
    const canvas = $(id), ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
    clear(ctx);
    ctx.font = "11px system-ui, sans-serif";
    // the legend on the right as wide as its longest entry with a five-character value
    const right = 30 + Math.max(...series.map(sr => ctx.measureText(`${sr.label} -000.0`).width));
    const left = 40, top = 8, bottom = 20, span = view.info.history_s, t0 = tNow - span;
    let lo = Infinity, hi = -Infinity;
    for (const s of hist) for (const sr of series) {
      const v = sr.get(s);
      if (v !== null && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    }
    if (!Number.isFinite(lo)) { lo = 0; hi = minSpan; }
    if (hi - lo < minSpan) { const m = (hi + lo) / 2; lo = m - minSpan / 2; hi = m + minSpan / 2; }
    const x = t => left + (t - t0) / span * (W - left - right);
    const y = v => top + (hi - v) / (hi - lo) * (H - top - bottom);
    const step = niceStep((hi - lo) / 4);
    for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) {
      line(ctx, [[left, y(v)], [W - right, y(v)]], "#eceef2", 1);
      // values near the bottom would meet the time labels
      if (y(v) < H - bottom - 4) label(ctx, v.toFixed(step < 1 ? 1 : 0), left - 4, y(v) + 4, "right");
    }
    label(ctx, `−${span} s`, left, H - 6, "left");
    label(ctx, `−${span / 2} s`, x(tNow - span / 2), H - 6, "center");
    label(ctx, "now", W - right, H - 6, "right");
    view.charts[id] = series.map((sr, i) => {
      const pts = hist.filter(s => sr.get(s) !== null).map(s => [x(s.t), y(sr.get(s))]);
      if (pts.length) line(ctx, pts, COLOURS[i % COLOURS.length], 1.6);
      const now = hist.length ? sr.get(hist[hist.length - 1]) : null;
      const ly = top + 8 + i * Math.min(18, (H - top - bottom) / series.length);
      line(ctx, [[W - right + 8, ly - 4], [W - right + 22, ly - 4]], COLOURS[i % COLOURS.length], 3);
      label(ctx, `${sr.label} ${fixed(now, digits)}`, W - right + 26, ly);
      return pts.length;
    });
  }

  function drawTraces(s, hist) {
    const names = view.info.dof_names;
    const th = ["plane of elevation", "elevation", "axial rotation"].map((lab, i) => ({
      label: lab, get: x => x.th[i] === null ? null : x.th[i] * DEG}));
    const q = i => x => x.q[i] === null ? null : x.q[i] * DEG;
    th.push({label: "elbow flexion (ELx)", get: q(9)}, {label: "pronation (PSy)", get: q(10)});
    drawChart("angles-th", hist, th, s.t, 20, 1);
    drawChart("angles-joint", hist, names.slice(0, 9).map((n, i) => ({label: n, get: q(i)})), s.t, 20, 1);
    const us = key => x => x[key] === null ? null : x[key] * 1e6;
    drawChart("timing", hist, [{label: "largest lateness µs", get: us("latmax")},
                               {label: "compute µs", get: us("comp")}], s.t, 100, 0);
    setText("lateness", fixed(s.lat === null ? null : s.lat * 1e6, 1), s.lat);
    setText("latmax", fixed(s.latmax === null ? null : s.latmax * 1e6, 1), s.latmax);
    setText("compute", fixed(s.comp === null ? null : s.comp * 1e6, 1), s.comp);
    setText("misses", String(s.misses), s.misses);
  }

  // ---------------------------------------------------------------------------------------------
  // stimulation and alarms

  function buildPanels(info) {
    const stim = $("stim");
    if (!info.channels.length) stim.textContent = "direct excitation mode: no stimulation channels";
    info.channels.forEach((ch, i) => {
      const row = document.createElement("div");
      row.className = "stim-row";
      row.innerHTML = `<span></span><div class="stim-bar"><div id="stim-bar-${i}" style="width:0"></div></div>` +
                      `<span id="stim-text-${i}">–</span>`;
      row.firstChild.textContent = ch.name;
      stim.appendChild(row);
    });
    for (const [bit, text] of ALARMS) {
      const li = document.createElement("li");
      li.id = `alarm-${bit}`;
      li.innerHTML = `<span></span><span class="count"></span>`;
      li.firstChild.textContent = text;
      $("alarms").appendChild(li);
    }
  }

  function statusBit(name) {
    return 1 << view.info.status_bits.indexOf(name);
  }

  function drawStim(s) {
    view.info.channels.forEach((ch, i) => {
      const [pw, amp, f] = s.stim[i] || [null, null, null];
      $(`stim-bar-${i}`).style.width = `${Math.min(100, 100 * (amp || 0) / ch.max_amplitude_ma)}%`;
      setText(`stim-text-${i}`, `${fixed(amp, 1)} mA  ${fixed(pw, 0)} µs  ${fixed(f, 0)} Hz`, amp);
    });
  }

  function drawAlarms(s) {
    for (const [bit, , count, unit] of ALARMS) {
      const li = $(`alarm-${bit}`);
      const on = Boolean(s.status & statusBit(bit));
      if (li.classList.contains("on") !== on) li.classList.toggle("on", on);
      const text = count === undefined ? "" : `${s.counts[count]} ${unit}`;
      if (li.lastChild.textContent !== text) li.lastChild.textContent = text;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // one frame

  function draw(s, hist, now) {
    setText("tick", String(s.tick), s.tick);
    setText("time", fixed(s.t, 3), s.t);
    drawArm("frontal", s);
    drawArm("sagittal", s);
    drawGlenoid(s, hist.filter(x => x.t >= s.t - view.info.trail_s));
    showGlenoidValues(s);
    // the traces of the last seconds, the stimulation bars and the alarm list change little between
    // frames: ten times a second is enough, and the browser's drawing is most of the view's cost
    if (view.dirty || !(now < view.nextTraces)) {
      view.nextTraces = now + TRACE_INTERVAL_MS;
      drawTraces(s, hist);
      drawStim(s);
      drawAlarms(s);
    }
  }

  function frame(now) {
    requestAnimationFrame(frame);
    if (!view.info || view.hold) return;
    let s = view.latest, hist = view.history;
    if (view.replay) {
      const got = replayStep(now);
      if (!got) return;
      [s, hist] = got;
    }
    if (!s || (s === view.drawn && !view.dirty)) return;
    draw(s, hist, now);
    if (!view.drawn) view.first = s.tick;
    view.drawn = s;
    view.dirty = false;
    view.draws += 1;
    view.drawTimes.push(now);
    while (view.drawTimes[0] < now - 1000) view.drawTimes.shift();
    view.fps = view.drawTimes.length;
  }

  // ---------------------------------------------------------------------------------------------
  // live: server-sent events

  function startLive() {
    $("live-controls").hidden = false;
    $("hold").onclick = () => {
      view.hold = !view.hold;
      $("hold").textContent = view.hold ? "resume display" : "hold display";
    };
    setConn("waiting for the loop", true);
    const events = new EventSource("/api/stream");
    events.onerror = () => setConn(view.latest ? "disconnected (the run has ended?)" : "cannot connect", false);
    events.onmessage = ev => receive(JSON.parse(ev.data));
  }

  function receive(s) {
    if (!view.latest) setConn("live", true);
    view.samples += 1;
    view.latest = s;
    const h = view.history;
    h.push(s);
    let old = 0;
    while (old < h.length && h[old].t < s.t - view.info.history_s) old += 1;
    if (old) h.splice(0, old);
  }

  // ---------------------------------------------------------------------------------------------
  // replay: chunks of samples, played with the page's clock

  function startReplay(info) {
    // it plays from the start at once: the first frame and then the charts fill without a click
    const r = view.replay = {n: info.n_samples, chunk: info.chunk, dt: info.sample_period_s, pos: 0,
                             playing: true, speed: 1, chunks: new Map(), pending: new Set(), wall: null};
    $("replay-controls").hidden = false;
    $("play").textContent = "pause";
    fetchChunk(r, 0);
    $("seek").max = String(r.n - 1);
    $("play").onclick = () => {
      if (!r.playing && r.pos >= r.n - 1) r.pos = 0;
      r.playing = !r.playing;
      $("play").textContent = r.playing ? "pause" : "play";
    };
    $("seek").oninput = () => { r.pos = Number($("seek").value); view.dirty = true; };
    $("speed").onchange = () => { r.speed = Number($("speed").value); };
    setConn(info.warnings && info.warnings.length ? `replay (${info.warnings.join("; ")})` : "replay", true);
  }

  function fetchChunk(r, k) {
    if (k < 0 || k * r.chunk >= r.n || r.chunks.has(k) || r.pending.has(k)) return;
    r.pending.add(k);
    fetch(`/api/chunk?i=${k}`).then(resp => resp.json()).then(samples => {
      r.chunks.set(k, samples);
      for (const old of r.chunks.keys()) if (Math.abs(old - k) > 8) r.chunks.delete(old);
      view.dirty = true;
    }).catch(err => setConn(`cannot load samples ${k * r.chunk}…: ${err}`, false)).finally(() => r.pending.delete(k));
  }

  function sampleAt(r, i) {
    const c = r.chunks.get(Math.floor(i / r.chunk));
    return c ? c[i % r.chunk] : null;
  }

  function replayStep(now) {
    const r = view.replay;
    // the clock runs from the frame that first shows the sample at pos: a chunk still loading holds the
    // position, and the sample it brings is drawn before playing moves on (however long that frame took)
    const ready = Boolean(sampleAt(r, Math.floor(r.pos)));
    if (r.playing && r.wall !== null && ready) {
      r.pos = Math.min(r.n - 1, r.pos + (now - r.wall) / 1000 * r.speed / r.dt);
      if (r.pos >= r.n - 1) {
        r.playing = false;
        $("play").textContent = "play";
      }
    }
    r.wall = ready ? now : null;
    const i = Math.floor(r.pos), back = Math.ceil(view.info.history_s / r.dt), k = Math.floor(i / r.chunk);
    for (const c of [Math.floor(Math.max(0, i - back) / r.chunk), k, k + 1]) fetchChunk(r, c);
    const s = sampleAt(r, i);
    if (!s) return null;
    const hist = [];
    for (let j = Math.max(0, i - back); j <= i; j++) {
      const x = sampleAt(r, j);
      if (x) hist.push(x);
    }
    $("seek").value = String(i);
    $("position").textContent = `${(i * r.dt).toFixed(2)} s of ${((r.n - 1) * r.dt).toFixed(2)} s`;
    return [s, hist];
  }

  // ---------------------------------------------------------------------------------------------

  async function start() {
    const info = await (await fetch("/api/info")).json();
    info.landmarks.forEach((name, i) => { landmark[name] = i; });
    view.info = info;
    $("mode").textContent = info.mode === "live" ? "live view" : "replay";
    $("config").textContent = info.config_path;
    $("start").textContent = info.start_time || "–";
    $("recording").textContent = info.recording || "off";
    buildPanels(info);
    sizeCanvases();
    window.addEventListener("resize", sizeCanvases);
    if (info.mode === "live") startLive(); else startReplay(info);
    requestAnimationFrame(frame);
  }

  start().catch(err => setConn(`cannot start: ${err}`, false));
})();
