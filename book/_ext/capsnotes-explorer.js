// The capsule explorer of chapter 9: the shipped CapsNet's decoder, run in the browser.
// Its data (book/capsbook/explorer.py) comes in two globals: the decoder's weights from
// _static/capsnotes-explorer-data.js, which the book's build writes, and the test digits
// from an output of chapter 9 earlier on the page. book/_ext/capsnotes_html.py copies this
// script beside the weights. No network, no server.
(function () {
  "use strict";
  const WEIGHTS = window.CAPSNOTES_EXPLORER_DATA, DIGITS = window.CAPSNOTES_EXPLORER_DIGITS;
  const DATA = WEIGHTS && DIGITS && Object.assign({}, WEIGHTS, DIGITS);
  const FORMAT = 2;  // capsbook.explorer.FORMAT: binary data in base64

  // --- reading the data ------------------------------------------------------------
  // Binary data travels as standard base64; atob gives one character per byte.
  function fromBase64(text) {
    const binary = atob(text);
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  }

  // Deflated (zlib) data, as Python's zlib.compress writes it.
  async function inflate(bytes) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  function float16Table() {
    const table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) {
      const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
      if (exponent === 0) table[h] = sign * Math.pow(2, -14) * (fraction / 1024);
      else if (exponent === 31) table[h] = fraction ? NaN : sign * Infinity;
      else table[h] = sign * Math.pow(2, exponent - 15) * (1 + fraction / 1024);
    }
    return table;
  }

  async function loadDecoder(weights) {
    const count = weights.count;
    const high = await inflate(fromBase64(weights.high));
    const low = fromBase64(weights.low);
    if (high.length !== count || low.length !== count) {
      throw new Error(`the decoder's byte planes hold ${high.length} and ${low.length} bytes, not ${count}`);
    }
    const table = float16Table();
    const values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = table[(high[i] << 8) | low[i]];
    const layers = [];
    let at = 0;
    for (const layer of weights.layers) {
      const size = layer.rows * layer.cols;
      const weight = values.subarray(at, at + size); at += size;
      const bias = values.subarray(at, at + layer.rows); at += layer.rows;
      layers.push({ rows: layer.rows, cols: layer.cols, weight, bias });
    }
    return layers;
  }

  // --- the decoder: 160 -> 512 -> 1024 -> 784, ReLU, ReLU, sigmoid ----------------------
  // Only the chosen class's 16 numbers are non-zero in the input (chapter 7's masking),
  // so the first layer reads 16 of its 160 columns.
  function makeDecode(layers, classes, dim) {
    return function decode(digit, vector) {
      if (!(digit >= 0 && digit < classes) || vector.length !== dim) {
        throw new Error(`decode(digit, vector) needs a digit in [0, ${classes}) and ${dim} numbers`);
      }
      const first = layers[0];
      let activation = new Float64Array(first.rows);
      for (let r = 0; r < first.rows; r++) {
        let sum = first.bias[r];
        const row = r * first.cols + digit * dim;
        for (let k = 0; k < dim; k++) sum += first.weight[row + k] * vector[k];
        activation[r] = sum > 0 ? sum : 0;
      }
      for (let l = 1; l < layers.length; l++) {
        const layer = layers[l], next = new Float64Array(layer.rows);
        for (let r = 0; r < layer.rows; r++) {
          let sum = layer.bias[r];
          const row = r * layer.cols;
          for (let c = 0; c < layer.cols; c++) sum += layer.weight[row + c] * activation[c];
          next[r] = l === layers.length - 1 ? 1 / (1 + Math.exp(-sum)) : (sum > 0 ? sum : 0);
        }
        activation = next;
      }
      return Array.from(activation);
    };
  }

  // --- the page --------------------------------------------------------------------
  function draw(canvas, pixels, size) {
    const context = canvas.getContext("2d");
    const image = context.createImageData(size, size);
    for (let i = 0; i < size * size; i++) {
      const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, pixels[i]))));
      image.data.set([shade, shade, shade, 255], 4 * i);
    }
    const small = document.createElement("canvas");
    small.width = small.height = size;
    small.getContext("2d").putImageData(image, 0, 0);
    context.imageSmoothingEnabled = false;
    context.drawImage(small, 0, 0, canvas.width, canvas.height);
  }

  function element(tag, attributes, parent) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (key === "text") node.textContent = value; else node.setAttribute(key, value);
    }
    if (parent) parent.appendChild(node);
    return node;
  }

  function build(root, data, decode, images, capsules) {
    const { size, classes, dim } = data;
    const digitCount = data.digits.length;
    const state = { digit: 0, cls: data.digits[0].prediction, vector: [], wide: false };
    const capsule = (d, c) => Array.from(capsules.subarray((d * classes + c) * dim, (d * classes + c + 1) * dim));

    root.innerHTML = "";
    const controls = element("div", { class: "cx-controls" }, root);
    const pickLabel = element("label", { text: "test digit " }, controls);
    const picker = element("select", { "aria-label": "test digit" }, pickLabel);
    data.digits.forEach((d, i) => {
      const verdict = d.prediction === d.label ? "read right" : `read as ${d.prediction}`;
      element("option", { value: i, text: `#${d.index}: a ${d.label}, ${verdict}` }, picker);
    });
    const classLabel = element("label", { text: " capsule fed to the decoder " }, controls);
    const classPicker = element("select", { "aria-label": "capsule fed to the decoder" }, classLabel);
    for (let c = 0; c < classes; c++) element("option", { value: c, text: String(c) }, classPicker);
    const wideLabel = element("label", { text: " wider range (±1)" }, controls);
    const wide = element("input", { type: "checkbox" }, wideLabel);
    wideLabel.prepend(wide);
    const reset = element("button", { type: "button", text: "reset" }, controls);

    const views = element("div", { class: "cx-views" }, root);
    const inputBox = element("figure", {}, views);
    const input = element("canvas", { width: 112, height: 112, class: "cx-input" }, inputBox);
    element("figcaption", { text: "input" }, inputBox);
    const barsBox = element("figure", {}, views);
    const bars = element("canvas", { width: 200, height: 112, class: "cx-bars" }, barsBox);
    element("figcaption", { text: "capsule lengths (chosen class in colour)" }, barsBox);
    const outputBox = element("figure", {}, views);
    const output = element("canvas", { width: 168, height: 168, class: "cx-output" }, outputBox);
    const caption = element("figcaption", {}, outputBox);

    const sliders = element("div", { class: "cx-sliders" }, root);
    const rows = [];
    for (let k = 0; k < dim; k++) {
      const row = element("div", { class: "cx-slider" }, sliders);
      const name = element("span", { class: "cx-name", text: `dimension ${k}` }, row);
      const slider = element("input", { type: "range", step: "0.005", "aria-label": `dimension ${k}` }, row);
      const value = element("span", { class: "cx-value" }, row);
      const measured = element("span", { class: "cx-measured" }, row);
      slider.addEventListener("input", () => { state.vector[k] = Number(slider.value); redraw(); });
      rows.push({ name, slider, value, measured });
    }

    function drawBars() {
      const context = bars.getContext("2d");
      context.clearRect(0, 0, bars.width, bars.height);
      const width = bars.width / classes;
      for (let c = 0; c < classes; c++) {
        const v = capsule(state.digit, c), length = Math.hypot(...v);
        const height = (bars.height - 18) * length;
        context.fillStyle = c === state.cls ? "#d95f02" : "#9a9a9a";
        context.fillRect(c * width + 3, bars.height - 16 - height, width - 6, height);
        context.fillStyle = "#333";
        context.fillText(String(c), c * width + width / 2 - 3, bars.height - 3);
      }
    }

    function resetSliders() {
      const own = capsule(state.digit, state.cls);
      const span = state.wide ? 1 : 0.25;
      const labels = (data.dimension_labels || {})[String(state.cls)] || {};
      state.vector = own.slice();
      rows.forEach((row, k) => {
        row.slider.min = (own[k] - span).toFixed(3);
        row.slider.max = (own[k] + span).toFixed(3);
        row.slider.value = own[k];
        row.measured.textContent = labels[String(k)] ? `measured, per +0.05: ${labels[String(k)]}` : "";
      });
    }

    function redraw() {
      const started = performance.now();
      const pixels = decode(state.cls, state.vector);
      draw(output, pixels, size);
      state.lastMilliseconds = performance.now() - started;
      rows.forEach((row, k) => { row.value.textContent = state.vector[k].toFixed(3); });
      const length = Math.hypot(...state.vector);
      caption.textContent = `reconstruction from capsule ${state.cls} (length ${length.toFixed(2)})`;
    }

    function show(index) {
      state.digit = index;
      state.cls = data.digits[index].prediction;
      classPicker.value = String(state.cls);
      draw(input, Array.from(images.subarray(index * size * size, (index + 1) * size * size), v => v / 255), size);
      drawBars();
      resetSliders();
      redraw();
    }

    picker.addEventListener("change", () => show(Number(picker.value)));
    classPicker.addEventListener("change", () => {
      state.cls = Number(classPicker.value); drawBars(); resetSliders(); redraw();
    });
    wide.addEventListener("change", () => { state.wide = wide.checked; resetSliders(); redraw(); });
    reset.addEventListener("click", () => { resetSliders(); redraw(); });
    show(0);
    return state;
  }

  const STYLE = `
    .capsnotes-explorer { border: 1px solid #ccc; border-radius: 6px; padding: 0.8em; margin: 1em 0; }
    .capsnotes-explorer .cx-controls { display: flex; flex-wrap: wrap; gap: 0.8em; align-items: center; }
    .capsnotes-explorer .cx-views { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: flex-end; }
    .capsnotes-explorer figure { margin: 0.6em 0; text-align: center; font-size: 0.85em; }
    .capsnotes-explorer canvas { border: 1px solid #ddd; image-rendering: pixelated; }
    .capsnotes-explorer .cx-slider { display: grid; grid-template-columns: 7em 14em 4em 1fr;
      gap: 0.6em; align-items: center; font-size: 0.85em; }
    .capsnotes-explorer .cx-measured { color: #d95f02; }`;

  async function start() {
    const root = document.getElementById("capsnotes-explorer");
    if (!WEIGHTS) throw new Error("the explorer's data file did not load");
    if (!DIGITS) throw new Error("the page carries no test digits for the explorer");
    for (const part of [WEIGHTS, DIGITS]) {
      if (part.format !== FORMAT) throw new Error(`the explorer reads data format ${FORMAT}, not ${part.format}`);
    }
    const layers = await loadDecoder(DATA.weights);
    const decode = makeDecode(layers, DATA.classes, DATA.dim);
    const size = DATA.size;
    const images = await inflate(fromBase64(DATA.images));
    const raw = fromBase64(DATA.capsules);
    const capsules = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
    const api = { decode, data: DATA, size };
    if (root) {
      element("style", { text: STYLE }, document.head);
      root.classList.add("capsnotes-explorer");
      api.state = build(root, DATA, decode, images, capsules);
    }
    return api;
  }

  const ready = start();
  window.capsnotesExplorer = {
    ready,
    decode: (digit, vector) => { throw new Error("the explorer is still loading: await capsnotesExplorer.ready"); },
  };
  ready.then(api => { Object.assign(window.capsnotesExplorer, api); });
})();
