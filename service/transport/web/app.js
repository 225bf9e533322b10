// The attention page: asks the Open Inference Protocol's REST binding (service/transport/http.py) for
// every hypothesis of each word with its attention (n_best), and draws one heat map per hypothesis as
// the CLI does (service/client/heatmap.py): source symbols across, output symbols down.
"use strict";

const $ = (id) => document.getElementById(id);

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

// POST/GET JSON; a non-2xx answer throws the server's {"error": ...} message.
async function api(path, body) {
  const init = { method: body === undefined ? "GET" : "POST", headers: headers() };
  if (body !== undefined) init.body = JSON.stringify(body);
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new Error(`${path}: the server could not be reached (${e.message})`);
  }
  const text = await response.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { /* not JSON: reported below */ }
  if (!response.ok) {
    const why = data && data.error ? data.error : text || response.statusText;
    throw new Error(`${response.status}: ${why}`);
  }
  if (data === null) throw new Error(`${path}: the answer is not JSON`);
  return data;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function loadModels() {
  const select = $("model");
  const previous = select.value;
  try {
    const index = await api("/v2/repository/index", {});
    const ready = index.filter((m) => m.state === "READY");
    // Each model by its language's name (the bundle's manifest), then its own name.
    select.replaceChildren(...ready.map((m) => {
      const label = m.language_name ? `${m.language_name} \u2014 ${m.name}` : m.name;
      const option = new Option(`${label} (v${m.version})${m.default ? " (default)" : ""}`, m.name);
      option.dataset.version = m.version;
      option.dataset.language = m.language_name || "";
      return option;
    }));
    // The choice kept across reloads of the list; else the server's default model, what a request
    // naming none gets (not the first by name, which may read no English).
    const fallback = ready.find((m) => m.default);
    if (ready.some((m) => m.name === previous)) select.value = previous;
    else if (fallback) select.value = fallback.name;
    if (!ready.length) showError("no model is READY on this server");
    else showError("");
  } catch (e) {
    showError(`models: ${e.message}`);
  }
}

// Weight 0 is white, 1 the darkest blue (matplotlib's "Blues" ends: #f7fbff .. #08306b).
const LIGHT = [255, 255, 255], DARK = [8, 48, 107];
function colour(w) {
  const t = Math.min(1, Math.max(0, Number.isFinite(w) ? w : 0));
  const c = LIGHT.map((a, i) => Math.round(a + (DARK[i] - a) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// Labels that fit the matrix, or positions (a malformed reply still renders), as the CLI does.
function sourceLabels(word, cols) {
  const letters = Array.from(word);  // code points, as the engine's list(text)
  return letters.length === cols ? letters : [...Array(cols).keys()].map(String);
}
function targetLabels(output, rows) {
  const tokens = output.split(" ").filter((t) => t !== "");
  if (tokens.length + 1 === rows) return [...tokens, "</s>"];
  if (tokens.length === rows) return tokens;  // stopped at the length cap: no </s> step
  return [...Array(rows).keys()].map(String);
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "data") Object.assign(node.dataset, v);
    else node[k] = v;
  }
  node.append(...children);
  return node;
}

// One hypothesis's (rows x cols) attention, cut out of the flat [B, N, T, S] tensor.
function heatmap(attention, [, N, T, S], b, k, rows, cols, word, output) {
  const src = sourceLabels(word, cols), tgt = targetLabels(output, rows);
  const table = el("table", { class: "heatmap", data: { word, item: b, hypothesis: k, rows, cols } });
  table.append(el("thead", {}, el("tr", {}, el("th"), ...src.map((s) => el("th", { scope: "col" }, s)))));
  const body = el("tbody");
  for (let i = 0; i < rows; i++) {
    const tr = el("tr", {}, el("th", { scope: "row" }, tgt[i]));
    for (let j = 0; j < cols; j++) {
      const w = attention[((b * N + k) * T + i) * S + j];
      tr.append(el("td", {
        class: w > 0.5 ? "dark" : "",
        title: `${tgt[i]} \u2190 ${src[j]}: ${w}`,
        textContent: w.toFixed(2),
        style: `background: ${colour(w)}`,
        data: { row: i, col: j, weight: String(w) },
      }));
    }
    body.append(tr);
  }
  table.append(body);
  return table;
}

function render(words, reply) {
  const out = Object.fromEntries(reply.outputs.map((o) => [o.name, o]));
  const N = out.OUTPUT.shape[1];
  const results = $("results");
  results.replaceChildren();
  words.forEach((word, b) => {
    const count = out.HYPOTHESIS_COUNT.data[b];
    const cols = out.INPUT_LENGTH.data[b];
    const section = el("section", { class: "word", data: { word, item: b } }, el("h2", {}, word));
    const nbest = el("table", { class: "nbest" },
      el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "output"), el("th", {}, "log-prob"))));
    const list = el("tbody");
    const maps = el("div", { class: "maps" });
    for (let k = 0; k < count; k++) {
      const output = out.OUTPUT.data[b * N + k];
      const score = out.SCORE.data[b * N + k];
      const scoreText = score === null ? "\u2014" : score.toFixed(4);
      list.append(el("tr", { data: { hypothesis: k, score: String(score) } },
        el("td", {}, String(k + 1)), el("td", { class: "output" }, output),
        el("td", { class: "score" }, scoreText)));
      const figure = el("div", { class: "hypothesis", data: { hypothesis: k, score: String(score) } },
        el("h3", {}, `${k + 1}. `, el("b", {}, output), ` (log-prob ${scoreText})`));
      if (out.ATTENTION) {
        const rows = out.OUTPUT_LENGTH.data[b * N + k];
        figure.append(heatmap(out.ATTENTION.data, out.ATTENTION.shape, b, k, rows, cols, word, output));
      } else {
        figure.append(el("p", {}, "(this model returns no attention)"));
      }
      maps.append(figure);
    }
    nbest.append(list);
    section.append(nbest, maps);
    results.append(section);
  });
}

