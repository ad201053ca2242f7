// The routing playground of chapter 5: a few children vote 2-D vectors for two or three
// parents, and Procedure 1 of Sabour et al. (2017) routes them in the page, in float64,
// every time the reader moves a vote. The presets come from chapter 5's output earlier
// on the page (book/capsbook/playground.py sets window.CAPSNOTES_PLAYGROUND_PRESETS);
// book/_ext/capsnotes_html.py copies this script into _static. No library, no network.
//
// window.capsnotesPlayground.route(votes, r) is the routing alone (votes[i][j] is child
// i's vote for parent j); tests/test_browser.py holds it, and what the page shows, to
// capsnotes.dynamic_routing.
(function () {
  "use strict";
  const DATA = window.CAPSNOTES_PLAYGROUND_PRESETS;
  const FORMAT = 1;  // capsbook.playground.FORMAT
  const EPS = 1e-8;  // capsnotes.squash: ||s|| is sqrt(||s||^2 + eps)
  const SCALES = [0.1, 0.25, 0.5, 1, 2, 3, 5];
  const STEP = 0.05, BIG_STEP = 0.25;  // a keyboard move, and with Shift
  const SVG = "http://www.w3.org/2000/svg";
  const EXTENTS = [1.25, 1.5, 2, 3, 4], MAX_EXTENT = 4;

  // --- Procedure 1, line by line (capsnotes/routing.py) ------------------------------
  function softmax(logits) {  // as torch.softmax computes it
    const top = Math.max(...logits);
    const e = logits.map(x => Math.exp(x - top));
    const total = e.reduce((a, b) => a + b, 0);
    return e.map(x => x / total);
  }

  function squash(s) {
    const squared = s.reduce((a, x) => a + x * x, 0);
    const scale = squared / (1 + squared) / Math.sqrt(squared + EPS);
    return s.map(x => x * scale);
  }

  const dot = (a, b) => a.reduce((total, x, d) => total + x * b[d], 0);

  function checkVotes(votes) {
    const ok = Array.isArray(votes) && votes.length > 0 && Array.isArray(votes[0])
      && votes[0].length > 0 && Array.isArray(votes[0][0]) && votes[0][0].length > 0
      && votes.every(child => Array.isArray(child) && child.length === votes[0].length
        && child.every(u => Array.isArray(u) && u.length === votes[0][0].length
          && u.every(Number.isFinite)));
    if (!ok) throw new Error("votes must be [child][parent][dim] finite numbers, the same sizes throughout");
  }

  // votes[i][j]: û_{j|i}. Returns, for each iteration t = 1..r, the couplings c[i][j]
  // it uses, s[j], v[j] and the agreement û_{j|i}·v_j (added to the logits when t < r),
  // and the last c and v.
  function route(votes, r) {
    checkVotes(votes);
    if (!Number.isInteger(r) || r < 1) throw new Error(`routing iterations must be an integer >= 1, got ${r}`);
    const dim = votes[0][0].length;
    // line 2: b_ij <- 0
    let b = votes.map(child => child.map(() => 0));
    const iterations = [];
    for (let t = 0; t < r; t++) {  // line 3
      // line 4: c_i <- softmax(b_i), over the parents j
      const c = b.map(softmax);
      // line 5: s_j <- sum_i c_ij û_{j|i}
      const s = votes[0].map((_, j) => {
        const total = new Array(dim).fill(0);
        votes.forEach((child, i) => child[j].forEach((x, d) => { total[d] += c[i][j] * x; }));
        return total;
      });
      // line 6: v_j <- squash(s_j)
      const v = s.map(squash);
      const agreement = votes.map(child => child.map((u, j) => dot(u, v[j])));
      const added = t + 1 < r;
      iterations.push({ c, s, v, agreement, added });
      // line 7: b_ij <- b_ij + û_{j|i}·v_j (not after the last pass)
      if (added) b = b.map((row, i) => row.map((x, j) => x + agreement[i][j]));
    }
    // line 8: return v_j
    const last = iterations[iterations.length - 1];
    return { iterations, c: last.c, v: last.v };
  }

  // --- drawing ----------------------------------------------------------------------
  const norm = u => Math.hypot(...u);
  const fixed = (x, digits) => (Math.abs(x) < 0.5 * Math.pow(10, -digits) ? 0 : x).toFixed(digits);

  function element(tag, attributes, parent, namespace) {
    const node = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (key === "text") node.textContent = value; else node.setAttribute(key, value);
    }
    if (parent) parent.appendChild(node);
    return node;
  }
  const svg = (tag, attributes, parent) => element(tag, attributes, parent, SVG);

  const SIZE = 220, CENTRE = SIZE / 2, RADIUS = SIZE / 2 - 12;  // a plane, in SVG units

  // An arrow from the origin to (x, y) in plane units: its shaft ends where its head
  // begins. Returns the shaft's end and the head's three corners, in SVG units.
  function arrowGeometry(x, y, unit, width) {
    const tipX = CENTRE + x * unit, tipY = CENTRE - y * unit;
    const length = Math.hypot(tipX - CENTRE, tipY - CENTRE);
    const head = Math.min(length, 6 + 1.6 * width);
    if (length < 1e-9) return { end: [CENTRE, CENTRE], head: "" };
    const ux = (tipX - CENTRE) / length, uy = (tipY - CENTRE) / length;
    const baseX = tipX - ux * head, baseY = tipY - uy * head;
    const half = 0.45 * head + 0.3 * width;
    const corners = [[tipX, tipY], [baseX - uy * half, baseY + ux * half], [baseX + uy * half, baseY - ux * half]];
    return { end: [baseX, baseY], head: corners.map(p => p.map(z => z.toFixed(2)).join(",")).join(" ") };
  }

  function setArrow(arrow, x, y, unit, width) {
    const g = arrowGeometry(x, y, unit, width);
    arrow.line.setAttribute("x2", g.end[0].toFixed(2));
    arrow.line.setAttribute("y2", g.end[1].toFixed(2));
    arrow.line.setAttribute("stroke-width", width.toFixed(2));
    arrow.head.setAttribute("points", g.head);
  }

  function makeArrow(parent, className, colour) {
    const group = svg("g", { class: className }, parent);
    const line = svg("line", { x1: CENTRE, y1: CENTRE, x2: CENTRE, y2: CENTRE, "stroke-linecap": "round" }, group);
    const head = svg("polygon", { points: "" }, group);
    line.style.stroke = colour;
    head.style.fill = colour;
    return { group, line, head };
  }

  const STYLE = `
    .capsnotes-playground { --pg-c0: #0072B2; --pg-c1: #D55E00; --pg-c2: #009E73; --pg-c3: #CC79A7;
      --pg-c4: #E69F00; --pg-c5: #56B4E9; --pg-c6: #A89400; --pg-c7: #888888; --pg-accent: #0072B2;
      border: 1px solid var(--pst-color-border, #ccc); border-radius: 6px; padding: 0.8em;
      margin: 1em 0; font-size: 0.9em; }
    html[data-theme="dark"] .capsnotes-playground { --pg-c0: #4FA8E8; --pg-c1: #F08040;
      --pg-c2: #2CC79F; --pg-c3: #E69BCB; --pg-c4: #F2B430; --pg-c5: #9AD8FF; --pg-c6: #F0E442;
      --pg-c7: #BBBBBB; --pg-accent: #4FA8E8; }
    .capsnotes-playground .pg-controls { display: flex; flex-wrap: wrap; gap: 0.5em 1.4em;
      align-items: center; margin-bottom: 0.5em; }
    .capsnotes-playground .pg-group { display: flex; flex-wrap: wrap; gap: 0.35em; align-items: center; }
    .capsnotes-playground button { font: inherit; color: inherit; background: transparent;
      border: 1px solid currentColor; border-radius: 4px; padding: 0.1em 0.55em; cursor: pointer; }
    .capsnotes-playground button[aria-pressed="true"] { background: var(--pg-accent); color: #fff;
      border-color: var(--pg-accent); }
    .capsnotes-playground input[type="range"] { width: 7em; vertical-align: middle; }
    .capsnotes-playground .pg-cards { display: flex; flex-wrap: wrap; gap: 0.8em; }
    .capsnotes-playground .pg-card { flex: 1 1 200px; max-width: 260px; margin: 0; }
    .capsnotes-playground .pg-card h4 { font-size: 1em; margin: 0.2em 0; }
    .capsnotes-playground svg { width: 100%; height: auto; display: block; overflow: hidden; }
    .capsnotes-playground .pg-axis { stroke: currentColor; opacity: 0.2; }
    .capsnotes-playground .pg-circle { stroke: currentColor; opacity: 0.45; fill: none; stroke-dasharray: 2 3; }
    .capsnotes-playground .pg-vote, .capsnotes-playground .pg-s, .capsnotes-playground .pg-halo,
    .capsnotes-playground .pg-v { pointer-events: none; }
    .capsnotes-playground .pg-s { opacity: 0.6; }
    .capsnotes-playground .pg-beyond { font-weight: bold; pointer-events: none; }
    .capsnotes-playground .pg-s line { stroke-dasharray: 5 3; }
    .capsnotes-playground .pg-handle { cursor: grab; touch-action: none; fill-opacity: 0.3; stroke-width: 1.5; }
    .capsnotes-playground .pg-handle:focus { outline: none; stroke: currentColor; stroke-width: 3; }
    .capsnotes-playground .pg-handle:focus-visible { outline: none; }
    .capsnotes-playground .pg-lengths { font-size: 0.9em; margin: 0.1em 0 0.3em; }
    .capsnotes-playground table { border-collapse: collapse; font-size: 0.85em; width: 100%; margin: 0; }
    .capsnotes-playground th, .capsnotes-playground td { padding: 0 0.3em; text-align: right;
      font-variant-numeric: tabular-nums; border: none; background: none; }
    .capsnotes-playground th:first-child, .capsnotes-playground td:first-child { text-align: left; }
    .capsnotes-playground .pg-skipped { opacity: 0.55; }
    .capsnotes-playground .pg-summary { margin: 0.6em 0 0; }
    .capsnotes-playground .pg-help { margin: 0.2em 0 0.6em; opacity: 0.85; }`;

  function build(root) {
    const limits = DATA.limits;
    const byName = Object.fromEntries(DATA.presets.map(p => [p.name, p]));
    const state = { base: null, scale: 1, r: DATA.iterations, shown: DATA.iterations, preset: DATA.default,
      extent: 2, result: null, cards: [], children: 0, parents: 0 };

    root.innerHTML = "";
    root.classList.add("capsnotes-playground");
    const controls = element("div", { class: "pg-controls" }, root);
    const presetGroup = element("div", { class: "pg-group", role: "group", "aria-label": "presets" }, controls);
    element("span", { text: "preset:" }, presetGroup);
    const presetButtons = DATA.presets.map(p => {
      const button = element("button", { type: "button", text: p.name, title: p.description }, presetGroup);
      button.addEventListener("click", () => loadPreset(p.name));
      return button;
    });
    const resetButton = element("button", { type: "button", text: "reset" }, presetGroup);
    resetButton.addEventListener("click", () => reset());

    const rLabel = element("label", { class: "pg-group" }, controls);
    element("span", { text: "iterations r" }, rLabel);
    const rInput = element("input", { type: "range", min: limits.iterations[0], max: limits.iterations[1], step: 1 }, rLabel);
    const rValue = element("output", {}, rLabel);
    rInput.addEventListener("input", () => setIterations(Number(rInput.value)));

    const scaleLabel = element("label", { class: "pg-group" }, controls);
    element("span", { text: "scale all votes" }, scaleLabel);
    const scaleInput = element("input", { type: "range", min: 0, max: SCALES.length - 1, step: 1,
      "aria-label": "scale all votes" }, scaleLabel);
    const scaleValue = element("output", {}, scaleLabel);
    scaleInput.addEventListener("input", () => setScale(SCALES[Number(scaleInput.value)]));

    const shownGroup = element("div", { class: "pg-group", role: "group", "aria-label": "iteration shown" }, root);
    element("span", { text: "show iteration:" }, shownGroup);
    const shownButtons = element("span", { class: "pg-group" }, shownGroup);

    const help = element("p", { class: "pg-help" }, root);
    help.innerHTML = "Each panel is one parent <i>j</i>. A coloured arrow is one child's vote "
      + "<i>û</i><sub><i>j</i>|<i>i</i></sub> for it, as wide as that child's coupling "
      + "<i>c<sub>ij</sub></i> to the parent; the dashed arrow is <i>s<sub>j</sub></i>, the thick "
      + "arrow in the colour of this text <i>v<sub>j</sub></i> = squash(<i>s<sub>j</sub></i>), and "
      + "the dotted circle has length 1. Drag a vote's tip, or Tab to it and move it with the arrow "
      + "keys (with Shift: larger steps).";
    const cardsBox = element("div", { class: "pg-cards" }, root);
    const summary = element("p", { class: "pg-summary", "aria-live": "polite" }, root);

    const effective = () => state.base.map(child => child.map(u => u.map(x => x * state.scale)));

    // The planes' half-width, in vote units: in steps, so that it rarely moves, and at
    // most MAX_EXTENT, so that the circle of length 1 (and v inside it) stays visible.
    // A longer vote runs to the edge, where its length is written.
    function chooseExtent() {
      const longest = Math.max(1, ...effective().flat().map(norm));
      state.extent = EXTENTS.find(e => e >= 1.1 * longest) || MAX_EXTENT;
    }

    function buildCards() {
      cardsBox.innerHTML = "";
      state.cards = [];
      for (let j = 0; j < state.parents; j++) {
        const card = element("figure", { class: "pg-card" }, cardsBox);
        element("h4", { text: `parent ${j}` }, card);
        const plane = svg("svg", { viewBox: `0 0 ${SIZE} ${SIZE}`, role: "group",
          "aria-label": `votes for parent ${j}` }, card);
        svg("line", { class: "pg-axis", x1: 0, y1: CENTRE, x2: SIZE, y2: CENTRE }, plane);
        svg("line", { class: "pg-axis", x1: CENTRE, y1: 0, x2: CENTRE, y2: SIZE }, plane);
        const circle = svg("circle", { class: "pg-circle", cx: CENTRE, cy: CENTRE }, plane);
        const votes = [];
        for (let i = 0; i < state.children; i++) votes.push(makeArrow(plane, "pg-vote", `var(--pg-c${i})`));
        const beyond = votes.map((_, i) => {  // the length of a vote that runs off the plane
          const label = svg("text", { class: "pg-beyond", "font-size": 11 }, plane);
          label.style.fill = `var(--pg-c${i})`;
          return label;
        });
        const s = makeArrow(plane, "pg-s", "currentColor");
        const handles = [];
        for (let i = 0; i < state.children; i++) {
          const handle = svg("circle", { class: "pg-handle", r: 8, tabindex: 0, role: "button",
            "aria-roledescription": "draggable vote" }, plane);
          handle.style.fill = handle.style.stroke = `var(--pg-c${i})`;
          attachDrag(handle, plane, i, j);
          attachKeys(handle, i, j);
          handles.push(handle);
        }
        // the output on top, on a halo of the page's background, so that it stands out
        // from the votes it sums (it lets the pointer through to the handles)
        const halo = makeArrow(plane, "pg-halo", "var(--pst-color-background, #fff)");
        const v = makeArrow(plane, "pg-v", "currentColor");
        const lengths = element("p", { class: "pg-lengths" }, card);
        const table = element("table", {}, card);
        const head = element("tr", {}, element("thead", {}, table));
        ["child", "c", "û·v"].forEach(text => element("th", { text, scope: "col" }, head));
        const body = element("tbody", {}, table);
        const rows = [];
        for (let i = 0; i < state.children; i++) {
          const row = element("tr", {}, body);
          const name = element("td", {}, row);
          const swatch = element("span", { text: "● ", "aria-hidden": "true" }, name);
          swatch.style.color = `var(--pg-c${i})`;
          name.appendChild(document.createTextNode(`${i}`));
          rows.push({ coupling: element("td", {}, row), agreement: element("td", {}, row) });
        }
        const note = element("p", { class: "pg-lengths pg-skipped" }, card);
        state.cards.push({ plane, circle, votes, beyond, s, halo, v, handles, lengths, rows, note });
      }
    }

    function planePoint(plane, event) {
      const point = plane.createSVGPoint();
      point.x = event.clientX;
      point.y = event.clientY;
      const p = point.matrixTransform(plane.getScreenCTM().inverse());
      const unit = RADIUS / state.extent;
      return [(p.x - CENTRE) / unit, (CENTRE - p.y) / unit];
    }

    function moveVote(i, j, x, y) {  // (x, y): the vote as shown
      state.base[i][j] = [x / state.scale, y / state.scale];
      update();
    }

    function attachDrag(handle, plane, i, j) {
      handle.addEventListener("pointerdown", event => {
        event.preventDefault();
        handle.setPointerCapture(event.pointerId);
        handle.focus();
        handle.style.cursor = "grabbing";
      });
      handle.addEventListener("pointermove", event => {
        if (!handle.hasPointerCapture(event.pointerId)) return;
        const e = state.extent, clamp = z => Math.max(-e, Math.min(e, z));  // inside the plane
        moveVote(i, j, ...planePoint(plane, event).map(clamp));
      });
      const release = event => {
        if (handle.hasPointerCapture(event.pointerId)) handle.releasePointerCapture(event.pointerId);
        handle.style.cursor = "";
      };
      handle.addEventListener("pointerup", release);
      handle.addEventListener("pointercancel", release);
    }

    function attachKeys(handle, i, j) {
      const moves = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] };
      handle.addEventListener("keydown", event => {
        const move = moves[event.key];
        if (!move) return;
        event.preventDefault();
        const step = event.shiftKey ? BIG_STEP : STEP;
        const [x, y] = effective()[i][j];
        moveVote(i, j, x + move[0] * step, y + move[1] * step);
      });
    }

    function drawShownButtons() {
      shownButtons.innerHTML = "";
      for (let t = 1; t <= state.r; t++) {
        const button = element("button", { type: "button", text: String(t),
          "aria-pressed": String(t === state.shown), "aria-label": `show iteration ${t}` }, shownButtons);
        button.addEventListener("click", () => {
          showIteration(t);
          shownButtons.children[t - 1].focus();  // the buttons were drawn anew
        });
      }
    }

    // What the panels show, in words (the page reads it to screen readers as it changes).
    function describe(step, votes) {
      const even = 1 / state.parents, all = step.c.flat();
      const favours = (i, j) => step.c[i].every((x, k) => k === j || step.c[i][j] > x + 1e-9);
      const parts = [];
      for (let j = 0; j < state.parents; j++) {
        const fans = votes.map((_, i) => i).filter(i => favours(i, j));
        const who = fans.length
          ? `favoured by ${fans.length === 1 ? "child" : "children"} `
            + fans.map(i => `${i} (${fixed(step.c[i][j], 2)})`).join(", ")
          : "favoured by no child";
        parts.push(`parent ${j}: output v of length ${fixed(norm(step.v[j]), 2)} `
          + `(s: ${fixed(norm(step.s[j]), 2)}), ${who}`);
      }
      const split = Math.max(...all) - Math.min(...all) < 1e-9
        ? `Every child splits its vote evenly (${fixed(even, 2)} to each parent).`
        : `The couplings range from ${fixed(Math.min(...all), 2)} to ${fixed(Math.max(...all), 2)} `
          + `(an even split is ${fixed(even, 2)}).`;
      return `Iteration ${state.shown} of r = ${state.r}, votes ×${state.scale}. ${split} `
        + `${parts.join("; ")}.`.replace(/^p/, "P");
    }

    // A vector as drawn: itself, or shortened to the plane's edge (and flagged) if longer.
    function onPlane([x, y]) {
      const f = Math.min(1, state.extent / Math.max(Math.abs(x), Math.abs(y), 1e-12));
      return [x * f, y * f, f < 1];
    }

    function render() {
      const votes = effective();
      const step = state.result.iterations[state.shown - 1];
      const unit = RADIUS / state.extent;
      state.cards.forEach((card, j) => {
        card.circle.setAttribute("r", (unit).toFixed(2));
        votes.forEach((child, i) => {
          const [x, y, clipped] = onPlane(child[j]);
          setArrow(card.votes[i], x, y, unit, 1 + 8 * step.c[i][j]);
          const handle = card.handles[i];
          handle.setAttribute("cx", (CENTRE + x * unit).toFixed(2));
          handle.setAttribute("cy", (CENTRE - y * unit).toFixed(2));
          const label = card.beyond[i];
          label.textContent = clipped ? fixed(norm(child[j]), 1) : "";
          // beside the shaft, near the edge: 13 px off it, at right angles
          const across = 13 / Math.max(Math.hypot(x, y), 1e-12);
          label.setAttribute("x", (CENTRE + 0.8 * x * unit + y * across).toFixed(2));
          label.setAttribute("y", (CENTRE - 0.8 * y * unit + x * across + 4).toFixed(2));
          label.setAttribute("text-anchor", "middle");
          handle.setAttribute("aria-label", `child ${i}'s vote for parent ${j}: x ${fixed(x, 2)}, `
            + `y ${fixed(y, 2)}, length ${fixed(norm(child[j]), 2)}, coupling ${fixed(step.c[i][j], 3)}; `
            + "arrow keys move it");
          const row = card.rows[i];
          row.coupling.textContent = fixed(step.c[i][j], 3);
          const a = fixed(step.agreement[i][j], 3);
          row.agreement.textContent = step.added && !a.startsWith("-") ? `+${a}` : a;
          row.agreement.classList.toggle("pg-skipped", !step.added);
        });
        setArrow(card.s, ...onPlane(step.s[j]).slice(0, 2), unit, 1.5);
        setArrow(card.halo, step.v[j][0], step.v[j][1], unit, 7);
        setArrow(card.v, step.v[j][0], step.v[j][1], unit, 3.5);
        card.lengths.textContent = `|s| = ${fixed(norm(step.s[j]), 3)}, |v| = ${fixed(norm(step.v[j]), 3)}`;
        card.note.textContent = step.added
          ? `û·v: added to the logits b for iteration ${state.shown + 1}`
          : "û·v: last pass, not added to b";
      });
      presetButtons.forEach((button, k) => button.setAttribute("aria-pressed",
        String(DATA.presets[k].name === state.preset)));
      rInput.value = state.r;
      rValue.textContent = String(state.r);
      scaleInput.value = SCALES.indexOf(state.scale);
      scaleValue.textContent = `×${state.scale}`;
      summary.textContent = describe(step, votes);
    }

    function update() {
      state.result = route(effective(), state.r);
      render();
    }

    function load(votes, preset) {
      checkVotes(votes);
      const children = votes.length, parents = votes[0].length;
      if (children < limits.children[0] || children > limits.children[1]
        || parents < limits.parents[0] || parents > limits.parents[1] || votes[0][0].length !== 2) {
        throw new Error(`the playground shows ${limits.children.join("-")} children voting 2-D vectors `
          + `for ${limits.parents.join("-")} parents, got ${children} x ${parents} x ${votes[0][0].length}`);
      }
      state.base = votes.map(child => child.map(u => u.slice()));
      state.preset = preset;
      if (children !== state.children || parents !== state.parents) {
        state.children = children;
        state.parents = parents;
        buildCards();
      }
      chooseExtent();
      update();
    }

    function loadPreset(name) {
      const preset = byName[name];
      if (!preset) throw new Error(`no preset ${JSON.stringify(name)}: ${Object.keys(byName).join(", ")}`);
      state.scale = 1;
      load(preset.votes, name);
    }

    function setIterations(r) {
      if (!Number.isInteger(r) || r < limits.iterations[0] || r > limits.iterations[1]) {
        throw new Error(`r must be an integer from ${limits.iterations.join(" to ")}, got ${r}`);
      }
      state.r = r;
      state.shown = r;
      drawShownButtons();
      update();
    }

    function showIteration(t) {
      if (!Number.isInteger(t) || t < 1 || t > state.r) throw new Error(`iteration must be 1 to ${state.r}, got ${t}`);
      state.shown = t;
      drawShownButtons();
      render();
    }

    function setScale(scale) {
      if (!SCALES.includes(scale)) throw new Error(`the scale is one of ${SCALES.join(", ")}, got ${scale}`);
      state.scale = scale;
      chooseExtent();
      update();
    }

    function reset() {
      state.r = state.shown = DATA.iterations;
      drawShownButtons();
      loadPreset(DATA.default);
    }

    reset();
    return {
      setVotes(votes) { state.scale = 1; load(votes, null); },
      setIterations, setScale, showIteration, loadPreset, reset,
      // what the page shows now: the votes as drawn (scaled), r, and their routing
      current() {
        return { votes: effective(), iterations: state.r, scale: state.scale, shown: state.shown,
          preset: state.preset, result: state.result };
      },
    };
  }

  function start() {
    if (!DATA) throw new Error("the page carries no presets for the routing playground");
    if (DATA.format !== FORMAT) throw new Error(`the playground reads presets format ${FORMAT}, not ${DATA.format}`);
    const api = { route, presets: DATA.presets };
    const root = document.getElementById("capsnotes-playground");
    if (root) {
      element("style", { text: STYLE }, document.head);
      Object.assign(api, build(root));
    }
    return api;
  }

  window.capsnotesPlayground = start();
})();