async function transduce(event) {
  event.preventDefault();
  // An empty box asks for its placeholder's example words, as the page shows them.
  const words = ($("words").value.trim() || $("words").dataset.example).split(/\s+/).filter((w) => w !== "");
  if (!words.length) { showError("type one or more words"); return; }
  const model = $("model").value;
  if (!model) { showError("no model to ask: none is READY (or the token is missing)"); return; }
  const parameters = {
    beam_size: parseInt($("beam").value, 10), n_best: parseInt($("nbest").value, 10),
    attention_mode: $("mode").value,
  };
  if (parameters.attention_mode === "topk") parameters.top_k = parseInt($("topk").value, 10);
  for (const [k, v] of Object.entries(parameters)) {
    if (typeof v === "number" && !Number.isInteger(v)) { showError(`${k} must be a whole number`); return; }
  }
  const body = { inputs: [{ name: "TEXT", datatype: "BYTES", shape: [words.length], data: words }], parameters };
  await infer(model, body, $("submit"), "asking", (reply) => {
    render(words, reply);
    return `${words.length} word(s)`;
  });
}

// One inference call from the page: the button held and the state shown while it runs (the browser
// test waits on body[data-state]), the reply drawn by `draw` (which returns what the status says),
// or the error shown with no stale results.
async function infer(model, body, button, doing, draw) {
  button.disabled = true;
  $("status").textContent = `${doing}\u2026`;
  document.body.dataset.state = "busy";
  try {
    const reply = await api(`/v2/models/${encodeURIComponent(model)}/infer`, body);
    showError("");
    const said = draw(reply);
    $("status").textContent = `${model} v${reply.model_version}: ${said}`;
    document.body.dataset.state = "done";
  } catch (e) {
    $("results").replaceChildren();
    $("status").textContent = "";
    showError(e.message);
    document.body.dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

$("mode").addEventListener("change", () => { $("topk").disabled = $("mode").value !== "topk"; });
$("token").addEventListener("change", loadModels);
$("query").addEventListener("submit", transduce);
loadModels();
